//! The passes over the trace: which driver allocations are PyTorch's
//! segments, how many entries each process has in the window, and the
//! entries themselves, pickled as they come.

use super::entry_ring::{EntryRing, RingEntry};
use super::fragment::Fragment;
use super::process_snapshot::{LeftOut, ProcessSnapshot};
use super::viewer_state::{Entry, Segment, ViewerState};
use cudatrace_analysis::Progress;
use cudatrace_analysis::{Change, Consumer, Replay, Step, TraceIndex};
use cudatrace_events::tensors::{self, Action};
use cudatrace_events::{Event, Kind, Op};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self};
use std::path::Path;

/// The first pass of a trace with tensors: which driver allocations and
/// mappings are PyTorch's segments, so that their blocks are its tensors.
/// A segment action names the `cuMemAlloc` at its address; a mapped range
/// of an expandable segment, every `cuMemMap` inside it.
pub(super) fn claim_torch_segments(
    index: &TraceIndex,
    selected: &[usize],
    snapshots: &mut [Option<ProcessSnapshot>],
    progress: &Progress,
) {
    #[derive(Default)]
    struct Seen {
        allocations: HashMap<u64, u64>,
        mappings: BTreeMap<u64, u64>,
    }
    let mut seen: HashMap<usize, Seen> = HashMap::new();
    let mut claim = |step: &Step| {
        let (process, event) = (step.process, step.event);
        let Some(snapshot) = &mut snapshots[process] else {
            return;
        };
        if step.info.tensor_actions == 0 {
            return;
        }
        let seen = seen.entry(process).or_default();
        match (event.op, tensors::action_of(event)) {
            (Op::Alloc, _) if event.kind == Kind::Device => {
                seen.allocations.insert(event.address, event.seq);
            }
            (Op::Map, _) => {
                seen.mappings.insert(event.address, event.seq);
            }
            (Op::Unmap, _) => {
                let end = event.address.saturating_add(event.size);
                let gone: Vec<u64> = seen.mappings.range(event.address..end).map(|(&a, _)| a).collect();
                for address in gone {
                    seen.mappings.remove(&address);
                }
            }
            (_, Some(Action::SegmentAlloc)) => {
                if let Some(&seq) = seen.allocations.get(&event.address) {
                    snapshot.claimed.insert(seq);
                }
            }
            (_, Some(Action::SegmentMap)) => {
                let end = event.address.saturating_add(event.size);
                snapshot
                    .claimed
                    .extend(seen.mappings.range(event.address..end).map(|(_, &seq)| seq));
            }
            _ => {}
        }
    };
    let Ok(_) = Replay::new(index, progress)
        .only(selected)
        .events_only()
        .run(&mut claim);
}

/// The entries `changes` (made by `event`) lead to, through `state`.
pub(super) fn entries_of(
    event: &Event,
    changes: &[Change],
    claimed: &HashSet<u64>,
    state: &mut ViewerState,
    out: &mut Vec<(u8, Entry)>,
    left_out: &mut LeftOut,
) {
    if event.op == Op::Alloc && event.kind == Kind::IpcImport {
        left_out.ipc_imports += 1;
    }
    if let Some(action) = tensors::action_of(event) {
        if state.tensor(event, action, out) {
            left_out.tensors_outside += 1;
        }
        return;
    }
    let torch = claimed.contains(&event.seq);
    left_out.torch_segments |= torch;
    for change in changes {
        match change {
            Change::Allocated(a) => match (a.kind, a.device) {
                (Kind::HostPinned, _) => add(&mut left_out.pinned_host, a.size),
                (Kind::Array, _) => add(&mut left_out.arrays, a.size),
                (Kind::VmmPhysical, _) => {}
                (_, None) => add(&mut left_out.unknown_device, a.size),
                (_, Some(device)) => {
                    let segment = Segment {
                        size: a.size,
                        device,
                        stream: a.stream,
                        stack: a.stack,
                        mapped: false,
                        pool: if a.kind == Kind::Pool {
                            event.pool().unwrap_or(0)
                        } else {
                            0
                        },
                        torch,
                    };
                    state.add(a.address, segment, a.time_ns, a.stack, out);
                }
            },
            Change::Freed { allocation: a, .. } => {
                if !matches!(a.kind, Kind::HostPinned | Kind::Array | Kind::VmmPhysical) && a.device.is_some() {
                    state.remove(a.address, event.time_ns, event.stack, out);
                }
            }
            Change::Mapped {
                address,
                size,
                physical,
            } => {
                let device = physical.as_ref().and_then(|p| p.device).or(event.device);
                let Some(device) = device else {
                    add(&mut left_out.unknown_device, *size);
                    continue;
                };
                let segment = Segment {
                    size: *size,
                    device,
                    stream: 0,
                    stack: physical.as_ref().map_or(event.stack, |p| p.stack),
                    mapped: true,
                    pool: 0,
                    torch,
                };
                state.add(*address, segment, event.time_ns, event.stack, out);
            }
            Change::Unmapped { address, .. } => state.remove(*address, event.time_ns, event.stack, out),
            Change::OutOfMemory {
                requested, device_free, ..
            } => {
                if let Some(device) = event.device {
                    let entry = Entry {
                        action: Action::Oom,
                        address: 0,
                        size: *requested,
                        stream: event.stream,
                        stack: event.stack,
                        time_ns: event.time_ns,
                        device_free: *device_free,
                    };
                    out.push((device, entry));
                }
            }
            Change::Reserved { .. } | Change::Unreserved { .. } => {}
        }
    }
}

pub(super) fn add(counter: &mut (u64, u64), size: u64) {
    counter.0 += 1;
    counter.1 += size;
}

/// The last pass: pickles the entries of the events inside the window,
/// as a consumer of the replay.
pub(super) struct EntryWriter<'a> {
    pub(super) index: &'a TraceIndex,
    pub(super) snapshots: &'a mut [Option<ProcessSnapshot>],
    pub(super) folder: &'a Path,
    pub(super) entries: Vec<(u8, Entry)>,
    /// The devices the current event's entries were for so far.
    pub(super) devices_seen: Vec<u8>,
}

impl Consumer for EntryWriter<'_> {
    type Error = io::Error;

    fn step(&mut self, step: &Step) -> Result<(), Self::Error> {
        let Some(snapshot) = &mut self.snapshots[step.process] else {
            return Ok(());
        };
        let entries = &mut self.entries;
        entries.clear();
        entries_of(
            step.event,
            step.changes,
            &snapshot.claimed,
            &mut snapshot.state,
            entries,
            &mut snapshot.left_out,
        );
        if entries.is_empty() {
            return Ok(());
        }
        let highest = entries.iter().map(|&(device, _)| device).max();
        snapshot.highest_device = snapshot.highest_device.max(highest);
        if step.before_window {
            snapshot.left_out.before_window += entries.len() as u64;
            return Ok(());
        }
        // With a limit, each device's newest entries are kept in its ring,
        // an event's entries on a device together; the rest are pickled now.
        let devices_seen = &mut self.devices_seen;
        devices_seen.clear();
        for &(device, entry) in entries.iter() {
            let starts_event = !devices_seen.contains(&device);
            if starts_event {
                devices_seen.push(device);
            }
            if let Some(max) = snapshot.left_out.max_events {
                let ring = snapshot.rings.entry(device).or_insert_with(|| EntryRing::new(max));
                ring.push(RingEntry { entry, starts_event }, self.folder)?;
                continue;
            }
            let fragment = fragment_of(&mut snapshot.devices, device, self.folder)?;
            fragment.write_entry(self.index, step.info, &entry, &mut snapshot.memo)?;
            snapshot.entries_written += 1;
        }
        Ok(())
    }
}

/// The fragment of `device`, made in `folder` with its first entry.
pub(super) fn fragment_of<'a>(
    devices: &'a mut BTreeMap<u8, Fragment>,
    device: u8,
    folder: &Path,
) -> io::Result<&'a mut Fragment> {
    Ok(match devices.entry(device) {
        std::collections::btree_map::Entry::Occupied(slot) => slot.into_mut(),
        std::collections::btree_map::Entry::Vacant(slot) => slot.insert(Fragment::create(folder)?),
    })
}

/// Pickles what each device's ring kept, oldest first, after the replay.
pub(super) fn write_kept_entries(index: &TraceIndex, snapshot: &mut ProcessSnapshot, folder: &Path) -> io::Result<()> {
    let info = &index.processes[snapshot.process];
    for (device, ring) in std::mem::take(&mut snapshot.rings) {
        let mut written = 0;
        let (devices, memo) = (&mut snapshot.devices, &mut snapshot.memo);
        let left_out = ring.drain(|entry| {
            written += 1;
            fragment_of(devices, device, folder)?.write_entry(index, info, entry, memo)
        })?;
        snapshot.entries_written += written;
        snapshot.left_out.over_max_events += left_out;
    }
    Ok(())
}
