//! Finding a process's training steps with no code change: the repeating
//! pattern of its allocations.
//!
//! A training or inference loop makes the same allocations, from the same
//! call stacks, once an iteration. One pass over the trace counts, per call
//! stack and device, how often it allocated, where in the process's
//! sequence of allocations it first and last did, the shortest and longest
//! gap between two of its allocations, and how the bytes in use stood at
//! each of them. Then:
//!
//! - a *candidate* marker allocates at least 3 times, evenly (its gaps
//!   within a factor of 2 of each other or at least half of them the same
//!   as the gap before, the longest at most 16 times the shortest, and at
//!   least 2 allocations between two of its own),
//!   across at least half of the process's allocations: a setup loop at the
//!   start is no candidate, nor is a handler of requests that come in no
//!   order;
//! - each candidate count `c` explains the allocations of every stack whose
//!   count is a multiple of `c` (a step's body holds stacks that allocate
//!   once a step, and stacks inside repeated blocks that allocate several
//!   times a step); counts that explain less than 90% of what the best one
//!   does are dropped, so repeated blocks inside a step are not steps;
//! - of those, the step is the loop at whose turns memory stands the most
//!   evenly: the candidate whose bytes in use, at its allocations, stray
//!   least from a straight line (a clean loop stands level, a leaking one
//!   climbs in a line, a block inside a step zigzags). Where two stand as
//!   evenly, the finer loop wins: steps, not epochs.
//!
//! The marker is the earliest candidate of the chosen count; each of its
//! allocations starts a step. PyTorch's tensors are used where they are
//! recorded (its caching allocator makes no driver call in a steady loop);
//! the driver's allocations otherwise. Memory is proportional to the number
//! of distinct stacks and to the live allocations, never to the number of
//! events.

use super::allocation_kind::{allocation_kind, free_kind};
use super::engine::{Replay, Step};
use super::low_points::LOW_POINTS;
use super::trace_index::{ProcessIndex, TraceIndex};
use crate::system::progress::Progress;
use cudatrace_events::recording_switch::PAUSED_STACK;
use cudatrace_events::Event;
use cudatrace_trace::{FoldedSite, StepsState};
use foldhash::HashMap;
use std::collections::BTreeMap;

/// Fewest repetitions that make a loop.
const FEWEST_STEPS: u64 = 3;
/// Fewest allocations in a step: a loop of one allocation is a batch of
/// allocations, not a step of work.
const FEWEST_ALLOCATIONS_A_STEP: u64 = 2;
/// The loop's stacks must make at least this share (in percent) of the
/// process's allocations, so that a few repeated calls in a program
/// without a loop do not make steps.
const LEAST_SHARE_PERCENT: u64 = 20;
/// A marker's longest gap between two allocations is at most this many
/// times its shortest: the first step (which allocates what later steps
/// reuse) and a validation pass every so many steps make some gaps longer,
/// but not wildly so.
const MOST_GAP_RATIO: u64 = 16;
/// A candidate's allocations span at least this share (in percent) of the
/// process's allocations.
const LEAST_SPAN_PERCENT: u64 = 50;
/// Counts that explain less than this share (in percent) of the best
/// count's allocations are not the loop.
const LEAST_EXPLAINED_PERCENT: u64 = 90;
/// Two candidates stand as evenly when their strays differ by at most this
/// share (per mille) of the process's highest bytes in use.
const EVEN_TOLERANCE_PER_MILLE: f64 = 5.0;

/// Fewest allocations for growth at the memory curve's low points, where
/// no steps are found: two for each of its parts.
const FEWEST_FOR_LOW_POINTS: u64 = 2 * LOW_POINTS as u64;
/// Shortest span for growth at low points: a run of less than a second is
/// no long job, and a rate a minute from it would mean nothing.
const SHORTEST_FOR_LOW_POINTS_NS: u64 = 1_000_000_000;

/// Steps a process's marker must have started before a fold keeps its
/// steps (and folds any of its events): a marker found from fewer may be
/// another allocation of the loop than the whole run's.
pub const STEPS_SEEN_BEFORE_FOLDING: u64 = 16;

/// How a process's steps are found again during a replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepMarker {
    /// The call stack whose allocations start the steps.
    pub stack: u32,
    /// The device of those allocations.
    pub device: Option<u8>,
    /// Whether the marker is a PyTorch tensor (else a driver allocation).
    pub tensors: bool,
    /// How many steps.
    pub steps: u64,
    /// When the first step started: the marker's first allocation (for
    /// steps a fold kept, the first step it kept).
    pub first_ns: u64,
    /// The last allocation of the loop's body (the stacks that allocate
    /// once or several times a step): where the last step ends (no next
    /// step starts it).
    pub loop_end_ns: u64,
}

impl StepMarker {
    /// Whether `event` starts a step.
    pub fn starts_step(&self, event: &Event) -> bool {
        event.stack == self.stack && event.device == self.device && allocation_kind(event) == Some(self.tensors)
    }
}

/// One call stack's allocations on one device.
#[derive(Clone, Copy, Debug, Default)]
struct StackCount {
    count: u64,
    /// Index, among the process's allocations of the same kind, of its
    /// first, and the time.
    first: u64,
    first_time_ns: u64,
    /// The index of its last, and the time.
    last: u64,
    last_time_ns: u64,
    /// Its last allocation before the process's cut (a fold's, see
    /// [`find_boundaries_so_far`]): (sequence number, time).
    last_before_cut: Option<(u64, u64)>,
    shortest_gap: u64,
    longest_gap: u64,
    /// The last gap, and how many gaps were the same as the one before.
    last_gap: u64,
    repeated_gaps: u64,
    /// The bytes in use at its first allocation; the line below is fitted
    /// to the bytes in use less these, against the allocation's number.
    base_level: f64,
    /// Sums of x, x², y, xy and y² for that fit.
    sums: [f64; 5],
}

impl StackCount {
    /// How far, in bytes, the bytes in use at its allocations stray from
    /// the straight line that fits them best (their standard deviation
    /// around it).
    fn stray(&self) -> f64 {
        let n = self.count as f64;
        let [x, xx, y, xy, yy] = self.sums;
        let sxx = xx - x * x / n;
        let sxy = xy - x * y / n;
        let syy = yy - y * y / n;
        let residual = if sxx > 0.0 { syy - sxy * sxy / sxx } else { syy };
        (residual.max(0.0) / n).sqrt()
    }

    /// Whether it allocates evenly enough to mark steps: its gaps within a
    /// factor of 2 of each other, or mostly the same as the gap before (a
    /// loop's turns allocate alike, but for the first and a validation pass
    /// now and then; a server's requests in a random order do not), and
    /// never wildly longer.
    fn even(&self) -> bool {
        let transitions = self.count.saturating_sub(2);
        let alike = self.longest_gap <= 2 * self.shortest_gap || self.repeated_gaps * 2 >= transitions;
        self.shortest_gap >= FEWEST_ALLOCATIONS_A_STEP
            && self.longest_gap <= MOST_GAP_RATIO * self.shortest_gap
            && alike
    }
}

/// One kind of allocation (tensors or driver) of one process, counted.
#[derive(Default)]
struct Allocations {
    total: u64,
    frees: u64,
    stacks: HashMap<(u32, Option<u8>), StackCount>,
    /// The earliest allocation's time and the latest's.
    span: Option<(u64, u64)>,
    /// Live allocations (address → bytes), their sum, and its highest.
    live: HashMap<u64, u64>,
    level: u64,
    highest_level: u64,
    /// A fold's cut of this process (`u64::MAX` when none; 0 by default,
    /// where no cut is asked for and none is read).
    cut: u64,
}

impl Allocations {
    /// Driver allocations and tensors, each cut at `cut` (`None`: no cut).
    fn pair(cut: Option<u64>) -> [Allocations; 2] {
        let with_cut = || Allocations {
            cut: cut.unwrap_or(u64::MAX),
            ..Default::default()
        };
        [with_cut(), with_cut()]
    }

    fn add(&mut self, event: &Event) {
        let at = self.total;
        self.total += 1;
        let time_ns = event.time_ns;
        // Times of one process's threads may step back a little: the span is
        // from the earliest to the latest.
        self.span = Some(self.span.map_or((time_ns, time_ns), |(first, last)| {
            (first.min(time_ns), last.max(time_ns))
        }));
        let level = self.level as f64;
        if let Some(old) = self.live.insert(event.address, event.size) {
            self.level -= old; // its free was never seen
        }
        self.level += event.size;
        self.highest_level = self.highest_level.max(self.level);
        if event.stack == 0 || event.stack == PAUSED_STACK {
            return;
        }
        let entry = self.stacks.entry((event.stack, event.device)).or_insert(StackCount {
            first: at,
            first_time_ns: time_ns,
            shortest_gap: u64::MAX,
            base_level: level,
            ..StackCount::default()
        });
        if entry.count > 0 {
            let gap = at - entry.last;
            entry.shortest_gap = entry.shortest_gap.min(gap);
            entry.longest_gap = entry.longest_gap.max(gap);
            if entry.count > 1 && gap == entry.last_gap {
                entry.repeated_gaps += 1;
            }
            entry.last_gap = gap;
        }
        let (x, y) = (entry.count as f64, level - entry.base_level);
        for (sum, value) in entry.sums.iter_mut().zip([x, x * x, y, x * y, y * y]) {
            *sum += value;
        }
        entry.count += 1;
        entry.last = at;
        entry.last_time_ns = time_ns;
        if event.seq < self.cut {
            entry.last_before_cut = Some((event.seq, time_ns));
        }
    }

    fn free(&mut self, event: &Event) {
        self.frees += 1;
        if let Some(size) = self.live.remove(&event.address) {
            self.level -= size;
        }
    }

    /// The loop these allocations repeat, if any.
    /// The marker, if the allocations repeat a loop. `so_far`: the events
    /// end anywhere in a step (a fold's pass over a run still going), so a
    /// count one more or one less than a multiple counts as a multiple.
    fn marker(&self, tensors: bool, so_far: bool) -> Option<StepMarker> {
        let spans = |s: &StackCount| (s.last - s.first + 1) * 100 >= self.total * LEAST_SPAN_PERCENT;
        let candidates: Vec<(&(u32, Option<u8>), &StackCount)> = self
            .stacks
            .iter()
            .filter(|(_, s)| s.count >= FEWEST_STEPS && s.even() && spans(s))
            .collect();
        // What each candidate count explains: the allocations of every
        // stack whose count is a multiple of it.
        let counts: BTreeMap<u64, u64> = candidates
            .iter()
            .map(|(_, s)| s.count)
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .map(|count| {
                let explained = self
                    .stacks
                    .values()
                    .filter(|other| {
                        let rest = other.count % count;
                        rest == 0 || (so_far && (rest == 1 || rest == count - 1))
                    })
                    .map(|other| other.count)
                    .sum();
                (count, explained)
            })
            .collect();
        let best = counts.values().copied().max()?;
        if best * 100 < self.total * LEAST_SHARE_PERCENT {
            return None;
        }
        // Each count still in the running, with its most even candidate's stray.
        let strays: Vec<(u64, f64)> = counts
            .iter()
            .filter(|&(_, &explained)| explained * 100 >= best * LEAST_EXPLAINED_PERCENT)
            .map(|(&count, _)| {
                let stray = candidates
                    .iter()
                    .filter(|(_, s)| s.count == count)
                    .map(|(_, s)| s.stray())
                    .fold(f64::INFINITY, f64::min);
                (count, stray)
            })
            .collect();
        let least = strays.iter().map(|&(_, stray)| stray).fold(f64::INFINITY, f64::min);
        let tolerance = self.highest_level as f64 * EVEN_TOLERANCE_PER_MILLE / 1000.0;
        let steps = strays
            .iter()
            .filter(|&&(_, stray)| stray <= least + tolerance)
            .map(|&(count, _)| count)
            .max()?;
        // Cut inside a step, the stacks before the cut in it have one more.
        let (&(stack, device), first) = candidates
            .iter()
            .filter(|(_, s)| s.count == steps || (so_far && s.count == steps + 1))
            .min_by_key(|&&(&key, s)| (s.first, key))?;
        let steps = first.count;
        let body: Vec<(&(u32, Option<u8>), &StackCount)> =
            self.stacks.iter().filter(|(_, s)| s.count % steps == 0).collect();
        Some(StepMarker {
            stack,
            device,
            tensors,
            steps,
            first_ns: first.first_time_ns,
            loop_end_ns: body.iter().map(|(_, s)| s.last_time_ns).max().unwrap_or(0),
        })
    }
}

impl Allocations {
    /// The marker a fold kept, going on: its steps are the fold's and those
    /// its stack starts after the fold; the loop ends with the last
    /// allocation of a stack whose count over the whole run (the fold's
    /// counts and those after it) is a whole number of times the steps'.
    fn resumed_marker(&self, state: &StepsState, folded: &[FoldedSite]) -> StepMarker {
        let after = |key: &(u32, Option<u8>)| self.stacks.get(key).map_or(0, |s| s.count);
        let steps = state
            .started
            .saturating_add(after(&(state.marker_stack, state.marker_device)));
        let whole = |key: &(u32, Option<u8>)| {
            let before: u64 = folded
                .iter()
                .filter(|site| site.tensors == state.tensors && !site.host && (site.stack, site.device) == *key)
                .map(|site| site.allocations)
                .sum();
            before + after(key)
        };
        let loop_end_ns = self
            .stacks
            .iter()
            .filter(|(key, _)| steps > 0 && whole(key) % steps == 0)
            .map(|(_, s)| s.last_time_ns)
            .max()
            .or_else(|| state.open.as_ref().map(|open| open.end_ns))
            .unwrap_or(0);
        let first_ns = state
            .records
            .first()
            .or(state.open.as_ref())
            .map(|step| step.start_ns)
            .or_else(|| {
                let marker = self.stacks.get(&(state.marker_stack, state.marker_device));
                marker.map(|s| s.first_time_ns)
            })
            .unwrap_or(loop_end_ns);
        StepMarker {
            stack: state.marker_stack,
            device: state.marker_device,
            tensors: state.tensors,
            steps,
            first_ns,
            loop_end_ns,
        }
    }
}

/// Where a process's growth is measured: at the ends of its steps, or,
/// where it has no loop, at the low points of its memory curve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Boundaries {
    /// Its steps, found by their marker.
    Steps(StepMarker),
    /// No loop: the lowest moment of each of `LOW_POINTS`
    /// equal spans from its first allocation to its last.
    LowPoints {
        /// Whether PyTorch's tensors are measured (else the driver's allocations).
        tensors: bool,
        /// The first allocation's time.
        first_ns: u64,
        /// The last allocation's time: what the program frees after it, at
        /// exit, is never a low point.
        last_ns: u64,
    },
}

/// Each process's boundaries (in the order of [`TraceIndex::processes`]),
/// or `None` where it allocated too little to measure growth: one pass over
/// the events. A process whose steps a fold kept (see
/// `cudatrace_trace::StepsState`) goes on with the fold's marker, counted
/// over the events after the fold. (The commands count while they read
/// the index, with [`StepCounts::for_whole_trace`]; the tests compare.)
#[cfg(any(test, feature = "testing"))]
pub fn find_boundaries(index: &TraceIndex, progress: &Progress) -> Vec<Option<Boundaries>> {
    boundaries(index, progress, None).0
}

/// `find_boundaries` for a run still going (the collector's, at a fold
/// whose cuts are `cuts`): no step is known to be the last. With them, for
/// each process with steps, the start of the step under way at its cut
/// (sequence number, time): a fold keeps that step in full detail, so that
/// its end is measured as the whole run measures it.
pub fn find_boundaries_so_far(index: &TraceIndex, cuts: &[Option<u64>], progress: &Progress) -> Found {
    boundaries(index, progress, Some(cuts))
}

/// Boundaries, and where the step under way at each cut started.
pub type Found = (Vec<Option<Boundaries>>, Vec<Option<(u64, u64)>>);

fn boundaries(index: &TraceIndex, progress: &Progress, cuts: Option<&[Option<u64>]>) -> Found {
    let mut counts = StepCounts::with_cuts(index.processes.len(), cuts);
    let Ok(_) = Replay::new(index, progress).events_only().run(&mut |step: &Step| {
        let counted_from = index.processes[step.process]
            .fold
            .as_ref()
            .map_or(0, |fold| fold.folded_to);
        counts.count(step.process, counted_from, step.event);
    });
    counts.found(index)
}

/// The counts step finding works from, per process: fed by a replay, or by
/// the reading of a trace's index, block by block (a fold's first pass, so
/// that a fold reads the trace once less).
pub struct StepCounts {
    counted: Vec<[Allocations; 2]>,
    /// Each process's cut, once known.
    cuts: Vec<Option<u64>>,
    /// Fed block by block: each process's cut is the first sequence number
    /// of its first block at or after this offset.
    cut_offset: Option<u64>,
    /// A run still going: no step is known to be the last.
    so_far: bool,
}

impl StepCounts {
    fn with_cuts(processes: usize, cuts: Option<&[Option<u64>]>) -> StepCounts {
        let cut_of = |process: usize| cuts.and_then(|c| c.get(process).copied().flatten());
        StepCounts {
            counted: (0..processes).map(|p| Allocations::pair(cut_of(p))).collect(),
            cuts: (0..processes).map(cut_of).collect(),
            cut_offset: None,
            so_far: cuts.is_some(),
        }
    }

    /// Counts for the whole trace, as `find_boundaries` counts, fed with
    /// [`StepCounts::observe_block`] while the index is read.
    pub fn for_whole_trace() -> StepCounts {
        StepCounts {
            counted: Vec::new(),
            cuts: Vec::new(),
            cut_offset: None,
            so_far: false,
        }
    }

    /// Counts for a fold whose cut is at the first event block at or after
    /// `cut_offset`, fed with [`StepCounts::observe_block`].
    pub fn for_fold_at(cut_offset: u64) -> StepCounts {
        StepCounts {
            counted: Vec::new(),
            cuts: Vec::new(),
            cut_offset: Some(cut_offset),
            so_far: true,
        }
    }

    /// One block of process `process`'s events, at `offset` in the trace
    /// whose index is being read (`index` holds what came before it).
    pub fn observe_block(&mut self, index: &TraceIndex, process: usize, offset: u64, events: &[Event]) {
        while self.counted.len() <= process {
            self.counted.push(Allocations::pair(None));
            self.cuts.push(None);
        }
        if let (Some(cut_offset), None, Some(first)) = (self.cut_offset, self.cuts[process], events.first()) {
            if offset >= cut_offset {
                self.cuts[process] = Some(first.seq);
                self.counted[process].iter_mut().for_each(|a| a.cut = first.seq);
            }
        }
        let counted_from = index.processes[process].fold.as_ref().map_or(0, |fold| fold.folded_to);
        for event in events {
            self.count(process, counted_from, event);
        }
    }

    /// Each process's cut: the first sequence number of its first block at
    /// or after the fold's cut offset; `None` when it has none there.
    pub fn cuts(&self, processes: usize) -> Vec<Option<u64>> {
        (0..processes).map(|p| self.cuts.get(p).copied().flatten()).collect()
    }

    fn count(&mut self, process: usize, counted_from: u64, event: &Event) {
        // Below a fold, only the state it kept is left, not the steps'
        // events; the steps there are those the fold kept, if any.
        if event.seq < counted_from {
            return;
        }
        if let Some(tensor) = allocation_kind(event) {
            self.counted[process][usize::from(tensor)].add(event);
        } else if let Some(tensor) = free_kind(event) {
            self.counted[process][usize::from(tensor)].free(event);
        }
    }

    /// The boundaries, and where the step under way at each cut started.
    pub fn found(mut self, index: &TraceIndex) -> Found {
        while self.counted.len() < index.processes.len() {
            self.counted.push(Allocations::pair(None));
        }
        let so_far = self.so_far;
        self.counted
            .iter()
            .zip(&index.processes)
            .map(|(pair, info)| {
                let found = boundaries_of(pair, info, so_far);
                let start = step_start(&found, pair, info, so_far);
                match (start, &info.low_points_state) {
                    // A loop too young to fold by, in a process whose low
                    // points folds kept: it stays measured at low points
                    // until the loop has its 16 steps, so that neither
                    // history is lost meanwhile.
                    (Some((0, _)), Some(state)) => {
                        let (first_ns, last_ns) = pair[usize::from(state.tensors)].span.unwrap_or((u64::MAX, u64::MAX));
                        let low_points = Boundaries::LowPoints {
                            tensors: state.tensors,
                            first_ns,
                            last_ns,
                        };
                        (Some(low_points), None)
                    }
                    _ => (found, start),
                }
            })
            .unzip()
    }
}

/// How a process's growth is measured, from its counts: going on from the
/// steps a fold kept, else by the marker of a loop its allocations repeat,
/// else at low points (going on from those folds kept), else not at all.
/// `so_far`: a run still going, whose last step is not known.
fn boundaries_of(pair: &[Allocations; 2], info: &ProcessIndex, so_far: bool) -> Option<Boundaries> {
    let [driver, tensors] = pair;
    let found = match &info.steps_state {
        Some(state) => {
            let counted = if state.tensors { tensors } else { driver };
            let folded = info.fold.as_ref().map_or(&[][..], |f| &f.sites[..]);
            Some(Boundaries::Steps(counted.resumed_marker(state, folded)))
        }
        None => found_without_kept_steps(pair, info, so_far),
    };
    match found {
        Some(Boundaries::Steps(marker)) if so_far => Some(Boundaries::Steps(StepMarker {
            steps: u64::MAX,
            loop_end_ns: u64::MAX,
            ..marker
        })),
        found => found,
    }
}

/// [`boundaries_of`] a process no fold kept steps of.
fn found_without_kept_steps(pair: &[Allocations; 2], info: &ProcessIndex, so_far: bool) -> Option<Boundaries> {
    let [driver, tensors] = pair;
    // Low points that folds kept go on with what they measured.
    let older = info.low_points_state.as_ref();
    let (counted, tensors) = match older.map(|state| state.tensors) {
        Some(true) => (tensors, true),
        Some(false) => (driver, false),
        None if tensors.total > 0 => (tensors, true),
        None => (driver, false),
    };
    let Some((first_ns, last_ns)) = counted.span else {
        // Nothing allocated since the last fold: its low points are all
        // there is.
        return older.map(|_| Boundaries::LowPoints {
            tensors,
            first_ns: u64::MAX,
            last_ns: u64::MAX,
        });
    };
    // After a fold, the events start anywhere in a step too.
    if let Some(marker) = counted.marker(tensors, so_far || info.fold.is_some()) {
        return Some(Boundaries::Steps(marker));
    }
    (older.is_some() || low_points_apply(counted, (first_ns, last_ns), info, tensors)).then_some(
        Boundaries::LowPoints {
            tensors,
            first_ns,
            last_ns,
        },
    )
}

/// For a fold (`so_far`), where the step under way at the process's cut
/// started (sequence number, time); `(0, 0)` while its marker has too few
/// steps to fold by.
fn step_start(
    found: &Option<Boundaries>,
    [driver, tensors]: &[Allocations; 2],
    info: &ProcessIndex,
    so_far: bool,
) -> Option<(u64, u64)> {
    let Some(Boundaries::Steps(marker)) = found.as_ref().filter(|_| so_far) else {
        return None;
    };
    let counted = if marker.tensors { tensors } else { driver };
    let stack = counted.stacks.get(&(marker.stack, marker.device));
    if info.steps_state.is_none() && stack.map_or(0, |s| s.count) < STEPS_SEEN_BEFORE_FOLDING {
        // Too few steps yet to be sure of the marker: nothing of this
        // process is folded for now.
        Some((0, 0))
    } else {
        stack.and_then(|s| s.last_before_cut)
    }
}

/// Whether a process without steps is measured at its low points: enough
/// allocations for each part to have its own lows, over a second at least,
/// and a curve that comes down again (half as many frees as allocations),
/// so that one-time loading is not taken for growth. After a fold, the
/// whole run counts: the fold's own counts, over the span from the
/// process's start (a small cap folds often, and each span after a fold is
/// short).
fn low_points_apply(
    counted: &Allocations,
    (first_ns, last_ns): (u64, u64),
    info: &ProcessIndex,
    tensors: bool,
) -> bool {
    let (mut total, mut frees, mut first_ns) = (counted.total, counted.frees, first_ns);
    if let Some(fold) = &info.fold {
        for site in fold.sites.iter().filter(|s| s.tensors == tensors) {
            total += site.allocations;
            frees += site.frees;
        }
        first_ns = first_ns.min(info.start.start_monotonic_ns);
    }
    total >= FEWEST_FOR_LOW_POINTS
        && last_ns.saturating_sub(first_ns) >= SHORTEST_FOR_LOW_POINTS_NS
        && frees * 2 >= total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_events::driver_event;
    use cudatrace_events::{Kind, Op};

    /// Allocations from `stacks`, in order, one a millisecond, each of
    /// `size(stack)` bytes; a stack not `kept` is freed when its next
    /// allocation comes (a temporary).
    fn counted_with(stacks: &[u32], size: impl Fn(u32) -> u64, kept: impl Fn(u32) -> bool) -> Allocations {
        let mut allocations = Allocations::default();
        let mut previous: HashMap<u32, u64> = HashMap::default();
        for (n, &stack) in stacks.iter().enumerate() {
            let address = 0x1000_0000 + n as u64 * 0x1000;
            let event = driver_event(
                n as u64,
                n as u64 * 1_000_000,
                Op::Alloc,
                Kind::Device,
                address,
                size(stack),
                stack,
            );
            if !kept(stack) {
                if let Some(old) = previous.insert(stack, address) {
                    let mut free = event.clone();
                    free.op = Op::Free;
                    free.address = old;
                    allocations.free(&free);
                }
            }
            allocations.add(&event);
        }
        allocations
    }

    fn counted(stacks: &[u32]) -> Allocations {
        counted_with(stacks, |_| 100, |_| false)
    }

    #[test]
    fn a_loop_is_found_with_its_first_stack_as_the_marker() {
        // Setup (1, 2), then 5 steps of 10, 11, 12 with a temporary (13)
        // twice a step; the first step also makes optimizer state (20, 21).
        let mut stacks = vec![1, 2];
        for step in 0..5 {
            stacks.extend([10, 13, 11, 13]);
            if step == 0 {
                stacks.extend([20, 21]);
            }
            stacks.push(12);
        }
        stacks.push(3);
        let marker = counted(&stacks).marker(true, false).expect("a loop");
        assert_eq!((marker.stack, marker.steps, marker.tensors), (10, 5, true));
        // Stack 12's last allocation, the 29th (index 28), ends the loop.
        assert_eq!(marker.loop_end_ns, 28_000_000);
    }

    #[test]
    fn a_setup_loop_before_training_is_not_the_steps() {
        // 12 layers of 4 kept parameters, then 50 steps of an activation
        // and a kept output.
        let mut stacks: Vec<u32> = [1, 2, 3, 4].repeat(12);
        stacks.extend([10, 11].repeat(50));
        let allocations = counted_with(&stacks, |s| if s == 10 { 1 << 20 } else { 100 }, |s| s != 10);
        let marker = allocations.marker(false, false).expect("the training loop");
        assert_eq!((marker.stack, marker.steps), (10, 50));
    }

    #[test]
    fn blocks_repeated_inside_a_step_are_not_steps() {
        // 30 steps: an input, then 3 blocks (each the same two stacks,
        // whose outputs stay until the step's backward pass frees them),
        // then the backward pass's gradient buffer.
        let mut stacks = Vec::new();
        for _ in 0..30 {
            stacks.push(1);
            stacks.extend([5, 6].repeat(3));
            stacks.push(9);
        }
        let mut allocations = Allocations::default();
        let mut live_in_step: Vec<u64> = Vec::new();
        for (n, &stack) in stacks.iter().enumerate() {
            let event = |op: Op, address: u64| driver_event(n as u64, n as u64, op, Kind::Device, address, 1000, stack);
            let address = 0x1000_0000 + n as u64 * 0x1000;
            allocations.add(&event(Op::Alloc, address));
            live_in_step.push(address);
            if stack == 9 {
                for address in live_in_step.drain(..) {
                    allocations.free(&event(Op::Free, address));
                }
            }
        }
        let marker = allocations.marker(false, false).expect("the steps");
        assert_eq!((marker.stack, marker.steps), (1, 30));
    }

    #[test]
    fn epochs_of_steps_are_steps() {
        // 3 epochs of 10 steps; each epoch makes a data loader (stack 50).
        let mut stacks = Vec::new();
        for _ in 0..3 {
            stacks.push(50);
            stacks.extend([10, 11, 12].repeat(10));
        }
        let marker = counted(&stacks).marker(false, false).expect("a loop");
        assert_eq!((marker.stack, marker.steps), (10, 30));
    }

    #[test]
    fn the_same_lines_on_two_devices_are_two_markers_not_twice_the_steps() {
        let mut allocations = counted(&[10, 11, 12].repeat(10));
        let on_one: Vec<((u32, Option<u8>), StackCount)> = allocations.stacks.iter().map(|(&k, &v)| (k, v)).collect();
        for ((stack, _), count) in on_one {
            allocations.stacks.insert((stack, Some(1)), count);
        }
        let marker = allocations.marker(false, false).expect("a loop");
        assert_eq!((marker.steps, marker.device), (10, Some(0)));
    }

    #[test]
    fn a_program_without_a_loop_gets_no_steps() {
        assert_eq!(counted(&[1, 2, 3, 4, 5, 6, 7, 8]).marker(false, false), None);
        // A helper called twice is not a loop.
        assert_eq!(counted(&[1, 2, 5, 6, 3, 5, 6, 4]).marker(false, false), None);
        // Nor are a few repeated calls among many other allocations.
        let mut stacks: Vec<u32> = (100..200).collect();
        stacks.extend([7, 8, 7, 8, 7, 8]);
        assert_eq!(counted(&stacks).marker(false, false), None);
    }

    #[test]
    fn a_burst_from_one_stack_is_not_a_loop() {
        // Parameters made one after another from the same line.
        let mut stacks = vec![1];
        stacks.extend(std::iter::repeat_n(9, 50));
        assert_eq!(counted(&stacks).marker(false, false), None);
    }

    #[test]
    fn stacks_recorded_while_paused_or_without_a_stack_are_never_markers() {
        let stacks: Vec<u32> = [0, PAUSED_STACK, 5].repeat(4);
        let marker = counted(&stacks).marker(true, false).expect("stack 5 repeats");
        assert_eq!((marker.stack, marker.steps), (5, 4));
        assert!(counted(&[0, PAUSED_STACK].repeat(6)).marker(true, false).is_none());
    }

    #[test]
    fn a_run_cut_inside_a_step_keeps_the_step_s_first_allocation_as_its_marker() {
        // Twenty steps of three allocations, and the window (a fold's, of a
        // run still going) ends after the first allocation of the next.
        let mut stacks: Vec<u32> = Vec::new();
        for _ in 0..20 {
            stacks.extend([10, 11, 12]);
        }
        stacks.push(10);
        let so_far = counted(&stacks).marker(false, true).expect("a loop");
        assert_eq!((so_far.stack, so_far.steps), (10, 21));
        // Read as a whole run, the steps are the other stacks' 20.
        let whole = counted(&stacks).marker(false, false).expect("a loop");
        assert_eq!((whole.stack, whole.steps), (11, 20));
    }
}
