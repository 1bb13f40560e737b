//! The report's figures: per process and device, allocations, frees, the
//! peak and what was in use at it, memory live at exit and failures, each
//! by call site. Built from the [`Change`]s of one replay.

use super::device_stats::{DeviceStats, HeldAtOom, HostStats, Oom, OomsKept};
use super::engine::{Both, Consumer, Replay, Replayed, Step};
use super::footprint::{DeviceFootprint, FootprintTracker};
use super::keys::{ByStack, DeviceKey};
use super::low_points::LowPoints;
use super::replay::{Allocation, Change, ProcessMemory};
use super::step_finding::{Boundaries, StepCounts};
use super::step_measures::Steps;
use super::tensor_summary::TensorSummary;
use super::trace_index::TraceIndex;
use super::unreadable::UnreadBlock;
use crate::system::progress::Progress;
use cudatrace_events::tensors::Action;
use cudatrace_events::Event;
use cudatrace_trace::{Fold, FoldedSite};
use std::collections::BTreeMap;
use std::convert::Infallible;

pub use super::device_stats::OOM_STATES_KEPT;

/// One process image's figures.
#[derive(Debug, Default)]
pub struct ProcessSummary {
    /// Its memory, replayed to the end.
    pub memory: ProcessMemory,
    /// Per device.
    pub devices: BTreeMap<DeviceKey, DeviceStats>,
    /// Pinned host memory.
    pub host: HostStats,
    /// PyTorch's tensors, per device.
    pub tensors: TensorSummary,
    /// Its training steps, where its allocations repeat a loop.
    pub steps: Option<Steps>,
    /// The low points of its memory curve, where it has no steps.
    pub low_points: Option<LowPoints>,
    /// The memory limit it ran under (`run --limit`), per device it used.
    pub memory_limits: BTreeMap<DeviceKey, u64>,
    /// Why it kept the limit to itself rather than share the job's ledger
    /// (`cudatrace_events::measures::limit_ledger`), where it did.
    pub limit_kept_alone: Option<u64>,
    /// How many out-of-memory failures each device keeps in detail.
    pub(super) ooms_kept: OomsKept,
    /// Below this sequence number the trace was folded (see
    /// `cudatrace_trace::Fold`): allocations and frees there are counted
    /// by the fold, not by the events kept from them.
    pub(super) folded_to: u64,
    /// The fold's counts.
    pub(super) folded_sites: Vec<FoldedSite>,
    /// Counts made from events kept below the fold, taken back at the end.
    pub(super) recounted: BTreeMap<Option<DeviceKey>, (u64, u64, u64)>,
    /// The same, of tensors: allocations and frees.
    pub(super) recounted_tensors: BTreeMap<DeviceKey, (u64, u64)>,
    /// Steps go on from a fold's kept state: only events from here on count.
    pub(super) steps_from: u64,
    /// Where a fold will cut (the collector's pass): the steps as they stand
    /// before this sequence number are kept in `steps_at_cut`.
    pub(super) steps_cut: Option<u64>,
    pub(super) steps_at_cut: Option<Steps>,
    /// The low points as they stand before that cut.
    pub(super) low_points_at_cut: Option<LowPoints>,
}

/// What a fold keeps of a process's steps, or of its low points where it
/// has no steps, as they stood at its cut.
pub struct AtCut {
    /// Its steps.
    pub steps: Option<Steps>,
    /// Its low points.
    pub low_points: Option<LowPoints>,
}

impl ProcessSummary {
    /// Applies one event: replays it into [`ProcessSummary::memory`] and
    /// counts what it changed (the tests' replay of a few events).
    #[cfg(any(test, feature = "testing"))]
    pub fn apply(&mut self, event: &Event, changes: &mut Vec<Change>) {
        changes.clear();
        self.memory.apply(event, changes);
        self.observe(event, changes);
    }

    /// A summary of a process whose older events were folded by `fold`.
    fn after_fold(mut self, fold: Option<&Fold>) -> ProcessSummary {
        if let Some(fold) = fold {
            self.folded_to = fold.folded_to;
            self.folded_sites = fold.sites.clone();
        }
        self
    }

    /// Its low points as they stand now, the stretch under way ending at
    /// `at_ns`.
    fn low_points_finished(&self, at_ns: u64) -> Option<LowPoints> {
        let mut low_points = self.low_points.clone()?;
        low_points.finish_at(at_ns, &self.tensors, &self.devices);
        Some(low_points)
    }

    /// Counts what one event, replayed elsewhere, changed.
    pub fn observe(&mut self, event: &Event, changes: &[Change]) {
        let counts_steps = event.seq >= self.steps_from;
        if self.steps_cut.is_some_and(|cut| event.seq >= cut) {
            if self.steps_at_cut.is_none() {
                self.steps_at_cut = self.steps.clone();
            }
            if self.low_points_at_cut.is_none() {
                self.low_points_at_cut = self.low_points_finished(event.time_ns);
            }
        }
        if let Some(steps) = self.steps.as_mut().filter(|_| counts_steps) {
            steps.before(event, &self.tensors, &self.devices);
        }
        if let Some(low_points) = &mut self.low_points {
            low_points.before(event, &self.tensors, &self.devices);
        }
        if event.seq < self.folded_to {
            match cudatrace_events::tensors::action_of(event) {
                Some(Action::Alloc) => self.recounted_tensors.entry(DeviceKey::of(event.device)).or_default().0 += 1,
                Some(Action::FreeCompleted) => {
                    self.recounted_tensors.entry(DeviceKey::of(event.device)).or_default().1 += 1
                }
                _ => {}
            }
        }
        self.tensors.observe(event);
        if let Some(limit) = event.memory_limit() {
            self.memory_limits.insert(DeviceKey::of(event.device), limit);
            if let Some(why) = event.memory_limit_kept_alone() {
                self.limit_kept_alone = Some(why);
            }
        }
        for change in changes {
            self.count(change, event);
        }
        if let Some(steps) = self.steps.as_mut().filter(|_| event.seq >= self.steps_from) {
            steps.after(event, &self.tensors, &self.devices);
        }
        if let Some(low_points) = &mut self.low_points {
            low_points.after(event, &self.tensors, &self.devices);
        }
    }

    fn device(&mut self, device: Option<u8>) -> &mut DeviceStats {
        self.devices.entry(DeviceKey::of(device)).or_default()
    }

    /// Counts one change that `event` made.
    pub fn count(&mut self, change: &Change, event: &Event) {
        if event.seq < self.folded_to {
            // Pinned host memory is counted under no device.
            let key = |a: &Allocation| a.is_device_memory().then(|| DeviceKey::of(a.device));
            match change {
                Change::Allocated(a) => {
                    let entry = self.recounted.entry(key(a)).or_default();
                    entry.0 += 1;
                    entry.2 += a.size;
                }
                Change::Freed { allocation: a, .. } => self.recounted.entry(key(a)).or_default().1 += 1,
                _ => {}
            }
        }
        match change {
            Change::Allocated(a) if a.is_device_memory() => self.device(a.device).add(a.size, a.stack, a.time_ns),
            Change::Allocated(a) => {
                self.host.allocations += 1;
                self.host.current += a.size;
                self.host.peak = self.host.peak.max(self.host.current);
            }
            Change::Freed { allocation: a, .. } if a.is_device_memory() => {
                self.device(a.device).remove(a.size, a.stack)
            }
            Change::Freed { allocation: a, .. } => {
                self.host.frees += 1;
                self.host.current = self.host.current.saturating_sub(a.size);
            }
            Change::OutOfMemory {
                requested,
                device_free,
                device_total,
                by_limit,
            } => {
                let key = DeviceKey::of(event.device);
                let tracked = &self.tensors;
                let device = self.devices.entry(key).or_default();
                let held = (device.ooms.len() < OOM_STATES_KEPT).then(|| {
                    let tensors = tracked
                        .devices
                        .get(&key)
                        .filter(|t| t.allocations > 0 && !tracked.stopped)
                        .map(|t| (t.now, t.live_by_stack.clone()));
                    Box::new(HeldAtOom {
                        live_bytes: device.current,
                        live_by_stack: device.live_by_stack.clone(),
                        tensors,
                    })
                });
                let oom = Oom {
                    requested_bytes: *requested,
                    api: event.api,
                    device_free: *device_free,
                    device_total: *device_total,
                    by_limit: *by_limit,
                    stack: event.stack,
                    time_ns: event.time_ns,
                    held,
                };
                device.failed(oom, self.ooms_kept.0);
            }
            _ => {}
        }
    }

    /// Events lost: gaps in the sequence numbers, and those the process
    /// handed out after the last one in the trace.
    pub fn lost_events(&self, reserved_events: Option<u64>) -> u64 {
        let trailing = reserved_events.map_or(0, |reserved| reserved.saturating_sub(self.memory.next_seq));
        self.memory.gaps + trailing
    }

    /// Device memory live at the end, per device, sorted by address.
    pub fn live_at_exit(&self) -> BTreeMap<DeviceKey, Vec<&Allocation>> {
        let mut by_device: BTreeMap<DeviceKey, Vec<&Allocation>> = BTreeMap::new();
        for allocation in self.memory.live_device_memory() {
            by_device
                .entry(DeviceKey::of(allocation.device))
                .or_default()
                .push(allocation);
        }
        by_device.values_mut().for_each(|list| list.sort_by_key(|a| a.address));
        by_device
    }

    /// Ends the replay: the last peak's call sites are settled, and the
    /// counts below a fold are the fold's.
    pub fn finish(&mut self) {
        self.devices.values_mut().for_each(DeviceStats::settle_peak);
        for (key, (allocations, frees, bytes)) in std::mem::take(&mut self.recounted) {
            let Some(key) = key else {
                self.host.allocations = self.host.allocations.saturating_sub(allocations);
                self.host.frees = self.host.frees.saturating_sub(frees);
                continue;
            };
            let stats = self.devices.entry(key).or_default();
            stats.allocations = stats.allocations.saturating_sub(allocations);
            stats.frees = stats.frees.saturating_sub(frees);
            stats.bytes_allocated = stats.bytes_allocated.saturating_sub(bytes);
        }
        for (key, (allocations, frees)) in std::mem::take(&mut self.recounted_tensors) {
            if let Some(stats) = self.tensors.devices.get_mut(&key) {
                stats.allocations = stats.allocations.saturating_sub(allocations);
                stats.frees = stats.frees.saturating_sub(frees);
            }
        }
        for site in std::mem::take(&mut self.folded_sites) {
            let key = DeviceKey::of(site.device);
            if site.tensors {
                let stats = self.tensors.devices.entry(key).or_default();
                stats.allocations += site.allocations;
                stats.frees += site.frees;
                continue;
            }
            if site.host {
                self.host.allocations += site.allocations;
                self.host.frees += site.frees;
                continue;
            }
            let stats = self.devices.entry(key).or_default();
            stats.allocations += site.allocations;
            stats.frees += site.frees;
            stats.bytes_allocated += site.bytes;
        }
        self.tensors.finish();
        if let Some(steps) = &mut self.steps {
            steps.finish(&self.tensors, &self.devices);
        }
        if let Some(low_points) = &mut self.low_points {
            low_points.finish(&self.tensors, &self.devices);
        }
    }
}

/// Every process's figures.
pub struct Summary {
    /// Per process, in the order of [`TraceIndex::processes`].
    pub processes: Vec<ProcessSummary>,
    /// Per process, where its driver-used bytes went, per device.
    pub footprints: Vec<Vec<DeviceFootprint>>,
    /// Blocks that could not be read again.
    pub stream_errors: Vec<UnreadBlock>,
}

impl Summary {
    /// The run's `n`th out-of-memory failure (from 1, in time order, as
    /// `--at oom:N` counts): (process, device, failure); else how many
    /// failures the run has.
    /// The summary must keep at least `n` failures a device (see
    /// [`Summary::build_without_steps_keeping`]): the `n`th of the run is
    /// among each device's first `n`.
    pub fn oom(&self, n: usize) -> Result<(usize, DeviceKey, &Oom), usize> {
        let ooms = self.ooms_in_time_order();
        let count = usize::try_from(self.oom_count()).unwrap_or(usize::MAX);
        n.checked_sub(1).and_then(|i| ooms.get(i).copied()).ok_or(count)
    }

    /// Out-of-memory failures of the run in all (the limit's refusals
    /// included), kept in detail or not.
    pub fn oom_count(&self) -> u64 {
        self.processes
            .iter()
            .flat_map(|p| p.devices.values())
            .map(|d| d.oom_sites.total())
            .sum()
    }

    /// The out-of-memory failures of the run kept in detail (the memory
    /// limit's refusals included), in time order: (process, device,
    /// failure).
    pub fn ooms_in_time_order(&self) -> Vec<(usize, DeviceKey, &Oom)> {
        let mut ooms: Vec<(usize, DeviceKey, &Oom)> = self
            .processes
            .iter()
            .enumerate()
            .flat_map(|(process, summary)| {
                summary
                    .devices
                    .iter()
                    .flat_map(move |(&device, stats)| stats.ooms.iter().map(move |o| (process, device, o)))
            })
            .collect();
        ooms.sort_by_key(|&(process, _, oom)| (oom.time_ns, process));
        ooms
    }

    /// Replays the whole trace, after a first pass that finds each
    /// process's steps (or low points) for its growth. The commands count
    /// what the step finder needs while they read the index
    /// ([`Summary::build_counted`]); the tests check the two agree.
    #[cfg(any(test, feature = "testing"))]
    pub fn build(index: &TraceIndex, progress: &Progress) -> Summary {
        let boundaries = super::step_finding::find_boundaries(index, &Progress::new("finding steps", index.events));
        Summary::replay(index, progress, boundaries, &mut |_: &Step| {})
    }

    /// Replays the whole trace once, without steps or growth: for outputs
    /// that show a moment (the peak, an OOM, the exit), not a run's course.
    pub fn build_without_steps(index: &TraceIndex, progress: &Progress) -> Summary {
        Summary::build_without_steps_keeping(index, progress, OomsKept::default())
    }

    /// [`Summary::build_without_steps`], each device keeping `kept`
    /// out-of-memory failures in detail.
    pub fn build_without_steps_keeping(index: &TraceIndex, progress: &Progress, kept: OomsKept) -> Summary {
        let boundaries = index.processes.iter().map(|_| None).collect();
        let mut building = SummaryBuilder::new(index, boundaries).keeping_ooms(kept);
        let Ok(replayed) = Replay::new(index, progress).run(&mut building);
        building.finish(replayed)
    }

    /// Replays the whole trace, each process's steps (or low points) found
    /// from `counts`, taken while the index was read
    /// ([`StepCounts::for_whole_trace`]), and hands each step to
    /// `alongside` too: one pass for the summary and another consumer.
    pub fn build_counted<C: Consumer<Error = Infallible>>(
        index: &TraceIndex,
        counts: StepCounts,
        progress: &Progress,
        alongside: &mut C,
    ) -> Summary {
        let (boundaries, _) = counts.found(index);
        Summary::build_found(index, boundaries, progress, alongside)
    }

    /// [`Summary::build_counted`] with each process's steps (or low
    /// points) already found from the counts, for a consumer that needs
    /// them before the replay (the page's charts, finer over the steps).
    pub fn build_found<C: Consumer<Error = Infallible>>(
        index: &TraceIndex,
        boundaries: Vec<Option<Boundaries>>,
        progress: &Progress,
        alongside: &mut C,
    ) -> Summary {
        Summary::replay(index, progress, boundaries, alongside)
    }

    pub(super) fn replay<C: Consumer<Error = Infallible>>(
        index: &TraceIndex,
        progress: &Progress,
        boundaries: Vec<Option<Boundaries>>,
        alongside: &mut C,
    ) -> Summary {
        let mut building = SummaryBuilder::new(index, boundaries);
        let Ok(replayed) = Replay::new(index, progress).run(&mut Both(&mut building, alongside));
        building.finish(replayed)
    }

    /// Each process's steps (or low points) as they stand just before its
    /// cut `cuts[i]` (`None`: at the end), in a run still going (no step is
    /// taken for the last): what a fold keeps of them. `boundaries` are
    /// `find_boundaries_so_far`'s. One replay, handing each step to
    /// `alongside` too.
    pub fn steps_at_cuts<C: Consumer<Error = Infallible>>(
        index: &TraceIndex,
        boundaries: Vec<Option<Boundaries>>,
        cuts: &[Option<u64>],
        progress: &Progress,
        alongside: &mut C,
    ) -> Vec<AtCut> {
        let mut building = SummaryBuilder::new(index, boundaries);
        building.steps_only = true;
        for (process, cut) in building.processes.iter_mut().zip(cuts) {
            process.steps_cut = Some(cut.unwrap_or(u64::MAX));
        }
        let Ok(_) = Replay::new(index, progress).run(&mut Both(&mut building, alongside));
        building
            .processes
            .into_iter()
            .map(|mut process| AtCut {
                steps: process.steps_at_cut.take().or(process.steps.take()),
                low_points: match process.low_points_at_cut.take() {
                    Some(at_cut) => Some(at_cut),
                    None => process.low_points_finished(u64::MAX),
                },
            })
            .collect()
    }

    /// Events that happened but are not in the trace.
    pub fn lost_events(&self, index: &TraceIndex) -> u64 {
        self.processes
            .iter()
            .zip(&index.processes)
            .map(|(summary, info)| summary.lost_events(info.end.as_ref().map(|e| e.reserved_events)))
            .sum()
    }
}

/// A [`Summary`] being built, as a consumer of a replay that covers the
/// whole trace.
pub(super) struct SummaryBuilder<'a> {
    pub(super) index: &'a TraceIndex,
    pub(super) processes: Vec<ProcessSummary>,
    pub(super) trackers: Vec<FootprintTracker>,
    /// Only the steps are wanted (a fold's pass): processes without steps
    /// and the footprint are skipped.
    pub(super) steps_only: bool,
}

impl<'a> SummaryBuilder<'a> {
    /// Nothing counted yet; each process's growth measured at `boundaries`.
    pub(super) fn new(index: &'a TraceIndex, boundaries: Vec<Option<Boundaries>>) -> SummaryBuilder<'a> {
        SummaryBuilder::new_for(index, boundaries, None)
    }

    /// [`SummaryBuilder::new`] for a replay of the processes `selected`
    /// (all where `None`): the others' footprints are left empty, so that
    /// replays of groups of processes at once take no more memory than one.
    pub(super) fn new_for(
        index: &'a TraceIndex,
        boundaries: Vec<Option<Boundaries>>,
        selected: Option<&[bool]>,
    ) -> SummaryBuilder<'a> {
        SummaryBuilder {
            index,
            processes: boundaries
                .into_iter()
                .zip(&index.processes)
                .map(|(boundaries, info)| {
                    let fold = info.fold.as_ref();
                    match boundaries {
                        Some(Boundaries::Steps(marker)) => match info.steps_state.as_ref().zip(fold) {
                            // Going on from what a fold kept of them.
                            Some((state, fold)) => ProcessSummary {
                                steps: Some(Steps::resumed(state, marker)),
                                steps_from: fold.folded_to,
                                ..ProcessSummary::default()
                            },
                            None => ProcessSummary {
                                steps: Some(Steps::new(marker)),
                                ..ProcessSummary::default()
                            },
                        },
                        Some(Boundaries::LowPoints {
                            tensors,
                            first_ns,
                            last_ns,
                        }) => ProcessSummary {
                            low_points: Some(
                                LowPoints::new(tensors, first_ns, last_ns).after_folds(info.low_points_state.as_ref()),
                            ),
                            ..ProcessSummary::default()
                        },
                        None => ProcessSummary::default(),
                    }
                    .after_fold(fold)
                })
                .collect(),
            trackers: index
                .processes
                .iter()
                .enumerate()
                .map(|(number, p)| match selected {
                    Some(selected) if !selected[number] => FootprintTracker::default(),
                    _ => FootprintTracker::new(index, p),
                })
                .collect(),
            steps_only: false,
        }
    }

    /// Each process keeping `kept` out-of-memory failures a device in detail.
    pub(super) fn keeping_ooms(mut self, kept: OomsKept) -> SummaryBuilder<'a> {
        for process in &mut self.processes {
            process.ooms_kept = kept;
        }
        self
    }

    /// The summary, once `replayed` has run to its end.
    pub(super) fn finish(self, replayed: Replayed) -> Summary {
        let index = self.index;
        let mut processes = self.processes;
        for (process, memory) in processes.iter_mut().zip(replayed.memories) {
            process.memory = memory;
            process.finish();
        }
        let footprints = self
            .trackers
            .into_iter()
            .zip(&index.processes)
            .map(|(tracker, process)| tracker.finish(index, process))
            .collect();
        let mut stream_errors = replayed.stream_errors;
        stream_errors.sort_by_key(UnreadBlock::offset);
        Summary {
            processes,
            footprints,
            stream_errors,
        }
    }
}

impl Consumer for SummaryBuilder<'_> {
    type Error = Infallible;

    fn step(&mut self, step: &Step) -> Result<(), Self::Error> {
        let process = &mut self.processes[step.process];
        if self.steps_only {
            if process.steps.is_some() || process.low_points.is_some() {
                process.observe(step.event, step.changes);
            }
            return Ok(());
        }
        process.observe(step.event, step.changes);
        self.trackers[step.process].observe(self.index, step.info, step.event, step.changes);
        Ok(())
    }
}

/// Call sites, largest first: (stack, bytes, allocations).
pub fn largest_call_sites(by_stack: &ByStack) -> Vec<(u32, u64, u64)> {
    let mut sites: Vec<(u32, u64, u64)> = by_stack.iter().map(|(&s, &(b, n))| (s, b, n)).collect();
    sites.sort_by_key(|&(stack, bytes, _)| (std::cmp::Reverse(bytes), stack));
    sites
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_events::driver_event;
    use cudatrace_events::Api;
    use cudatrace_events::{Kind, Op};

    fn event(seq: u64, op: Op, kind: Kind, address: u64, size: u64) -> Event {
        Event {
            device: if kind == Kind::HostPinned { None } else { Some(0) },
            ..driver_event(seq, seq, op, kind, address, size, 0)
        }
    }

    /// Allocations minus frees, against the allocations live at the end, per device.
    fn balance(p: &ProcessSummary) -> Vec<(DeviceKey, u64, usize)> {
        let live = p.live_at_exit();
        p.devices
            .iter()
            .map(|(&device, stats)| {
                (
                    device,
                    stats.allocations - stats.frees,
                    live.get(&device).map_or(0, Vec::len),
                )
            })
            .collect()
    }

    const GPU0: DeviceKey = DeviceKey::Gpu(0);

    /// A record of PyTorch's allocator: `action` on `address`, `size` bytes.
    fn tensor(seq: u64, action: cudatrace_events::tensors::Action, address: u64, size: u64) -> Event {
        let mut e = event(seq, Op::Tensor, Kind::Device, address, size);
        e.api = Api::TorchCachingAllocator;
        e.arg1 = action as u64;
        e
    }

    #[test]
    fn an_out_of_memory_failure_keeps_what_held_the_device_and_tensors_only_while_tracked() {
        use cudatrace_events::tensors::{status, Action};
        let mut p = ProcessSummary::default();
        let mut changes = Vec::new();
        let base = 0x7f00_0000_0000;
        let mut segment = event(1, Op::Alloc, Kind::Device, base, 2 << 20);
        segment.stack = 3;
        let events = [
            segment,
            tensor(2, Action::SegmentAlloc, base, 2 << 20),
            tensor(3, Action::Alloc, base, 4096),
            event(4, Op::Oom, Kind::Device, 0, 1 << 30),
        ];
        for e in &events {
            p.apply(e, &mut changes);
        }
        let held = p.devices[&GPU0].ooms[0].held.as_deref().expect("kept");
        assert_eq!(held.live_bytes, 2 << 20);
        assert_eq!(held.live_by_stack.get(&3), Some(&(2 << 20, 1)));
        let (now, by_stack) = held.tensors.as_ref().expect("tensors are tracked");
        assert_eq!(
            (now.allocated, now.reserved, now.inactive()),
            (4096, 2 << 20, (2 << 20) - 4096)
        );
        assert_eq!(by_stack.values().map(|&(bytes, _)| bytes).sum::<u64>(), 4096);
        // Tracking stops: a later failure keeps the driver's view only.
        let mut stopped = event(5, Op::TensorStatus, Kind::Device, 0, 0);
        stopped.arg1 = status::UNAVAILABLE;
        p.apply(&stopped, &mut changes);
        p.apply(&event(6, Op::Oom, Kind::Device, 0, 1 << 30), &mut changes);
        let later = p.devices[&GPU0].ooms[1].held.as_deref().expect("kept");
        assert_eq!(later.live_bytes, 2 << 20);
        assert!(later.tensors.is_none(), "tensor figures stopped with tracking");
        // Past the first OOM_STATES_KEPT failures, none is kept.
        for seq in 7..7 + OOM_STATES_KEPT as u64 {
            p.apply(&event(seq, Op::Oom, Kind::Device, 0, 1 << 30), &mut changes);
        }
        let ooms = &p.devices[&GPU0].ooms;
        assert_eq!(ooms.len(), OOM_STATES_KEPT + 2);
        assert_eq!(ooms.iter().filter(|o| o.held.is_some()).count(), OOM_STATES_KEPT);
    }

    #[test]
    fn past_the_failures_kept_each_is_counted_by_call_site_and_the_latest_kept() {
        for (kept, listed) in [(OomsKept(5), 5), (OomsKept::EVERY, 12)] {
            let mut p = ProcessSummary {
                ooms_kept: kept,
                ..ProcessSummary::default()
            };
            let mut changes = Vec::new();
            for seq in 1..=12u64 {
                let mut failure = event(seq, Op::Oom, Kind::Device, 0, seq << 20);
                failure.stack = if seq % 3 == 0 { 7 } else { 9 };
                p.apply(&failure, &mut changes);
            }
            let device = &p.devices[&GPU0];
            assert_eq!(device.ooms.len(), listed);
            assert_eq!(
                device.ooms.last().map(|o| o.requested_bytes),
                Some((listed as u64) << 20)
            );
            assert_eq!(
                (
                    device.oom_sites.total(),
                    device.oom_sites.count(false),
                    device.oom_sites.count(true)
                ),
                (12, 12, 0)
            );
            let sites: Vec<(u32, u64, u64, u64, u64, u64)> = device
                .oom_sites
                .sites()
                .iter()
                .map(|s| (s.stack, s.count, s.smallest, s.largest, s.first_ns, s.last_ns))
                .collect();
            assert_eq!(
                sites,
                vec![(9, 8, 1 << 20, 11 << 20, 1, 11), (7, 4, 3 << 20, 12 << 20, 3, 12)]
            );
            let latest = device.latest_ooms[0].as_ref().map(|o| o.requested_bytes);
            assert_eq!(latest, (listed < 12).then_some(12 << 20));
            assert!(
                device.first_unkept_ooms[0].is_none(),
                "the card's first failures are kept"
            );
            // Then three refusals of the memory limit, none of them kept
            // with 5: the first and the latest stand for them.
            for seq in 13..=15u64 {
                let mut refusal = event(
                    seq,
                    Op::Oom,
                    Kind::Device,
                    cudatrace_events::event_args::REFUSED_BY_LIMIT,
                    seq << 20,
                );
                refusal.arg1 = 1 << 20;
                refusal.arg2 = 64 << 20;
                p.apply(&refusal, &mut changes);
            }
            let device = &p.devices[&GPU0];
            assert_eq!(device.oom_sites.count(true), 3);
            let refusals: Vec<u64> = device.ooms_of_cause(true).iter().map(|o| o.requested_bytes).collect();
            let expected: Vec<u64> = if listed < 12 {
                vec![13 << 20, 15 << 20]
            } else {
                vec![13 << 20, 14 << 20, 15 << 20]
            };
            assert_eq!(refusals, expected);
            assert_eq!(device.ooms_of_cause(false).len(), if listed < 12 { 6 } else { 12 });
        }
    }

    #[test]
    fn vmm_memory_is_freed_at_its_last_unmap_after_release() {
        let mut p = ProcessSummary::default();
        let mut changes = Vec::new();
        let handle = 0x10;
        p.apply(&event(0, Op::Alloc, Kind::VmmPhysical, handle, 100), &mut changes);
        let mut map = event(1, Op::Map, Kind::VirtualAddress, 0x1000, 100);
        map.arg1 = handle;
        p.apply(&map, &mut changes);
        let mut second = event(2, Op::Map, Kind::VirtualAddress, 0x2000, 100);
        second.arg1 = handle;
        p.apply(&second, &mut changes);
        p.apply(&event(3, Op::Alloc, Kind::Device, 0x9000, 50), &mut changes);
        assert_eq!(p.devices[&GPU0].current, 150);
        assert_eq!(p.devices[&GPU0].peak, 150);
        // Released while still mapped: neither gone nor freed.
        p.apply(&event(4, Op::Free, Kind::VmmPhysical, handle, 100), &mut changes);
        assert_eq!(p.devices[&GPU0].current, 150);
        assert_eq!((p.devices[&GPU0].allocations, p.devices[&GPU0].frees), (2, 0));
        assert_eq!(balance(&p), vec![(GPU0, 2, 2)]);
        // One unmap covering both mappings frees it.
        p.apply(&event(5, Op::Unmap, Kind::VirtualAddress, 0x1000, 0x1100), &mut changes);
        assert_eq!(p.devices[&GPU0].current, 50);
        assert_eq!((p.devices[&GPU0].allocations, p.devices[&GPU0].frees), (2, 1));
        assert_eq!(p.devices[&GPU0].peak, 150);
        assert_eq!(balance(&p), vec![(GPU0, 1, 1)]);
        // Unmapped first, then released: freed at the release.
        p.apply(&event(6, Op::Alloc, Kind::VmmPhysical, 0x20, 64), &mut changes);
        p.apply(&event(7, Op::Free, Kind::VmmPhysical, 0x20, 64), &mut changes);
        assert_eq!((p.devices[&GPU0].allocations, p.devices[&GPU0].frees), (3, 2));
        assert_eq!(balance(&p), vec![(GPU0, 1, 1)]);
        assert_eq!(p.lost_events(None), 0);
    }

    #[test]
    fn memory_on_an_unknown_device_is_not_counted_as_device_0() {
        let mut p = ProcessSummary::default();
        let mut changes = Vec::new();
        p.apply(&event(0, Op::Alloc, Kind::Device, 0x1000, 10), &mut changes);
        let mut unknown = event(1, Op::Alloc, Kind::Device, 0x2000, 20);
        unknown.device = None;
        p.apply(&unknown, &mut changes);
        let mut freed = event(2, Op::Free, Kind::Device, 0x2000, 20);
        freed.device = None;
        p.apply(&freed, &mut changes);
        let mut again = event(3, Op::Alloc, Kind::Pool, 0x3000, 30);
        again.device = None;
        p.apply(&again, &mut changes);
        assert_eq!(p.devices[&GPU0].current, 10);
        assert_eq!(p.devices[&DeviceKey::Unknown].current, 30);
        assert_eq!(p.devices[&DeviceKey::Unknown].allocations, 2);
        assert_eq!(balance(&p), vec![(GPU0, 1, 1), (DeviceKey::Unknown, 1, 1)]);
        assert_eq!(DeviceKey::Unknown.json(), serde_json::Value::Null);
    }

    #[test]
    fn lost_events_are_the_gaps_in_sequence_numbers_and_what_came_after_the_last() {
        let mut p = ProcessSummary::default();
        let mut changes = Vec::new();
        for seq in [0, 1, 4, 5, 9] {
            p.apply(
                &event(seq, Op::Alloc, Kind::Device, 0x1000 * (seq + 1), 8),
                &mut changes,
            );
        }
        assert_eq!(p.lost_events(None), 5);
        assert_eq!(p.lost_events(Some(12)), 7);
    }

    #[test]
    fn an_address_allocated_twice_frees_the_first_allocation() {
        let mut p = ProcessSummary::default();
        let mut changes = Vec::new();
        p.apply(&event(0, Op::Alloc, Kind::Device, 0x1000, 10), &mut changes);
        p.apply(&event(1, Op::Alloc, Kind::Device, 0x1000, 30), &mut changes);
        assert_eq!(p.memory.reused_without_free, 1);
        assert_eq!(p.devices[&GPU0].current, 30);
        assert_eq!(balance(&p), vec![(GPU0, 1, 1)]);
    }

    #[test]
    fn what_went_with_the_driver_is_freed_and_counted_mappings_and_all() {
        let mut p = ProcessSummary::default();
        let mut changes = Vec::new();
        let handle = 0x10;
        p.apply(&event(0, Op::Alloc, Kind::Device, 0x1000, 10), &mut changes);
        p.apply(&event(1, Op::Alloc, Kind::HostPinned, 0x5000, 64), &mut changes);
        p.apply(&event(2, Op::Alloc, Kind::VmmPhysical, handle, 100), &mut changes);
        let mut map = event(3, Op::Map, Kind::VirtualAddress, 0x8000, 100);
        map.arg1 = handle;
        p.apply(&map, &mut changes);
        let with_driver = |seq, kind, address, size| Event {
            api: cudatrace_events::Api::Unknown,
            arg1: cudatrace_events::event_args::FREED_WITH_DRIVER,
            ..event(seq, Op::Free, kind, address, size)
        };
        p.apply(&with_driver(4, Kind::Device, 0x1000, 10), &mut changes);
        p.apply(&with_driver(5, Kind::HostPinned, 0x5000, 64), &mut changes);
        // Still mapped, but no unmap will come: gone with the driver.
        p.apply(&with_driver(6, Kind::VmmPhysical, handle, 100), &mut changes);
        assert_eq!(p.memory.freed_with_driver, (3, 174));
        assert_eq!(p.memory.live_mappings().count(), 0);
        assert_eq!(
            (p.devices[&GPU0].current, p.devices[&GPU0].frees, p.host.current),
            (0, 2, 0)
        );
        assert_eq!(balance(&p), vec![(GPU0, 0, 0)]);
        // The same address allocated again is a new allocation, no reuse.
        p.apply(&event(7, Op::Alloc, Kind::Device, 0x1000, 20), &mut changes);
        assert_eq!((p.memory.reused_without_free, p.devices[&GPU0].current), (0, 20));
        // A plain free is not one that went with the driver.
        p.apply(&event(8, Op::Free, Kind::Device, 0x1000, 20), &mut changes);
        assert_eq!(p.memory.freed_with_driver, (3, 174));
    }

    #[test]
    fn failed_calls_change_nothing() {
        let mut p = ProcessSummary::default();
        let mut changes = Vec::new();
        p.apply(&event(0, Op::Alloc, Kind::Device, 0x1000, 10), &mut changes);
        p.apply(&event(1, Op::Failed, Kind::Device, 0x1000, 0), &mut changes);
        assert_eq!((p.devices[&GPU0].allocations, p.devices[&GPU0].frees), (1, 0));
        assert_eq!(p.devices[&GPU0].current, 10);
        assert_eq!((p.memory.events, p.lost_events(None)), (2, 0));
    }

    #[test]
    fn host_pinned_and_ipc_memory_stay_out_of_device_totals() {
        let mut p = ProcessSummary::default();
        let mut changes = Vec::new();
        p.apply(&event(0, Op::Alloc, Kind::HostPinned, 0x5000, 64), &mut changes);
        p.apply(&event(1, Op::Alloc, Kind::IpcImport, 0x6000, 0), &mut changes);
        p.apply(&event(2, Op::Free, Kind::HostPinned, 0x5000, 64), &mut changes);
        assert!(p.devices.is_empty());
        assert_eq!(
            (p.host.allocations, p.host.frees, p.host.peak, p.host.current),
            (1, 1, 64, 0)
        );
    }
}
