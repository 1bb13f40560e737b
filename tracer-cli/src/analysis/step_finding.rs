//! Finding a process's training steps with no code change: the repeating
//! pattern of its allocations.
//!
//! A training or inference loop makes the same allocations, from the same
//! call stacks, once an iteration. One pass over the trace counts, per call
//! stack, how often it allocated, where in the process's sequence of
//! allocations it first did, and the shortest and longest gap between two
//! of its allocations. The loop's count is then the count that the most
//! distinct stacks share (stacks inside the loop body that allocate once an
//! iteration all share it), and the step's marker is the stack among them
//! that allocates evenly spaced and comes first: each of its allocations
//! starts a step.
//!
//! PyTorch's tensors are used where they are recorded (its caching
//! allocator makes no driver call in a steady loop); the driver's
//! allocations otherwise. A program without a loop has no count shared by
//! enough of its allocations, and gets no steps. Memory is proportional to
//! the number of distinct stacks, never to the number of events.

use super::engine::{Replay, Step};
use super::trace_index::TraceIndex;
use crate::system::progress::Progress;
use cudatrace_events::recording_switch::PAUSED_STACK;
use cudatrace_events::tensors::{action_of, Action};
use cudatrace_events::{Event, Op};
use std::collections::{BTreeMap, HashMap, HashSet};

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
/// times its shortest: the first step, which allocates what later steps
/// reuse (optimizer state, workspaces), is longer, but not wildly so.
const MOST_GAP_RATIO: u64 = 4;

/// Fewest allocations for growth at the memory curve's low points, where
/// no steps are found: two for each of its parts.
const FEWEST_FOR_LOW_POINTS: u64 = 2 * super::low_points::LOW_POINTS as u64;

/// How a process's steps are found again during a replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepMarker {
    /// The call stack whose allocations start the steps.
    pub stack: u32,
    /// Whether the marker is a PyTorch tensor (else a driver allocation).
    pub tensors: bool,
    /// How many steps.
    pub steps: u64,
    /// The stacks that allocate once a step (the loop's body).
    pub loop_stacks: HashSet<u32>,
    /// The last allocation from one of `loop_stacks`: where the last step
    /// ends (no next step starts it).
    pub loop_end_ns: u64,
}

impl StepMarker {
    /// Whether `event` starts a step.
    pub fn starts_step(&self, event: &Event) -> bool {
        event.stack == self.stack && allocation_kind(event) == Some(self.tensors)
    }
}

/// Whether `event` allocates: `Some(true)` for a tensor, `Some(false)` for
/// device memory from the driver, else `None`.
pub fn allocation_kind(event: &Event) -> Option<bool> {
    if action_of(event) == Some(Action::Alloc) {
        Some(true)
    } else if event.op == Op::Alloc && event.kind.counts_as_device_memory() {
        Some(false)
    } else {
        None
    }
}

/// Whether `event` frees, as [`allocation_kind`] tells its kind.
pub fn free_kind(event: &Event) -> Option<bool> {
    if action_of(event) == Some(Action::FreeCompleted) {
        Some(true)
    } else if event.op == Op::Free && event.kind.counts_as_device_memory() {
        Some(false)
    } else {
        None
    }
}

/// One call stack's allocations.
#[derive(Clone, Copy, Debug, Default)]
struct StackCount {
    count: u64,
    /// Index, among the process's allocations of the same kind, of its first.
    first: u64,
    /// The index of its last, and the time.
    last: u64,
    last_time_ns: u64,
    shortest_gap: u64,
    longest_gap: u64,
}

/// One kind of allocation (tensors or driver) of one process, counted.
#[derive(Default)]
struct Allocations {
    total: u64,
    stacks: HashMap<u32, StackCount>,
    /// The first allocation's time and the last's.
    span: Option<(u64, u64)>,
}

impl Allocations {
    fn add(&mut self, stack: u32, time_ns: u64) {
        let at = self.total;
        self.total += 1;
        self.span = Some(self.span.map_or((time_ns, time_ns), |(first, _)| (first, time_ns)));
        if stack == 0 || stack == PAUSED_STACK {
            return;
        }
        let entry = self.stacks.entry(stack).or_insert(StackCount {
            first: at,
            shortest_gap: u64::MAX,
            ..StackCount::default()
        });
        if entry.count > 0 {
            let gap = at - entry.last;
            entry.shortest_gap = entry.shortest_gap.min(gap);
            entry.longest_gap = entry.longest_gap.max(gap);
        }
        entry.count += 1;
        entry.last = at;
        entry.last_time_ns = time_ns;
    }

    /// The loop these allocations repeat, if any.
    fn marker(&self, tensors: bool) -> Option<StepMarker> {
        // Distinct stacks per count, among counts that could be a loop.
        let mut stacks_per_count: BTreeMap<u64, u64> = BTreeMap::new();
        for stack in self.stacks.values().filter(|s| s.count >= FEWEST_STEPS) {
            *stacks_per_count.entry(stack.count).or_default() += 1;
        }
        // The count most stacks share; of equals, the larger.
        let (&steps, &members) = stacks_per_count
            .iter()
            .max_by_key(|&(&count, &stacks)| (stacks, count))?;
        if steps * members * 100 < self.total * LEAST_SHARE_PERCENT {
            return None;
        }
        let body: Vec<(&u32, &StackCount)> = self.stacks.iter().filter(|(_, s)| s.count == steps).collect();
        let even = |s: &StackCount| {
            s.shortest_gap >= FEWEST_ALLOCATIONS_A_STEP && s.longest_gap <= MOST_GAP_RATIO * s.shortest_gap
        };
        let (&stack, _) = body
            .iter()
            .filter(|(_, s)| even(s))
            .min_by_key(|&&(&stack, s)| (s.first, stack))?;
        Some(StepMarker {
            stack,
            tensors,
            steps,
            loop_end_ns: body.iter().map(|(_, s)| s.last_time_ns).max().unwrap_or(0),
            loop_stacks: body.iter().map(|(&stack, _)| stack).collect(),
        })
    }
}

/// Where a process's growth is measured: at the ends of its steps, or,
/// where it has no loop, at the low points of its memory curve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Boundaries {
    /// Its steps, found by their marker.
    Steps(StepMarker),
    /// No loop: the lowest moment of each of [`super::low_points::LOW_POINTS`]
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
/// the events.
pub fn find_boundaries(index: &TraceIndex, progress: &Progress) -> Vec<Option<Boundaries>> {
    let mut counted: Vec<[Allocations; 2]> = index.processes.iter().map(|_| Default::default()).collect();
    let Ok(_) = Replay::new(index, progress).events_only().run(&mut |step: &Step| {
        if let Some(tensor) = allocation_kind(step.event) {
            counted[step.process][usize::from(tensor)].add(step.event.stack, step.event.time_ns);
        }
    });
    counted
        .iter()
        .map(|[driver, tensors]| {
            let (counted, tensors) = if tensors.total > 0 {
                (tensors, true)
            } else {
                (driver, false)
            };
            let (first_ns, last_ns) = counted.span?;
            match counted.marker(tensors) {
                Some(marker) => Some(Boundaries::Steps(marker)),
                // Too few allocations to give each part of the span its own
                // lows: a short script, whose setup would read as growth.
                None if counted.total < FEWEST_FOR_LOW_POINTS => None,
                None => Some(Boundaries::LowPoints {
                    tensors,
                    first_ns,
                    last_ns,
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocations from `stacks`, in order, one a millisecond.
    fn counted(stacks: &[u32]) -> Allocations {
        let mut allocations = Allocations::default();
        for (n, &stack) in stacks.iter().enumerate() {
            allocations.add(stack, n as u64 * 1_000_000);
        }
        allocations
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
        let marker = counted(&stacks).marker(true).expect("a loop");
        assert_eq!((marker.stack, marker.steps, marker.tensors), (10, 5, true));
        let mut body: Vec<u32> = marker.loop_stacks.iter().copied().collect();
        body.sort();
        assert_eq!(body, vec![10, 11, 12]);
        // Stack 12's last allocation, the 29th (index 28), ends the loop.
        assert_eq!(marker.loop_end_ns, 28_000_000);
    }

    #[test]
    fn a_program_without_a_loop_gets_no_steps() {
        assert_eq!(counted(&[1, 2, 3, 4, 5, 6, 7, 8]).marker(false), None);
        // A helper called twice is not a loop.
        assert_eq!(counted(&[1, 2, 5, 6, 3, 5, 6, 4]).marker(false), None);
        // Nor are a few repeated calls among many other allocations.
        let mut stacks: Vec<u32> = (100..200).collect();
        stacks.extend([7, 8, 7, 8, 7, 8]);
        assert_eq!(counted(&stacks).marker(false), None);
    }

    #[test]
    fn a_burst_from_one_stack_is_not_a_loop() {
        // Parameters made one after another from the same line.
        let mut stacks = vec![1];
        stacks.extend(std::iter::repeat_n(9, 50));
        assert_eq!(counted(&stacks).marker(false), None);
    }

    #[test]
    fn stacks_recorded_while_paused_or_without_a_stack_are_never_markers() {
        let stacks: Vec<u32> = [0, PAUSED_STACK, 5].repeat(4);
        let marker = counted(&stacks).marker(true).expect("stack 5 repeats");
        assert_eq!((marker.stack, marker.steps), (5, 4));
        assert!(counted(&[0, PAUSED_STACK].repeat(6)).marker(true).is_none());
    }
}
