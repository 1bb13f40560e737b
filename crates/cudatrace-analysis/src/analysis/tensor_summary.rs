//! Tensor figures per device, from the records of PyTorch's caching
//! allocator: allocated, reserved and inactive bytes, the tensors live at
//! exit and at the allocated peak by call site, and the fragmentation at
//! exit.
//!
//! "Allocated" is the bytes the tensors asked for, until their free
//! completes (a `record_stream` free stays allocated until the stream is
//! done with it): PyTorch's "active" in requested bytes, which differs from
//! its `memory_allocated()` by the rounding of blocks and by frees still
//! waiting for streams. "Reserved" is the segments' bytes, as PyTorch's;
//! "inactive" is reserved less allocated, so it includes the rounding.

use super::keys::{ByStack, DeviceKey};
use super::ranges::cut_range;
use cudatrace_events::tensors::{action_of, status, Action};
use cudatrace_events::{Event, Op};
use foldhash::HashMap;
use std::collections::BTreeMap;

/// Segments up to this size are the small pool's (PyTorch's small blocks
/// come from 2 MiB segments).
pub const SMALL_SEGMENT_BYTES: u64 = 2 << 20;

/// One moment of a device's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorBytes {
    /// `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// Bytes of live tensors.
    pub allocated: u64,
    /// Bytes of PyTorch's segments.
    pub reserved: u64,
}

impl TensorBytes {
    /// Reserved but not allocated.
    pub fn inactive(&self) -> u64 {
        self.reserved.saturating_sub(self.allocated)
    }
}

/// Reserved and inactive bytes at exit, for one class of segment size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fragmentation {
    /// Segments of the class.
    pub segments: u64,
    /// Their bytes.
    pub reserved: u64,
    /// Their bytes no tensor holds.
    pub inactive: u64,
}

/// One device's tensor figures.
#[derive(Clone, Debug, Default)]
pub struct TensorStats {
    /// Tensors allocated.
    pub allocations: u64,
    /// Tensor frees completed.
    pub frees: u64,
    /// Out-of-memory actions.
    pub ooms: u64,
    /// Now.
    pub now: TensorBytes,
    /// When allocated bytes were highest (first reached).
    pub allocated_peak: TensorBytes,
    /// Most reserved bytes.
    pub reserved_peak: u64,
    /// Figures over time: one point per change, thinned to
    /// `TIMELINE_POINTS` evenly spaced in events.
    pub timeline: Vec<TensorBytes>,
    /// Live tensors by call stack.
    pub live_by_stack: ByStack,
    /// Tensors live at the allocated peak, by call stack.
    pub peak_by_stack: ByStack,
    peak_pending: bool,
    /// Live tensors: address → (bytes, stack).
    live: HashMap<u64, (u64, u32)>,
    /// PyTorch's segments and mapped ranges: address → bytes.
    segments: BTreeMap<u64, u64>,
}

/// Most points a device's timeline keeps.
pub const TIMELINE_POINTS: usize = 2048;

impl TensorStats {
    fn apply(&mut self, action: Action, event: &Event) {
        match action {
            Action::Alloc => {
                if let Some((size, stack)) = self.live.insert(event.address, (event.size, event.stack)) {
                    self.release(size, stack); // its free was never seen
                }
                self.allocations += 1;
                self.now.allocated += event.size;
                let site = self.live_by_stack.entry(event.stack).or_default();
                site.0 += event.size;
                site.1 += 1;
                if self.now.allocated > self.allocated_peak.allocated {
                    self.allocated_peak = TensorBytes {
                        time_ns: event.time_ns,
                        ..self.now
                    };
                    self.peak_pending = true;
                }
            }
            Action::FreeCompleted => {
                if let Some((size, stack)) = self.live.remove(&event.address) {
                    self.settle_peak();
                    self.frees += 1;
                    self.release(size, stack);
                }
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                self.segments.insert(event.address, event.size);
                self.now.reserved += event.size;
                self.reserved_peak = self.reserved_peak.max(self.now.reserved);
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                self.now.reserved = self
                    .now
                    .reserved
                    .saturating_sub(self.unreserve(event.address, event.size));
            }
            Action::Oom => self.ooms += 1,
            Action::FreeRequested | Action::Snapshot => return,
        }
        self.now.time_ns = event.time_ns;
        self.timeline.push(self.now);
        if self.timeline.len() >= 2 * TIMELINE_POINTS {
            // Halve it, keeping of each two neighbours the one with more
            // allocated (the later where they tie): evenly spaced in
            // changes, and the allocated peak is never dropped.
            self.timeline = self
                .timeline
                .chunks(2)
                .map(|pair| *pair.iter().max_by_key(|point| point.allocated).expect("a pair"))
                .collect();
        }
    }

    fn release(&mut self, size: u64, stack: u32) {
        self.now.allocated = self.now.allocated.saturating_sub(size);
        if let Some(site) = self.live_by_stack.get_mut(&stack) {
            site.0 = site.0.saturating_sub(size);
            site.1 = site.1.saturating_sub(1);
            if site.1 == 0 {
                self.live_by_stack.remove(&stack);
            }
        }
    }

    /// Removes [address, address + size) from the segment pieces, trimming
    /// or splitting any piece it overlaps (PyTorch unmaps the inside of a
    /// mapped range); returns the bytes removed.
    fn unreserve(&mut self, address: u64, size: u64) -> u64 {
        cut_range(
            &mut self.segments,
            address,
            address.saturating_add(size),
            |&l| l,
            |_, l| l,
        )
    }

    fn settle_peak(&mut self) {
        if self.peak_pending {
            self.peak_by_stack = self.live_by_stack.clone();
            self.peak_pending = false;
        }
    }

    /// Small (up to `SMALL_SEGMENT_BYTES`) and large segments at exit.
    pub fn fragmentation(&self) -> [Fragmentation; 2] {
        let mut classes = [Fragmentation::default(); 2];
        let mut held: BTreeMap<u64, u64> = BTreeMap::new();
        for (&address, &(size, _)) in &self.live {
            if let Some((&start, _)) = self.segments.range(..=address).next_back() {
                *held.entry(start).or_default() += size;
            }
        }
        for (&start, &bytes) in &self.segments {
            let class = &mut classes[usize::from(bytes > SMALL_SEGMENT_BYTES)];
            class.segments += 1;
            class.reserved += bytes;
            class.inactive += bytes.saturating_sub(held.get(&start).copied().unwrap_or(0));
        }
        classes
    }

    /// Live tensors at the end: (address, bytes, stack), by address.
    pub fn live_tensors(&self) -> Vec<(u64, u64, u32)> {
        let mut live: Vec<(u64, u64, u32)> = self.live.iter().map(|(&a, &(s, k))| (a, s, k)).collect();
        live.sort_unstable();
        live
    }
}

/// Tensor figures of one process, per device.
#[derive(Clone, Debug, Default)]
pub struct TensorSummary {
    /// Per device.
    pub devices: BTreeMap<DeviceKey, TensorStats>,
    /// Tracking has stopped by now (its status record said so): the
    /// figures are those of that moment, no longer current.
    pub stopped: bool,
}

impl TensorSummary {
    /// Takes one event into account, if it is a tensor record.
    pub fn observe(&mut self, event: &Event) {
        if event.op == Op::TensorStatus && event.arg1 == status::UNAVAILABLE {
            self.stopped = true;
        }
        if let Some(action) = action_of(event) {
            self.devices
                .entry(DeviceKey::of(event.device))
                .or_default()
                .apply(action, event);
        }
    }

    /// Ends the replay: the last peak's call sites are settled.
    pub fn finish(&mut self) {
        for stats in self.devices.values_mut() {
            stats.settle_peak();
            // The end state, which halving the timeline may have dropped.
            if stats.timeline.last() != Some(&stats.now) {
                stats.timeline.push(stats.now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_events::tensor_event;

    fn action(seq: u64, action: Action, address: u64, size: u64, stack: u32) -> Event {
        tensor_event(seq, seq * 10, action, address, size, stack)
    }

    #[test]
    fn allocated_reserved_and_inactive_follow_the_actions_and_record_stream_frees_stay_allocated() {
        let mut summary = TensorSummary::default();
        let base = 0x7f00_0000_0000;
        let events = [
            action(1, Action::SegmentAlloc, base, 2 << 20, 0),
            action(2, Action::Alloc, base, 512, 7),
            action(3, Action::Alloc, base + 512, 1024, 8),
            action(4, Action::SegmentAlloc, base + (64 << 20), 20 << 20, 0),
            action(5, Action::Alloc, base + (64 << 20), 10 << 20, 9),
            // A record_stream free: requested now, completed later.
            action(6, Action::FreeRequested, base + 512, 1024, 0),
            action(7, Action::FreeCompleted, base + (64 << 20), 10 << 20, 0),
        ];
        for event in &events {
            summary.observe(event);
        }
        summary.finish();
        let gpu = &summary.devices[&DeviceKey::Gpu(0)];
        assert_eq!((gpu.allocations, gpu.frees), (3, 1));
        assert_eq!(gpu.now.allocated, 1536);
        assert_eq!(gpu.now.reserved, 22 << 20);
        assert_eq!(gpu.now.inactive(), (22 << 20) - 1536);
        assert_eq!(gpu.allocated_peak.allocated, 1536 + (10 << 20));
        assert_eq!(gpu.allocated_peak.time_ns, 50);
        assert_eq!(gpu.peak_by_stack.get(&9), Some(&(10 << 20, 1)));
        assert_eq!(gpu.live_by_stack.get(&8), Some(&(1024, 1)));
        assert_eq!(gpu.live_by_stack.get(&9), None);
        assert_eq!(
            gpu.fragmentation(),
            [
                Fragmentation {
                    segments: 1,
                    reserved: 2 << 20,
                    inactive: (2 << 20) - 1536
                },
                Fragmentation {
                    segments: 1,
                    reserved: 20 << 20,
                    inactive: 20 << 20
                }
            ]
        );
        assert_eq!(gpu.live_tensors(), vec![(base, 512, 7), (base + 512, 1024, 8)]);
        // Requests do not move the figures: one point per other action.
        assert_eq!(gpu.timeline.len(), 6);
    }

    #[test]
    fn unmapping_the_front_of_a_mapped_range_keeps_its_back() {
        let mut stats = TensorStats::default();
        stats.apply(
            Action::SegmentMap,
            &action(1, Action::SegmentMap, 0x1000_0000, 8 << 20, 0),
        );
        stats.apply(
            Action::SegmentUnmap,
            &action(2, Action::SegmentUnmap, 0x1000_0000, 2 << 20, 0),
        );
        assert_eq!(stats.now.reserved, 6 << 20);
        assert_eq!(stats.segments.get(&(0x1000_0000 + (2 << 20))), Some(&(6 << 20)));
        assert_eq!(stats.reserved_peak, 8 << 20);
        // The inside of a mapped range, as PyTorch unmaps a free block's pages.
        stats.apply(
            Action::SegmentUnmap,
            &action(3, Action::SegmentUnmap, 0x1000_0000 + (4 << 20), 2 << 20, 0),
        );
        assert_eq!(stats.now.reserved, 4 << 20);
        assert_eq!(stats.segments.get(&(0x1000_0000 + (2 << 20))), Some(&(2 << 20)));
        assert_eq!(stats.segments.get(&(0x1000_0000 + (6 << 20))), Some(&(2 << 20)));
    }
}
