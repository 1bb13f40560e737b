//! The memory semantics of one process's events: which memory is in use
//! after each event, as [`Change`]s that every output consumes.
//!
//! - An allocation at an address already live means its free was never
//!   seen: the old allocation is taken as freed first.
//! - VMM physical memory (`cuMemCreate`) is in use from its creation until
//!   it is both released and no longer mapped anywhere.
//! - Failed calls, address reservations and IPC imports change nothing in
//!   use; reservations and mappings are still reported for outputs that
//!   draw address ranges.

use cudatrace_events::{Api, Event, Kind, Op};
use foldhash::HashMap;
use std::collections::BTreeMap;

/// Memory in use: one allocation, or one VMM physical handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Address, or the handle for arrays and VMM physical memory.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// Entry point that made it.
    pub api: Api,
    /// Sort of memory.
    pub kind: Kind,
    /// Device ordinal; `None` for host memory or when unknown.
    pub device: Option<u8>,
    /// Stream of a stream-ordered allocation, else 0.
    pub stream: u64,
    /// Call stack (innermost node id; 0 = none).
    pub stack: u32,
    /// When it was made (`CLOCK_MONOTONIC` ns).
    pub time_ns: u64,
}

impl Allocation {
    /// The allocation an event names, from the event's own fields.
    pub fn of(event: &Event) -> Allocation {
        Allocation {
            address: event.address,
            size: event.size,
            api: event.api,
            kind: event.kind,
            device: event.device,
            stream: event.stream,
            stack: event.stack,
            time_ns: event.time_ns,
        }
    }

    /// Whether it counts as device memory: on a device (or an unknown one),
    /// not pinned host memory nor host-side VMM memory.
    pub fn is_device_memory(&self) -> bool {
        match self.kind {
            Kind::HostPinned => false,
            Kind::VmmPhysical => self.device.is_some(),
            kind => kind.counts_as_device_memory(),
        }
    }
}

/// What one event did to the memory in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Memory came into use.
    Allocated(Allocation),
    /// Memory went out of use. `reused`: its free was never seen; an
    /// allocation at the same address replaced it.
    Freed {
        /// The allocation, as it was made.
        allocation: Allocation,
        /// Whether the free was inferred from a reuse of the address.
        reused: bool,
    },
    /// A range of virtual addresses was reserved (`cuMemAddressReserve`).
    Reserved {
        /// Start.
        address: u64,
        /// Length.
        size: u64,
    },
    /// A reservation was given back.
    Unreserved {
        /// Start.
        address: u64,
        /// Length.
        size: u64,
    },
    /// Physical memory was mapped at `address`.
    Mapped {
        /// Start of the mapped range.
        address: u64,
        /// Its length.
        size: u64,
        /// The physical memory, as allocated (absent if its creation is not
        /// in the trace).
        physical: Option<Allocation>,
    },
    /// A mapping went away.
    Unmapped {
        /// Start of the mapped range.
        address: u64,
        /// Its length.
        size: u64,
        /// The physical memory it mapped, if known.
        physical: Option<Allocation>,
    },
    /// An allocation failed for lack of memory.
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
        /// The device's free bytes at the time.
        device_free: u64,
        /// The device's total bytes.
        device_total: u64,
        /// Refused by the memory limit (`run --limit`), not the card: then
        /// `device_free` is what the limit had left and `device_total` the limit.
        by_limit: bool,
    },
}

#[derive(Clone, Debug)]
struct Physical {
    allocation: Allocation,
    mappings: u32,
    released: bool,
}

/// One process's memory, replayed event by event.
#[derive(Debug, Default)]
pub struct ProcessMemory {
    /// Device-kind and pinned allocations, keyed by (is an array handle, address).
    live: HashMap<(bool, u64), Allocation>,
    physical: HashMap<u64, Physical>,
    /// VMM mappings: start -> (length, handle).
    mappings: BTreeMap<u64, (u64, u64)>,
    /// One past the highest sequence number seen.
    pub next_seq: u64,
    /// Sequence numbers skipped so far.
    pub gaps: u64,
    /// Memory events applied (stack records are not).
    pub events: u64,
    /// Allocations at an address already live: their free was never seen.
    pub reused_without_free: u64,
    /// Allocations that went with the driver when the program unloaded it
    /// (`dlclose`), and their bytes.
    pub freed_with_driver: (u64, u64),
}

impl ProcessMemory {
    /// A process's memory before its first event in the trace: below a
    /// fold's `folded_to`, missing sequence numbers were folded, not lost,
    /// except those the fold says were lost already.
    pub fn after_fold(fold: Option<&cudatrace_trace::Fold>) -> ProcessMemory {
        let mut memory = ProcessMemory::default();
        if let Some(fold) = fold {
            memory.next_seq = fold.folded_to;
            memory.gaps = fold.lost_below;
        }
        memory
    }

    /// Applies `event`, appending what it changed to `changes`.
    pub fn apply(&mut self, event: &Event, changes: &mut Vec<Change>) {
        self.gaps += event.seq.saturating_sub(self.next_seq);
        self.next_seq = self.next_seq.max(event.seq + 1);
        if !event.op.is_memory_event() {
            return;
        }
        self.events += 1;
        match (event.op, event.kind) {
            (_, Kind::IpcImport) | (Op::Failed, _) => {}
            (Op::Reserve, _) => changes.push(Change::Reserved {
                address: event.address,
                size: event.size,
            }),
            (Op::Unreserve, _) => changes.push(Change::Unreserved {
                address: event.address,
                size: event.size,
            }),
            (Op::Oom, _) => changes.push(Change::OutOfMemory {
                requested: event.oom_requested().unwrap_or(event.size),
                device_free: event.oom_device_free().unwrap_or(0),
                device_total: event.oom_device_total().unwrap_or(0),
                by_limit: event.refused_by_limit(),
            }),
            (Op::Alloc, Kind::VmmPhysical) => self.create_physical(event, changes),
            (Op::Free, Kind::VmmPhysical) if event.freed_with_driver() => {
                self.note_freed_with_driver(event);
                self.unmap_handle(event.address, changes);
                self.drop_physical(event.address, false, changes);
            }
            (Op::Free, Kind::VmmPhysical) => self.release_physical(event.address, changes),
            (Op::Map, _) => self.map(event, changes),
            (Op::Unmap, _) => self.unmap(event.address, event.size, changes),
            (Op::Alloc, kind) if kind.counts_as_device_memory() || kind == Kind::HostPinned => {
                let allocation = Allocation::of(event);
                if let Some(old) = self
                    .live
                    .insert((kind == Kind::Array, event.address), allocation.clone())
                {
                    self.reused_without_free += 1;
                    changes.push(Change::Freed {
                        allocation: old,
                        reused: true,
                    });
                }
                changes.push(Change::Allocated(allocation));
            }
            (Op::Free, kind) if kind.counts_as_device_memory() || kind == Kind::HostPinned => {
                if event.freed_with_driver() {
                    self.note_freed_with_driver(event);
                }
                if let Some(allocation) = self.live.remove(&(kind == Kind::Array, event.address)) {
                    changes.push(Change::Freed {
                        allocation,
                        reused: false,
                    });
                }
            }
            _ => {}
        }
    }

    /// `cuMemCreate`: physical memory in use until released and unmapped.
    fn create_physical(&mut self, event: &Event, changes: &mut Vec<Change>) {
        if self.physical.contains_key(&event.address) {
            self.reused_without_free += 1;
            self.drop_physical(event.address, true, changes);
        }
        let allocation = Allocation::of(event);
        changes.push(Change::Allocated(allocation.clone()));
        self.physical.insert(
            event.address,
            Physical {
                allocation,
                mappings: 0,
                released: false,
            },
        );
    }

    /// `cuMemRelease`: gone now if nothing maps it, else at its last unmap.
    fn release_physical(&mut self, handle: u64, changes: &mut Vec<Change>) {
        let Some(physical) = self.physical.get_mut(&handle) else {
            return;
        };
        physical.released = true;
        if physical.mappings == 0 {
            self.drop_physical(handle, false, changes);
        }
    }

    /// `cuMemMap`: physical memory mapped at an address.
    fn map(&mut self, event: &Event, changes: &mut Vec<Change>) {
        let handle = event.mapped_handle().unwrap_or(0);
        self.mappings.insert(event.address, (event.size, handle));
        let physical = self.physical.get_mut(&handle).map(|physical| {
            physical.mappings += 1;
            physical.allocation.clone()
        });
        changes.push(Change::Mapped {
            address: event.address,
            size: event.size,
            physical,
        });
    }

    /// `cuMemUnmap`: every mapping that starts in the range goes; physical
    /// memory released and no longer mapped anywhere is freed.
    fn unmap(&mut self, address: u64, size: u64, changes: &mut Vec<Change>) {
        let end = address.saturating_add(size);
        let removed: Vec<u64> = self.mappings.range(address..end).map(|(&start, _)| start).collect();
        for start in removed {
            let Some((size, handle)) = self.mappings.remove(&start) else {
                continue;
            };
            let physical = self.physical.get_mut(&handle);
            changes.push(Change::Unmapped {
                address: start,
                size,
                physical: physical.as_ref().map(|p| p.allocation.clone()),
            });
            let Some(physical) = physical else {
                continue;
            };
            physical.mappings = physical.mappings.saturating_sub(1);
            if physical.released && physical.mappings == 0 {
                self.drop_physical(handle, false, changes);
            }
        }
    }

    /// Counts an allocation that went with the driver.
    fn note_freed_with_driver(&mut self, event: &Event) {
        self.freed_with_driver.0 += 1;
        self.freed_with_driver.1 += event.size;
    }

    /// The driver went away with the physical memory of `handle`: every
    /// mapping of it went too, with no `cuMemUnmap` to say so.
    fn unmap_handle(&mut self, handle: u64, changes: &mut Vec<Change>) {
        let starts: Vec<u64> = self
            .mappings
            .iter()
            .filter(|(_, &(_, mapped))| mapped == handle)
            .map(|(&start, _)| start)
            .collect();
        for start in starts {
            if let Some((size, _)) = self.mappings.remove(&start) {
                changes.push(Change::Unmapped {
                    address: start,
                    size,
                    physical: self.physical.get(&handle).map(|p| p.allocation.clone()),
                });
            }
        }
    }

    fn drop_physical(&mut self, handle: u64, reused: bool, changes: &mut Vec<Change>) {
        if let Some(physical) = self.physical.remove(&handle) {
            changes.push(Change::Freed {
                allocation: physical.allocation,
                reused,
            });
        }
    }

    /// Device memory in use now (allocations and VMM physical memory), by
    /// address or handle.
    pub fn live_device_memory(&self) -> impl Iterator<Item = &Allocation> {
        self.live
            .values()
            .chain(self.physical.values().map(|p| &p.allocation))
            .filter(|a| a.is_device_memory())
    }

    /// Every allocation in use now: device, pinned host and VMM physical memory.
    pub fn live_allocations(&self) -> impl Iterator<Item = &Allocation> {
        self.live.values().chain(self.physical.values().map(|p| &p.allocation))
    }

    /// VMM mappings in place now: (start, length, the physical memory).
    pub fn live_mappings(&self) -> impl Iterator<Item = (u64, u64, Option<&Allocation>)> {
        self.mappings
            .iter()
            .map(|(&start, &(size, handle))| (start, size, self.physical.get(&handle).map(|p| &p.allocation)))
    }
}
