//! Where a process has no loop to find steps in, its growth is measured at
//! the low points of its memory curve: the span from its first allocation
//! to its last is cut into [`LOW_POINTS`] equal parts, and each part gives
//! its lowest moment's live bytes per call stack. What the program frees
//! after its last allocation (at exit) is never a low point.
//!
//! The state at a low is copied once, lazily: when the part's lowest value
//! so far is about to rise (an allocation) or the part ends, so a steady
//! program copies the live set about once a part. A low counts once it is
//! a hundredth below the one before, so a curve that wanders down in small
//! steps does not copy the live set at each: a low point is the lowest
//! moment to within 1%.
//!
//! In a folded trace, the low points of what folds took away come first
//! (see `cudatrace_trace::LowPointsState`): growth is measured over the
//! whole run, from those older points to the detailed span's own.

use super::allocation_kind::allocation_kind;
use super::device_stats::DeviceStats;
use super::keys::{ByStack, DeviceKey};
use super::tensor_summary::TensorSummary;
use cudatrace_events::Event;
use cudatrace_trace::{LowPoint, LowPointSite, LowPointsState};
use foldhash::HashMap;
use std::collections::BTreeMap;

/// Parts of a process's span, each giving one low point.
pub const LOW_POINTS: usize = 32;
/// A low is found to within this fraction (1/100) of its bytes.
const LOW_RESOLUTION: u64 = 100;
/// Most low points a fold keeps of what it took away: pairs of
/// neighbours merge (the lower one stays) beyond it.
pub const MOST_FOLDED_LOW_POINTS: usize = 64;
/// About the bytes one low point's call stack takes in a
/// [`LowPointsState`]: a device, a stack and a number.
const BYTES_A_LOW_POINT_SITE: u64 = 8;

/// One device's lowest moment so far in the current part.
#[derive(Clone, Debug, Default)]
struct Low {
    bytes: u64,
    /// The live set at the low is not copied yet (nothing rose since).
    pending: bool,
    at_low: ByStack,
}

/// The low points of one process, as the replay measures them.
#[derive(Clone, Debug)]
pub struct LowPoints {
    /// Whether PyTorch's tensors are measured (else the driver's allocations).
    pub tensors: bool,
    first_ns: u64,
    last_ns: u64,
    /// The part under way.
    part: usize,
    lows: BTreeMap<DeviceKey, Low>,
    /// Per device and call stack, live bytes at each low point (shorter
    /// where a stack was not live at the later ones).
    live_at_points: HashMap<(DeviceKey, u32), Vec<u64>>,
    /// When each low point taken was: the middle of the stretch it is the
    /// lowest moment of.
    times: Vec<u64>,
    done: bool,
    /// The low points of what folds took away, before `first_ns`.
    older: Vec<LowPoint>,
}

/// A device's allocated bytes and live set, as [`LowPoints::tensors`] says.
fn state<'a>(
    tensors: bool,
    device: DeviceKey,
    tensor_summary: &'a TensorSummary,
    devices: &'a BTreeMap<DeviceKey, DeviceStats>,
) -> Option<(u64, &'a ByStack)> {
    if tensors {
        tensor_summary
            .devices
            .get(&device)
            .map(|t| (t.now.allocated, &t.live_by_stack))
    } else {
        devices.get(&device).map(|d| (d.current, &d.live_by_stack))
    }
}

impl LowPoints {
    /// Parts over the span from `first_ns` to `last_ns`.
    pub fn new(tensors: bool, first_ns: u64, last_ns: u64) -> LowPoints {
        LowPoints {
            tensors,
            first_ns,
            last_ns,
            part: 0,
            lows: BTreeMap::new(),
            live_at_points: HashMap::default(),
            times: Vec::new(),
            done: false,
            older: Vec::new(),
        }
    }

    /// The same, after the low points that folds kept of what came before.
    /// They come first: one dated at or after `first_ns` (a thread's clock
    /// a little behind another's) is placed just before it.
    pub fn after_folds(mut self, state: Option<&LowPointsState>) -> LowPoints {
        if let Some(state) = state {
            let before = self.first_ns.saturating_sub(1);
            self.older = state
                .points
                .iter()
                .map(|p| LowPoint {
                    time_ns: p.time_ns.min(before),
                    sites: p.sites.clone(),
                })
                .collect();
        }
        self
    }

    /// The low points measured here, not kept by folds.
    pub fn own_points(&self) -> usize {
        self.times.len()
    }

    /// The older low points, kept by folds.
    pub fn older_points(&self) -> usize {
        self.older.len()
    }

    /// The length of a part.
    pub fn part_ns(&self) -> u64 {
        (self.last_ns.saturating_sub(self.first_ns) / LOW_POINTS as u64).max(1)
    }

    fn part_end(&self) -> u64 {
        if self.part + 1 >= LOW_POINTS {
            self.last_ns
        } else {
            self.first_ns
                .saturating_add(self.part_ns().saturating_mul(self.part as u64 + 1))
        }
    }

    /// Before `event` is counted: parts that ended give their low points,
    /// and a low about to rise is copied.
    pub fn before(&mut self, event: &Event, tensors: &TensorSummary, devices: &BTreeMap<DeviceKey, DeviceStats>) {
        if self.done || event.time_ns < self.first_ns {
            return;
        }
        if event.time_ns > self.last_ns {
            self.end_part(tensors, devices, self.part_end());
            self.done = true;
            return;
        }
        while self.part + 1 < LOW_POINTS && event.time_ns >= self.part_end() {
            self.end_part(tensors, devices, self.part_end());
            self.part += 1;
        }
        if allocation_kind(event) == Some(self.tensors) {
            let key = DeviceKey::of(event.device);
            if let (Some(low), Some((_, live))) = (self.lows.get_mut(&key), state(self.tensors, key, tensors, devices))
            {
                if low.pending {
                    low.at_low = live.clone();
                    low.pending = false;
                }
            }
        }
    }

    /// After `event` is counted: a new low of its device.
    pub fn after(&mut self, event: &Event, tensors: &TensorSummary, devices: &BTreeMap<DeviceKey, DeviceStats>) {
        if self.done || event.time_ns < self.first_ns {
            return;
        }
        let key = DeviceKey::of(event.device);
        let Some((bytes, _)) = state(self.tensors, key, tensors, devices) else {
            return;
        };
        let low = self.lows.entry(key).or_insert(Low {
            bytes: u64::MAX,
            ..Low::default()
        });
        // A new low counts once it is a hundredth below the last: a curve
        // that wanders down by small steps would copy the live set at each.
        if bytes < low.bytes - low.bytes / LOW_RESOLUTION {
            low.bytes = bytes;
            low.pending = true;
        }
    }

    /// Ends the replay: the part under way gives its low point.
    pub fn finish(&mut self, tensors: &TensorSummary, devices: &BTreeMap<DeviceKey, DeviceStats>) {
        self.finish_at(self.part_end(), tensors, devices);
    }

    /// Ends the replay at `at_ns` (a fold's cut): the part under way gives
    /// its low point so far, dated in the middle of what it covers.
    pub fn finish_at(&mut self, at_ns: u64, tensors: &TensorSummary, devices: &BTreeMap<DeviceKey, DeviceStats>) {
        if !self.done {
            self.end_part(tensors, devices, at_ns);
            self.done = true;
        }
    }

    fn part_start(&self) -> u64 {
        self.first_ns
            .saturating_add(self.part_ns().saturating_mul(self.part as u64))
    }

    /// The part under way gives its low point, dated in the middle of its
    /// start and `end_ns`.
    fn end_part(&mut self, tensors: &TensorSummary, devices: &BTreeMap<DeviceKey, DeviceStats>, end_ns: u64) {
        if self.lows.is_empty() {
            return;
        }
        let start = self.part_start();
        let at = self.times.len();
        self.times
            .push(start + end_ns.clamp(start, self.part_end().max(start)).saturating_sub(start) / 2);
        for (&key, low) in self.lows.iter_mut() {
            let Some((bytes, live)) = state(self.tensors, key, tensors, devices) else {
                continue;
            };
            if low.pending {
                low.at_low = live.clone();
            }
            for (&stack, &(held, _)) in &low.at_low {
                let series = self.live_at_points.entry((key, stack)).or_default();
                series.resize(at, 0);
                series.push(held);
            }
            // The next part starts from the state now.
            *low = Low {
                bytes,
                pending: true,
                at_low: ByStack::default(),
            };
        }
    }

    /// Low points taken, the older ones kept by folds included.
    pub fn points(&self) -> usize {
        self.older.len() + self.times.len()
    }

    /// When each low point was, oldest first: the middle of the stretch it
    /// is the lowest moment of.
    pub fn point_times(&self) -> Vec<u64> {
        self.older
            .iter()
            .map(|p| p.time_ns)
            .chain(self.times.iter().copied())
            .collect()
    }

    /// Each device's call stacks' live bytes at every low point, the older
    /// ones first.
    pub fn live_at_points(&self) -> Vec<(DeviceKey, u32, Vec<u64>)> {
        let mut series: BTreeMap<(DeviceKey, u32), Vec<u64>> = BTreeMap::new();
        for (i, point) in self.older.iter().enumerate() {
            for site in &point.sites {
                let bytes = series.entry((DeviceKey::of(site.device), site.stack)).or_default();
                bytes.resize(i, 0);
                bytes.push(site.bytes);
            }
        }
        for (&key, own) in &self.live_at_points {
            let bytes = series.entry(key).or_default();
            bytes.resize(self.older.len(), 0);
            bytes.extend_from_slice(own);
        }
        let points = self.points();
        series
            .into_iter()
            .map(|((device, stack), mut bytes)| {
                bytes.resize(points, 0);
                (device, stack, bytes)
            })
            .collect()
    }

    /// What a fold keeps of these low points: all of them, older first,
    /// neighbours merged (the lower of each pair stays) until at most
    /// [`MOST_FOLDED_LOW_POINTS`] are left and they take about `budget`
    /// bytes or fewer.
    pub fn state(&self, process: u32, budget: u64) -> LowPointsState {
        let times = self.point_times();
        let mut points: Vec<LowPoint> = times
            .iter()
            .map(|&time_ns| LowPoint {
                time_ns,
                sites: Vec::new(),
            })
            .collect();
        for (device, stack, bytes) in self.live_at_points() {
            for (point, &bytes) in points.iter_mut().zip(&bytes).filter(|(_, &b)| b > 0) {
                point.sites.push(LowPointSite {
                    device: device.ordinal(),
                    stack,
                    bytes,
                });
            }
        }
        let size = |points: &[LowPoint]| -> u64 {
            points
                .iter()
                .map(|p| 4 + p.sites.len() as u64 * BYTES_A_LOW_POINT_SITE)
                .sum()
        };
        while points.len() > 1 && (points.len() > MOST_FOLDED_LOW_POINTS || size(&points) > budget) {
            let total = |p: &LowPoint| p.sites.iter().map(|s| s.bytes).sum::<u64>();
            points = points
                .chunks(2)
                .map(|pair| {
                    pair.iter()
                        .min_by_key(|p| total(p))
                        .expect("a chunk is never empty")
                        .clone()
                })
                .collect();
        }
        LowPointsState {
            process,
            tensors: self.tensors,
            points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_events::driver_event;
    use crate::analysis::trace_summary::ProcessSummary;
    use cudatrace_events::{Kind, Op};

    fn event(time_ns: u64, op: Op, address: u64, size: u64, stack: u32) -> Event {
        driver_event(time_ns, time_ns, op, Kind::Device, address, size, stack)
    }

    /// 32 rounds, one a microsecond, each a part: a temporary (stack 1,
    /// 1000 bytes) allocated and freed around a buffer (stack 2, 10 bytes)
    /// that is kept when `leak`; then, later, everything is freed, as at
    /// exit. Each stack's bytes at the low points.
    fn run(leak: bool) -> Vec<(DeviceKey, u32, Vec<u64>)> {
        let mut events = Vec::new();
        let mut kept = Vec::new();
        for round in 0..32 {
            let (at, temporary, buffer) = (
                round * 1000,
                0x1_0000_0000 + round * 0x1000,
                0x2_0000_0000 + round * 0x1000,
            );
            events.push(event(at + 1, Op::Alloc, temporary, 1000, 1));
            events.push(event(at + 2, Op::Alloc, buffer, 10, 2));
            events.push(event(at + 3, Op::Free, temporary, 1000, 0));
            if leak {
                kept.push(buffer);
            } else {
                events.push(event(at + 4, Op::Free, buffer, 10, 0));
            }
        }
        for (n, buffer) in kept.into_iter().enumerate() {
            events.push(event(40_000 + n as u64, Op::Free, buffer, 10, 0));
        }
        let mut process = ProcessSummary {
            low_points: Some(LowPoints::new(false, 0, 32_000)),
            ..ProcessSummary::default()
        };
        let mut changes = Vec::new();
        for e in &events {
            process.apply(e, &mut changes);
        }
        process.finish();
        let low = process.low_points.as_ref().unwrap();
        assert_eq!(low.points(), LOW_POINTS);
        let mut series: Vec<_> = low.live_at_points();
        series.sort();
        series
    }

    #[test]
    fn a_kept_buffer_rises_at_every_low_point_and_a_temporary_never_shows() {
        // Part 0's low is after its temporary's free (one buffer); each
        // later part's is at its start, before its temporary: r buffers.
        // The exit's frees come after the last allocation: no low point.
        let mut expected = vec![10];
        expected.extend((1..32).map(|r| r * 10));
        assert_eq!(run(true), vec![(DeviceKey::Gpu(0), 2, expected)]);
    }

    #[test]
    fn a_program_that_frees_what_it_makes_has_nothing_at_its_low_points() {
        assert_eq!(run(false), vec![]);
    }

    #[test]
    fn a_fold_keeps_older_points_first_merging_neighbours_into_the_lower() {
        // 100 older points, before this span's first allocation at 1 ms:
        // point i holds i bytes at stack 5, and 1 byte more at odd points.
        let older = LowPointsState {
            process: 0,
            tensors: false,
            points: (0..100u64)
                .map(|i| LowPoint {
                    time_ns: i * 10,
                    sites: vec![LowPointSite {
                        device: Some(0),
                        stack: 5,
                        bytes: 1000 + i % 2,
                    }],
                })
                .collect(),
        };
        let low = LowPoints::new(false, 1_000_000, 2_000_000).after_folds(Some(&older));
        assert_eq!((low.points(), low.older_points()), (100, 100));
        let state = low.state(3, u64::MAX);
        // 100 → 50: the even point of each pair, the lower.
        assert_eq!(state.points.len(), 50);
        assert_eq!(state.process, 3);
        assert!(state
            .points
            .iter()
            .enumerate()
            .all(|(i, p)| p.time_ns == i as u64 * 20 && p.sites[0].bytes == 1000));
        // A budget of 100 bytes, at 12 bytes a point: 50, 25, 13, then 7.
        assert_eq!(low.state(3, 100).points.len(), 7);
    }

    #[test]
    fn a_stretch_ended_at_a_cut_is_dated_in_the_middle_of_what_it_covers() {
        // Parts of 1,000 ns; the first holds allocations from 10 to 100 ns
        // and is ended at a cut at 200 ns: its point is dated at 100, not
        // at the middle of the whole part (500), which may lie after the cut.
        let mut process = ProcessSummary {
            low_points: Some(LowPoints::new(false, 0, 32_000)),
            ..ProcessSummary::default()
        };
        let mut changes = Vec::new();
        for (i, at) in [10u64, 50, 100].into_iter().enumerate() {
            process.apply(&event(at, Op::Alloc, 0x1000 * (i as u64 + 1), 100, 1), &mut changes);
        }
        let (tensors, devices) = (process.tensors.clone(), process.devices.clone());
        let low = process.low_points.as_mut().unwrap();
        low.finish_at(200, &tensors, &devices);
        assert_eq!(low.point_times(), vec![100]);
        assert_eq!(low.own_points(), 1);
    }
}
