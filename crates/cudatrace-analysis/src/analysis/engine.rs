//! The replay engine: the one loop over a trace's events that every output
//! and analysis shares.
//!
//! [`Replay`] reads the events in the order memory changed (see
//! [`EventStream`]), replays each selected process's memory with
//! [`ProcessMemory`], and hands every event, with what it changed, to a
//! [`Consumer`]. Events after the window's end are neither replayed
//! nor handed out; events before its start are replayed, so that the memory
//! at the start is right, and handed out marked as before the window, for
//! consumers that build state from them. Adding an output means writing a
//! consumer, not another loop.

use super::block_prefetch::Prefetch;
use super::event_stream::EventStream;
use super::replay::{Change, ProcessMemory};
use super::trace_index::{ProcessIndex, TraceIndex};
use super::unreadable::UnreadBlock;
use super::window::Window;
use crate::system::progress::Progress;
use cudatrace_events::Event;
use std::convert::Infallible;

/// One event, as the replay hands it to consumers.
pub struct Step<'a> {
    /// The process's index in [`TraceIndex::processes`].
    pub process: usize,
    /// The process.
    pub info: &'a ProcessIndex,
    /// The event.
    pub event: &'a Event,
    /// What the event changed in the process's memory; always empty in a
    /// replay made [`Replay::events_only`].
    pub changes: &'a [Change],
    /// The process's memory after the event.
    pub memory: &'a ProcessMemory,
    /// The event is before the window's start: replayed for the state it
    /// leaves, not for output.
    pub before_window: bool,
}

/// Whatever takes in a replay's events.
pub trait Consumer {
    /// What can stop it: an output that cannot be written, or
    /// [`Infallible`] for a consumer that only counts.
    type Error;

    /// Takes one event. An error ends the replay.
    fn step(&mut self, step: &Step) -> Result<(), Self::Error>;
}

/// Consumers that cannot fail: a closure over each step.
impl<F: FnMut(&Step)> Consumer for F {
    type Error = Infallible;

    fn step(&mut self, step: &Step) -> Result<(), Infallible> {
        self(step);
        Ok(())
    }
}

/// A consumer whose state is kept per process, each process's part built
/// from that process's events alone: groups of processes can then be
/// replayed at once, each with a consumer of its own, and the parts joined
/// (see `Summary::build_found_per_process`).
pub trait PerProcess: Consumer<Error = Infallible> + Send {
    /// Takes `process`'s part from `other`, a consumer made the same way
    /// that was fed that process's events.
    fn take_process(&mut self, other: &mut Self, process: usize);
}

/// A consumer that does nothing: a replay for the summary alone.
pub struct NoConsumer;

impl Consumer for NoConsumer {
    type Error = Infallible;

    fn step(&mut self, _: &Step) -> Result<(), Infallible> {
        Ok(())
    }
}

impl PerProcess for NoConsumer {
    fn take_process(&mut self, _: &mut Self, _: usize) {}
}

/// Two consumers fed by one pass, each step to the first, then the second.
pub struct Both<'a, A, B>(pub &'a mut A, pub &'a mut B);

impl<A: Consumer, B: Consumer<Error = A::Error>> Consumer for Both<'_, A, B> {
    type Error = A::Error;

    fn step(&mut self, step: &Step) -> Result<(), Self::Error> {
        self.0.step(step)?;
        self.1.step(step)
    }
}

/// What a replay leaves.
pub struct Replayed {
    /// Each process's memory at the end (untouched for processes not
    /// selected, or in a replay made [`Replay::events_only`]).
    pub memories: Vec<ProcessMemory>,
    /// Blocks of events that could not be read again (the file changed
    /// while it was read).
    pub stream_errors: Vec<UnreadBlock>,
}

/// One pass over a trace, configured before [`Replay::run`].
pub struct Replay<'a> {
    index: &'a TraceIndex,
    progress: &'a Progress,
    window: Window,
    selected: Option<Vec<bool>>,
    replays_memory: bool,
    /// Replays running at once, this one included (see [`Replay::alongside`]).
    replays: usize,
}

impl<'a> Replay<'a> {
    /// A pass over every event of every process, replaying memory, that
    /// ticks `progress` once an event.
    pub fn new(index: &'a TraceIndex, progress: &'a Progress) -> Replay<'a> {
        Replay {
            index,
            progress,
            window: Window::default(),
            selected: None,
            replays_memory: true,
            replays: 1,
        }
    }

    /// Covers only `window` (see the module documentation).
    pub fn window(mut self, window: Window) -> Replay<'a> {
        self.window = window;
        self
    }

    /// Covers only these processes (indices in [`TraceIndex::processes`]).
    pub fn only(mut self, processes: &[usize]) -> Replay<'a> {
        let mut selected = vec![false; self.index.processes.len()];
        for &process in processes {
            selected[process] = true;
        }
        self.selected = Some(selected);
        self
    }

    /// One of `replays` replays that run at once: they share the cores that
    /// decode ahead and the memory of blocks waiting decoded.
    pub fn alongside(mut self, replays: usize) -> Replay<'a> {
        self.replays = replays;
        self
    }

    /// Hands out the events without replaying memory, for passes that read
    /// the events alone.
    pub fn events_only(mut self) -> Replay<'a> {
        self.replays_memory = false;
        self
    }

    /// Runs the pass, handing each event to `consumer` (a generic, so that
    /// its step is compiled into the loop: the loop runs once an event).
    pub fn run<C: Consumer>(&self, consumer: &mut C) -> Result<Replayed, C::Error> {
        let prefetch = Prefetch::sharing(self.index, self.selected.as_deref(), self.replays);
        let workers = prefetch.workers();
        if workers == 0 {
            return self.replay(EventStream::new(self.index, self.selected.as_deref(), None), consumer);
        }
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| prefetch.work());
            }
            // The workers stop however the replay ends.
            let _stop = StopOnDrop(&prefetch);
            let stream = EventStream::new(self.index, self.selected.as_deref(), Some(&prefetch));
            self.replay(stream, consumer)
        })
    }

    /// The loop itself, over `stream`.
    fn replay<C: Consumer>(&self, mut stream: EventStream, consumer: &mut C) -> Result<Replayed, C::Error> {
        let index = self.index;
        let mut memories: Vec<ProcessMemory> = index
            .processes
            .iter()
            .map(|p| ProcessMemory::after_fold(p.fold.as_ref()))
            .collect();
        let mut changes = Vec::new();
        for (process, event) in &mut stream {
            self.progress.tick();
            if self.window.is_after(event.time_ns) {
                continue;
            }
            changes.clear();
            let memory = &mut memories[process];
            if self.replays_memory {
                memory.apply(&event, &mut changes);
            }
            let step = Step {
                process,
                info: &index.processes[process],
                event: &event,
                changes: &changes,
                memory,
                before_window: self.window.is_before(event.time_ns),
            };
            consumer.step(&step)?;
        }
        Ok(Replayed {
            memories,
            stream_errors: stream.errors,
        })
    }
}

/// Stops a prefetch's workers when dropped.
struct StopOnDrop<'a, 'b>(&'a Prefetch<'b>);

impl Drop for StopOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}
