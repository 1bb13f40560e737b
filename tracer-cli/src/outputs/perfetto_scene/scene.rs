//! The scene's parts and the replay that draws them on a [`Canvas`].

use super::counter_names::CounterNames;
use super::lanes::{Lane, Lanes, Place};
use super::owner_tracks::{Counter, OwnerTracks};
use crate::wording::bytes;
use cudatrace_analysis::Progress;
use cudatrace_analysis::UnreadBlock;
use cudatrace_analysis::{
    Allocation, Change, Consumer, DeviceKey, Frame, ProcessIndex, ProcessMemory, ProcessSummary, Replay, Step,
    TraceIndex, Window,
};
use cudatrace_events::{Api, Event, Op};
use foldhash::HashMap;
use std::io;

/// Frames of an allocation's stack drawn with its slice, innermost first.
pub const TOP_FRAMES: usize = 5;

/// A process image as drawn.
#[derive(Clone, Copy)]
pub struct Process<'a> {
    /// Its index in [`TraceIndex::processes`].
    pub number: usize,
    /// The process.
    pub info: &'a ProcessIndex,
    /// Whether the trace holds processes of several hosts.
    pub several_hosts: bool,
}

impl Process<'_> {
    /// The pid its tracks use: its pid, with the image number above the
    /// highest pid Linux hands out (2^22), so that each image after an exec
    /// is a process of its own. Where the trace holds several hosts (a
    /// merged trace), whose pids may be the same, it is the process's
    /// number in the trace instead (from 1); the label names the real pid
    /// and the host.
    pub fn track_pid(&self) -> u64 {
        if self.several_hosts {
            return self.number as u64 + 1;
        }
        u64::from(self.info.start.pid) | (u64::from(self.info.start.image) << 22)
    }

    /// Its name: the command line.
    pub fn name(&self) -> String {
        self.info.start.argv.join(" ")
    }

    /// Its label: pid, parent and image; the host and rank where known.
    pub fn label(&self) -> String {
        let s = &self.info.start;
        let mut label = if s.image > 0 {
            format!("pid {}, parent {}, image {} (after exec)", s.pid, s.ppid, s.image)
        } else {
            format!("pid {}, parent {}", s.pid, s.ppid)
        };
        if self.several_hosts {
            label += &format!(", on {}", s.place.host);
        }
        if let Some(rank) = s.place.rank {
            label += &format!(", rank {rank}");
        }
        label
    }
}

/// A call stack of a process, whose frames are read when asked for.
#[derive(Clone, Copy)]
pub struct Stack<'a> {
    index: &'a TraceIndex,
    info: &'a ProcessIndex,
    /// The stack's id in its process (0: none).
    pub id: u32,
}

impl Stack<'_> {
    /// Its [`TOP_FRAMES`] innermost frames, innermost first.
    pub fn top_frames(&self) -> Vec<Frame> {
        let mut frames = self.index.frames(self.info, self.id);
        frames.truncate(TOP_FRAMES);
        frames
    }
}

/// A process's start (a fork's child or an exec's new image).
pub struct ProcessStart {
    /// `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// `start`, or `exec` for an image after an exec.
    pub what: &'static str,
    /// The thread it is drawn on: the process's pid.
    pub tid: u32,
    /// Parent pid.
    pub ppid: u32,
    /// Image number (0 before any exec).
    pub image: u32,
    /// The command line.
    pub argv: String,
}

/// A mark across the whole trace.
pub struct Mark {
    /// `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// `recording paused` or `recording resumed`.
    pub name: &'static str,
}

/// An allocation's slice as it begins.
pub struct SliceBegin<'a> {
    /// The slice's number in its process, from 0.
    pub id: u64,
    /// The lane it is drawn on.
    pub lane: Lane,
    /// The allocation.
    pub allocation: &'a Allocation,
    /// `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// It was made before the window (or the newest `--max-events`) began:
    /// it begins where they begin.
    pub before_window: bool,
    /// Where it was made.
    pub stack: Stack<'a>,
}

/// How an allocation's slice ends.
#[derive(Clone, Copy)]
pub enum Ending {
    /// Its memory was freed.
    Freed {
        /// By this API.
        by: Api,
        /// The free was never seen: an allocation at its address replaced it.
        inferred: bool,
    },
    /// It was still live when the trace (or the window) ended.
    LiveAtEnd,
}

/// An allocation's slice as it ends.
pub struct SliceEnd<'a> {
    /// The slice's number in its process.
    pub id: u64,
    /// The lane it was drawn on.
    pub lane: Lane,
    /// The allocation.
    pub allocation: &'a Allocation,
    /// `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// How it ends.
    pub ending: Ending,
}

/// An allocation refused: out of memory, or by the memory limit.
pub struct Refusal<'a> {
    /// What happened, as the instant's name.
    pub name: String,
    /// `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// The thread that asked.
    pub tid: u32,
    /// Bytes asked for.
    pub requested: u64,
    /// The device's free bytes then.
    pub device_free: u64,
    /// The device's total bytes.
    pub device_total: u64,
    /// Refused by the memory limit rather than the device.
    pub by_limit: bool,
    /// The device, if known.
    pub device: Option<u8>,
    /// The API that asked.
    pub api: Api,
    /// Where it asked.
    pub stack: Stack<'a>,
}

/// An output format: draws what the scene hands it, in the order handed.
pub trait Canvas {
    /// Before anything is drawn.
    fn begin(&mut self) -> io::Result<()>;
    /// A process (every process comes before anything drawn in it).
    fn process(&mut self, process: Process) -> io::Result<()>;
    /// A process's start.
    fn process_start(&mut self, process: Process, start: &ProcessStart) -> io::Result<()>;
    /// A mark across the trace.
    fn mark(&mut self, mark: &Mark) -> io::Result<()>;
    /// A counter's new value.
    fn counter(&mut self, process: Process, counter: &Counter) -> io::Result<()>;
    /// An allocation's slice begins.
    fn slice_begin(&mut self, process: Process, slice: &SliceBegin) -> io::Result<()>;
    /// An allocation's slice ends.
    fn slice_end(&mut self, process: Process, slice: &SliceEnd) -> io::Result<()>;
    /// An allocation was refused.
    fn refusal(&mut self, process: Process, refusal: &Refusal) -> io::Result<()>;
    /// After everything.
    fn end(&mut self) -> io::Result<()>;
}

/// The name of an allocation's slice: its size and API.
pub fn slice_name(a: &Allocation) -> String {
    format!("{} {}", bytes(a.size), a.api)
}

/// How many times [`draw`] reads the trace's events: a count first when
/// only the newest `max_events` are drawn.
pub fn passes(max_events: Option<u64>) -> u64 {
    1 + u64::from(max_events.is_some())
}

/// Draws `index` on `canvas`: the part of the run inside `window` and, with
/// `max_events`, only its newest memory events. Returns the blocks of
/// events that could not be read again.
pub fn draw(
    index: &TraceIndex,
    window: Window,
    max_events: Option<u64>,
    canvas: &mut impl Canvas,
    progress: &Progress,
) -> io::Result<Vec<UnreadBlock>> {
    let skip = match max_events {
        Some(max) => {
            let in_window = count_in_window(index, window, progress);
            progress.next_pass("perfetto");
            in_window.saturating_sub(max)
        }
        None => 0,
    };
    let mut scene = Scene {
        index,
        several_hosts: index.several_hosts(),
        window,
        canvas,
        tracks: index
            .processes
            .iter()
            .map(|info| ProcessTrack {
                summary: ProcessSummary::default(),
                slices: HashMap::default(),
                next_slice: 0,
                lanes: Lanes::default(),
                opened: false,
                owners: OwnerTracks::new(index, info),
            })
            .collect(),
        skip,
        last_ns: index.start_ns(),
        counter_names: CounterNames::default(),
    };
    scene.canvas.begin()?;
    scene.processes()?;
    scene.paused_spans()?;
    let replayed = Replay::new(index, progress).window(window).run(&mut scene)?;
    scene.finish(&replayed.memories)?;
    scene.canvas.end()?;
    Ok(replayed.stream_errors)
}

/// Memory events inside the window.
fn count_in_window(index: &TraceIndex, window: Window, progress: &Progress) -> u64 {
    let mut n = 0;
    let mut count = |step: &Step| n += u64::from(step.event.op.is_memory_event() && !step.before_window);
    let Ok(_) = Replay::new(index, progress)
        .window(window)
        .events_only()
        .run(&mut count);
    n
}

/// A live allocation's slice: its number and lane.
#[derive(Clone, Copy)]
struct Drawn {
    id: u64,
    lane: Lane,
}

/// One process's state while its events are drawn.
struct ProcessTrack {
    summary: ProcessSummary,
    /// The slice of each live allocation, keyed as the replay keys them.
    slices: HashMap<(u8, u64), Drawn>,
    next_slice: u64,
    lanes: Lanes,
    /// The window has started for this process: live allocations got
    /// their opening slices.
    opened: bool,
    /// Owner and category counters.
    owners: OwnerTracks,
}

/// The drawing, as a consumer of the replay.
struct Scene<'a, 'c, C: Canvas> {
    index: &'a TraceIndex,
    /// Whether the trace holds processes of several hosts (see [`Process::track_pid`]).
    several_hosts: bool,
    window: Window,
    canvas: &'c mut C,
    tracks: Vec<ProcessTrack>,
    /// Memory events still to leave out, to keep the newest `--max-events`.
    skip: u64,
    /// The latest event time drawn.
    last_ns: u64,
    counter_names: CounterNames,
}

impl<'a, C: Canvas> Scene<'a, '_, C> {
    fn process(&self, number: usize) -> Process<'a> {
        let index: &'a TraceIndex = self.index;
        Process {
            number,
            info: &index.processes[number],
            several_hosts: self.several_hosts,
        }
    }

    fn stack(&self, process: Process<'a>, id: u32) -> Stack<'a> {
        Stack {
            index: self.index,
            info: process.info,
            id,
        }
    }

    /// Each process, and its start where the window has it.
    fn processes(&mut self) -> io::Result<()> {
        let index = self.index;
        for (number, info) in index.processes.iter().enumerate() {
            let process = self.process(number);
            self.canvas.process(process)?;
            let s = &info.start;
            if self.window.contains(s.start_monotonic_ns) {
                let start = ProcessStart {
                    time_ns: s.start_monotonic_ns,
                    what: if s.image > 0 { "exec" } else { "start" },
                    tid: s.pid,
                    ppid: s.ppid,
                    image: s.image,
                    argv: process.name(),
                };
                self.canvas.process_start(process, &start)?;
            }
        }
        Ok(())
    }

    /// A mark where recording was paused and where it resumed.
    fn paused_spans(&mut self) -> io::Result<()> {
        for span in cudatrace_analysis::paused_spans(self.index) {
            let ends = [
                (Some(span.start_ns), "recording paused"),
                (span.end_ns, "recording resumed"),
            ];
            for (time_ns, name) in ends {
                if let Some(time_ns) = time_ns.filter(|&t| self.window.contains(t)) {
                    self.canvas.mark(&Mark { time_ns, name })?;
                }
            }
        }
        Ok(())
    }

    /// PyTorch's tensor counters: its allocated and reserved bytes after a
    /// tensor event.
    fn tensor_counters(&mut self, number: usize, event: &Event) -> io::Result<()> {
        let device = DeviceKey::of(event.device);
        let Some(stats) = self.tracks[number].summary.tensors.devices.get(&device) else {
            return Ok(());
        };
        let figures = [
            ("PyTorch allocated", stats.now.allocated),
            ("PyTorch reserved", stats.now.reserved),
        ];
        let process = self.process(number);
        for (what, bytes) in figures {
            let counter = Counter {
                name: self.counter_names.device(device, what),
                time_ns: event.time_ns,
                bytes,
            };
            self.canvas.counter(process, &counter)?;
        }
        Ok(())
    }

    /// The live-bytes counter of each device whose device memory `changes` changed.
    fn live_counters(&mut self, number: usize, changes: &[Change], time_ns: u64) -> io::Result<()> {
        let process = self.process(number);
        let mut counted: Option<DeviceKey> = None;
        for change in changes {
            let (Change::Allocated(a) | Change::Freed { allocation: a, .. }) = change else {
                continue;
            };
            let device = DeviceKey::of(a.device);
            if !a.is_device_memory() || counted == Some(device) {
                continue;
            }
            counted = Some(device);
            if let Some(stats) = self.tracks[number].summary.devices.get(&device) {
                let counter = Counter {
                    name: self.counter_names.device(device, "live bytes"),
                    time_ns,
                    bytes: stats.current,
                };
                self.canvas.counter(process, &counter)?;
            }
        }
        Ok(())
    }

    /// Begins `a`'s slice on the lowest free lane of its place.
    fn begin_slice(&mut self, number: usize, a: &Allocation, time_ns: u64, before_window: bool) -> io::Result<()> {
        let track = &mut self.tracks[number];
        let drawn = Drawn {
            id: track.next_slice,
            lane: track.lanes.take(Place::of(a)),
        };
        track.next_slice += 1;
        track.slices.insert(slice_key(a), drawn);
        let process = self.process(number);
        let slice = SliceBegin {
            id: drawn.id,
            lane: drawn.lane,
            allocation: a,
            time_ns,
            before_window,
            stack: self.stack(process, a.stack),
        };
        self.canvas.slice_begin(process, &slice)
    }

    /// Opens slices for what was live before the window (or before the
    /// newest `--max-events`) began.
    fn open_live(&mut self, number: usize, memory: &ProcessMemory, changes: &[Change], time_ns: u64) -> io::Result<()> {
        let made_now: Vec<(u8, u64)> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Allocated(a) => Some(slice_key(a)),
                _ => None,
            })
            .collect();
        let mut earlier: Vec<Allocation> = memory
            .live_allocations()
            .filter(|a| !made_now.contains(&slice_key(a)))
            .cloned()
            .collect();
        earlier.sort_by_key(|a| (a.time_ns, a.address));
        for a in &earlier {
            self.begin_slice(number, a, time_ns, true)?;
        }
        Ok(())
    }

    fn change(&mut self, number: usize, change: &Change, event: &Event, time_ns: u64) -> io::Result<()> {
        match change {
            Change::Allocated(a) => self.begin_slice(number, a, time_ns, false),
            Change::Freed { allocation: a, reused } => {
                let track = &mut self.tracks[number];
                let Some(drawn) = track.slices.remove(&slice_key(a)) else {
                    return Ok(());
                };
                track.lanes.give_back(drawn.lane);
                let slice = SliceEnd {
                    id: drawn.id,
                    lane: drawn.lane,
                    allocation: a,
                    time_ns,
                    ending: Ending::Freed {
                        by: event.api,
                        inferred: *reused,
                    },
                };
                self.canvas.slice_end(self.process(number), &slice)
            }
            Change::OutOfMemory {
                requested,
                device_free,
                device_total,
                by_limit,
            } => {
                let what = if *by_limit {
                    "refused by the memory limit"
                } else {
                    "out of memory"
                };
                let process = self.process(number);
                let refusal = Refusal {
                    name: format!("{what}: {} asked for {}", event.api, bytes(*requested)),
                    time_ns,
                    tid: event.tid,
                    requested: *requested,
                    device_free: *device_free,
                    device_total: *device_total,
                    by_limit: *by_limit,
                    device: event.device,
                    api: event.api,
                    stack: self.stack(process, event.stack),
                };
                self.canvas.refusal(process, &refusal)
            }
            Change::Mapped { .. } | Change::Unmapped { .. } | Change::Reserved { .. } | Change::Unreserved { .. } => {
                Ok(())
            }
        }
    }

    /// The owner counters' last values, and the end of every slice still
    /// open: allocations live at the end end with the trace.
    fn finish(&mut self, memories: &[ProcessMemory]) -> io::Result<()> {
        let index = self.index;
        let end_ns = self.last_ns.max(index.end_ns());
        let end_ns = self.window.to_ns.map_or(end_ns, |to| end_ns.min(to));
        for (number, info) in index.processes.iter().enumerate() {
            let process = self.process(number);
            let owners = std::mem::replace(&mut self.tracks[number].owners, OwnerTracks::new(index, info));
            for c in owners.finish(index, info, &self.window) {
                self.canvas.counter(process, &c)?;
            }
            let slices = &self.tracks[number].slices;
            let mut live: Vec<(Drawn, &Allocation)> = memories[number]
                .live_allocations()
                .filter_map(|a| slices.get(&slice_key(a)).map(|&drawn| (drawn, a)))
                .collect();
            live.sort_by_key(|&(drawn, _)| drawn.id);
            for (drawn, a) in live {
                let slice = SliceEnd {
                    id: drawn.id,
                    lane: drawn.lane,
                    allocation: a,
                    time_ns: end_ns,
                    ending: Ending::LiveAtEnd,
                };
                self.canvas.slice_end(process, &slice)?;
            }
        }
        Ok(())
    }
}

impl<C: Canvas> Consumer for Scene<'_, '_, C> {
    type Error = io::Error;

    fn step(&mut self, step: &Step) -> Result<(), Self::Error> {
        let (index, info, event, changes) = (self.index, step.info, step.event, step.changes);
        let number = step.process;
        let track = &mut self.tracks[number];
        track.summary.observe(event, changes);
        let counters = track.owners.observe(index, info, event, changes);
        if step.before_window {
            return Ok(());
        }
        let process = self.process(number);
        for c in &counters {
            self.canvas.counter(process, c)?;
        }
        if event.op == Op::Tensor {
            return self.tensor_counters(number, event);
        }
        if !event.op.is_memory_event() {
            return Ok(());
        }
        if self.skip > 0 {
            self.skip -= 1;
            return Ok(());
        }
        let time_ns = event.time_ns;
        self.last_ns = self.last_ns.max(time_ns);
        if !self.tracks[number].opened {
            self.tracks[number].opened = true;
            self.open_live(number, step.memory, changes, time_ns)?;
        }
        for change in changes {
            self.change(number, change, event, time_ns)?;
        }
        self.live_counters(number, changes, time_ns)
    }
}

fn slice_key(a: &Allocation) -> (u8, u64) {
    (a.kind as u8, a.address)
}
