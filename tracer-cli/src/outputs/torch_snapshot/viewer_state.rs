//! The state PyTorch's memory visualizer rebuilds from the trace entries:
//! the segments and the blocks in them, kept as the entries are made, so that
//! the final segments are exactly what the entries lead to.

use super::torch_blocks::{Allocation, TorchBlocks, SMALL_SEGMENT};
use cudatrace_events::tensors::Action;
use cudatrace_events::Event;
use std::collections::BTreeMap;

/// Segments above this size are "large" ones, as PyTorch's allocator names them.
pub(super) const SMALL_SEGMENT_LIMIT: u64 = 1 << 20;

/// One trace entry, before it is pickled.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) action: Action,
    pub(super) address: u64,
    pub(super) size: u64,
    pub(super) stream: u64,
    pub(super) stack: u32,
    pub(super) time_ns: u64,
    /// For `oom`.
    pub(super) device_free: u64,
}

/// A segment as the viewer sees it.
#[derive(Clone, Debug)]
pub(super) struct Segment {
    pub(super) size: u64,
    pub(super) device: u8,
    pub(super) stream: u64,
    pub(super) stack: u32,
    /// A VMM mapping (part of an expandable segment), not an allocation.
    pub(super) mapped: bool,
    /// For stream-ordered allocations from a pool of the program's own.
    pub(super) pool: u64,
    /// One of PyTorch's segments: its blocks are the tensors in
    /// [`ViewerState::torch`], not one block covering it.
    pub(super) torch: bool,
}

/// The segments the entries written so far lead to, per address. Entries
/// pass through it, so a free is written only for a block it holds.
#[derive(Default)]
pub(super) struct ViewerState {
    pub(super) segments: BTreeMap<u64, Segment>,
    /// The blocks of PyTorch's segments.
    pub(super) torch: TorchBlocks,
}

impl ViewerState {
    /// Adds a segment, first freeing any it would overlap (their frees were
    /// never seen); returns the entries that make the change.
    pub(super) fn add(&mut self, address: u64, segment: Segment, time_ns: u64, stack: u32, out: &mut Vec<(u8, Entry)>) {
        if segment.size == 0 {
            return;
        }
        let end = address.saturating_add(segment.size);
        let mut overlapping = Vec::new();
        for (&start, s) in self.segments.range(..end).rev() {
            if start >= address || start.saturating_add(s.size) > address {
                overlapping.push(start);
            }
            if start < address {
                break;
            }
        }
        for start in overlapping {
            self.remove(start, time_ns, stack, out);
        }
        let entry = Entry {
            action: if segment.mapped {
                Action::SegmentMap
            } else {
                Action::SegmentAlloc
            },
            address,
            size: segment.size,
            stream: segment.stream,
            stack: segment.stack,
            time_ns,
            device_free: 0,
        };
        out.push((segment.device, entry));
        if segment.torch {
            self.torch.segment_added(address, segment.size, segment.mapped);
        } else {
            out.push((
                segment.device,
                Entry {
                    action: Action::Alloc,
                    ..entry
                },
            ));
        }
        self.segments.insert(address, segment);
    }

    /// The PyTorch segment holding `address`, if one does.
    pub(super) fn torch_segment_at(&self, address: u64) -> Option<&Segment> {
        let (&start, segment) = self.segments.range(..=address).next_back()?;
        (segment.torch && address < start.saturating_add(segment.size)).then_some(segment)
    }

    /// Applies one of PyTorch's actions; returns whether it named a block
    /// outside PyTorch's segments (which the viewer cannot place).
    pub(super) fn tensor(&mut self, event: &Event, action: Action, out: &mut Vec<(u8, Entry)>) -> bool {
        let entry = Entry {
            action,
            address: event.address,
            size: event.size,
            stream: event.stream,
            stack: event.stack,
            time_ns: event.time_ns,
            device_free: 0,
        };
        match action {
            Action::Alloc => {
                let Some(segment) = self.torch_segment_at(event.address) else {
                    return true;
                };
                let device = segment.device;
                let allocation = Allocation {
                    requested: event.size,
                    stream: event.stream,
                    stack: event.stack,
                    small_pool: !segment.mapped && segment.size == SMALL_SEGMENT,
                    expandable: segment.mapped,
                };
                if let Some(old) = self.torch.allocate(event.address, allocation) {
                    // Its free was never seen: end it first.
                    let free = Entry {
                        size: old.requested,
                        stack: 0,
                        ..entry
                    };
                    out.push((
                        device,
                        Entry {
                            action: Action::FreeRequested,
                            ..free
                        },
                    ));
                    out.push((
                        device,
                        Entry {
                            action: Action::FreeCompleted,
                            ..free
                        },
                    ));
                }
                out.push((device, entry));
            }
            Action::FreeRequested | Action::FreeCompleted => {
                let Some(device) = self.torch_segment_at(event.address).map(|s| s.device) else {
                    return false;
                };
                let freed = if action == Action::FreeRequested {
                    self.torch.request_free(event.address)
                } else {
                    self.torch.complete_free(event.address)
                };
                let Some(tensor) = freed else {
                    return false;
                };
                let entry = Entry {
                    size: tensor.requested,
                    stack: tensor.stack,
                    ..entry
                };
                if action == Action::FreeCompleted && !tensor.pending_free {
                    out.push((
                        device,
                        Entry {
                            action: Action::FreeRequested,
                            ..entry
                        },
                    ));
                }
                out.push((device, entry));
            }
            Action::Oom => {
                if let Some(device) = event.device {
                    let entry = Entry {
                        address: 0,
                        device_free: event.address,
                        ..entry
                    };
                    out.push((device, entry));
                }
            }
            // Segments come from the driver's events; snapshots are not memory.
            Action::SegmentAlloc
            | Action::SegmentFree
            | Action::SegmentMap
            | Action::SegmentUnmap
            | Action::Snapshot => {}
        }
        false
    }

    /// Removes the segment at `address`, if there is one.
    pub(super) fn remove(&mut self, address: u64, time_ns: u64, stack: u32, out: &mut Vec<(u8, Entry)>) {
        let Some(segment) = self.segments.remove(&address) else {
            return;
        };
        let entry = Entry {
            action: Action::FreeRequested,
            address,
            size: segment.size,
            stream: segment.stream,
            stack,
            time_ns,
            device_free: 0,
        };
        if segment.torch {
            // Tensors still inside end with it (their frees were not seen).
            for (block_address, tensor) in self.torch.segment_removed(address, segment.size) {
                let free = Entry {
                    address: block_address,
                    size: tensor.requested,
                    stream: tensor.stream,
                    ..entry
                };
                if !tensor.pending_free {
                    out.push((segment.device, free));
                }
                out.push((
                    segment.device,
                    Entry {
                        action: Action::FreeCompleted,
                        ..free
                    },
                ));
            }
        } else {
            out.push((segment.device, entry));
            out.push((
                segment.device,
                Entry {
                    action: Action::FreeCompleted,
                    ..entry
                },
            ));
        }
        let action = if segment.mapped {
            Action::SegmentUnmap
        } else {
            Action::SegmentFree
        };
        out.push((segment.device, Entry { action, ..entry }));
    }
}
