//! Perfetto's format: Chrome trace-event JSON, which Perfetto's UI (and
//! `chrome://tracing`) opens.
//!
//! - one process per traced process image, named by its argv, with its
//!   parent and image number as labels;
//! - per device, a counter track of live bytes, the report's figure, and
//!   counter tracks of where the driver's memory went: one per owning
//!   library and one per driver category (see [`owner_tracks`]);
//! - per device where PyTorch's tensors were recorded, its allocated and
//!   reserved bytes as two counter tracks beside those;
//! - each allocation's lifetime as an async slice named by size and API,
//!   with its top frames in `args`;
//! - out-of-memory failures as instant events; process starts (forks and
//!   execs) as instant events naming the parent.
//!
//! Times are microseconds from the trace's start. The JSON is streamed:
//! memory stays proportional to the allocations live at once.

use crate::analysis::UnreadBlock;
use crate::analysis::{
    Allocation, Change, Consumer, DeviceKey, ProcessIndex, ProcessMemory, ProcessSummary, Replay, Step, TraceIndex,
    Window,
};
use crate::outputs::wording::bytes;
use crate::outputs::wording::device_label;
use crate::outputs::wording::frame_text;
use crate::system::progress::Progress;
use cudatrace_events::{Event, Op};
use std::collections::HashMap;
use std::io::{self, Write};

mod owner_tracks;

use owner_tracks::{Counter, OwnerTracks};

/// Frames of an allocation's stack named in its slice's `args`.
const TOP_FRAMES: usize = 5;

/// One process's state while its events are written.
struct ProcessTrack {
    summary: ProcessSummary,
    /// Slice id of each live allocation, keyed as the replay keys them.
    slices: HashMap<(u8, u64), u64>,
    next_slice: u64,
    /// `args.stack` text of each stack, JSON-escaped.
    stacks: HashMap<u32, String>,
    /// The window has started for this process: live allocations got
    /// their opening slices.
    opened: bool,
    /// Owner and category counters.
    owners: OwnerTracks,
}

impl ProcessTrack {
    /// The top frames of `stack` as a JSON list of strings, made once per stack.
    fn stack_json(&mut self, index: &TraceIndex, info: &ProcessIndex, stack: u32) -> &str {
        self.stacks.entry(stack).or_insert_with(|| {
            let frames: Vec<String> = index
                .frames(info, stack)
                .iter()
                .take(TOP_FRAMES)
                .map(frame_text)
                .collect();
            serde_json::to_string(&frames).unwrap_or_else(|_| "[]".into())
        })
    }
}

/// JSON items written one after another, with the commas between them.
struct Items<W: Write> {
    out: W,
    first: bool,
}

impl<W: Write> Items<W> {
    /// Where the next item goes, after the comma that separates it from the last.
    fn next(&mut self) -> io::Result<&mut W> {
        if self.first {
            self.first = false;
        } else {
            self.out.write_all(b",\n")?;
        }
        Ok(&mut self.out)
    }
}

/// How many times [`write`] reads the trace's events: a count first when
/// only the newest `max_events` are written.
pub fn passes(max_events: Option<u64>) -> u64 {
    1 + u64::from(max_events.is_some())
}

/// Writes `index` as Perfetto JSON into `out`: the part of the run inside
/// `window` and, with `max_events`, only its newest memory events. Returns
/// the blocks of events that could not be read again.
pub fn write(
    index: &TraceIndex,
    window: Window,
    max_events: Option<u64>,
    out: &mut impl Write,
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
    let mut writer = TraceWriter {
        index,
        window,
        items: Items { out, first: true },
        tracks: index
            .processes
            .iter()
            .map(|info| ProcessTrack {
                summary: ProcessSummary::default(),
                slices: HashMap::new(),
                next_slice: 0,
                stacks: HashMap::new(),
                opened: false,
                owners: OwnerTracks::new(index, info),
            })
            .collect(),
        skip,
        last_ns: index.start_ns(),
    };
    writer
        .items
        .out
        .write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
    writer.processes()?;
    writer.paused_spans()?;
    let replayed = Replay::new(index, progress).window(window).run(&mut writer)?;
    writer.finish(&replayed.memories)?;
    writer.items.out.write_all(b"\n]}\n")?;
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

/// The JSON being written, as a consumer of the replay.
struct TraceWriter<'a, W: Write> {
    index: &'a TraceIndex,
    window: Window,
    items: Items<W>,
    tracks: Vec<ProcessTrack>,
    /// Memory events still to leave out, to keep the newest `--max-events`.
    skip: u64,
    /// The latest event time written.
    last_ns: u64,
}

impl<W: Write> TraceWriter<'_, W> {
    /// Microseconds from the trace's start.
    fn us(&self, time_ns: u64) -> f64 {
        time_ns.saturating_sub(self.index.start_ns()) as f64 / 1000.0
    }

    /// A mark across every track where recording was paused and resumed.
    fn paused_spans(&mut self) -> io::Result<()> {
        for span in crate::analysis::paused_spans(self.index) {
            let ends = [
                (Some(span.start_ns), "recording paused"),
                (span.end_ns, "recording resumed"),
            ];
            for (time_ns, name) in ends {
                let Some(time_ns) = time_ns.filter(|&t| self.window.contains(t)) else {
                    continue;
                };
                let ts = self.us(time_ns);
                write!(
                    self.items.next()?,
                    "{{\"ph\":\"i\",\"s\":\"g\",\"name\":\"{name}\",\"cat\":\"recording\",\"pid\":0,\"tid\":0,\"ts\":{ts:.3}}}"
                )?;
            }
        }
        Ok(())
    }

    /// Each process's name and labels, and its start where the window has it.
    fn processes(&mut self) -> io::Result<()> {
        for info in &self.index.processes {
            let s = &info.start;
            write!(
                self.items.next()?,
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":{}}}}}",
                track_pid(info),
                json_string(&s.argv.join(" "))
            )?;
            let label = if s.image > 0 {
                format!("pid {}, parent {}, image {} (after exec)", s.pid, s.ppid, s.image)
            } else {
                format!("pid {}, parent {}", s.pid, s.ppid)
            };
            write!(
                self.items.next()?,
                "{{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":{},\"args\":{{\"labels\":{}}}}}",
                track_pid(info),
                json_string(&label)
            )?;
            if self.window.contains(s.start_monotonic_ns) {
                let what = if s.image > 0 { "exec" } else { "start" };
                let ts = self.us(s.start_monotonic_ns);
                write!(
                    self.items.next()?,
                    "{{\"ph\":\"i\",\"s\":\"p\",\"name\":\"{what}\",\"cat\":\"process\",\"pid\":{},\"tid\":{},\"ts\":{ts:.3},\"args\":{{\"ppid\":{},\"image\":{},\"argv\":{}}}}}",
                    track_pid(info),
                    s.pid,
                    s.ppid,
                    s.image,
                    json_string(&s.argv.join(" "))
                )?;
            }
        }
        Ok(())
    }

    fn counter(&mut self, info: &ProcessIndex, c: &Counter) -> io::Result<()> {
        let ts = self.us(c.time_ns);
        write!(
            self.items.next()?,
            "{{\"ph\":\"C\",\"name\":{},\"pid\":{},\"ts\":{ts:.3},\"args\":{{\"bytes\":{}}}}}",
            json_string(&c.name),
            track_pid(info),
            c.bytes
        )
    }

    /// PyTorch's tensor track: its allocated and reserved bytes after a
    /// tensor event.
    fn tensor_counters(&mut self, process: usize, event: &Event) -> io::Result<()> {
        let device = DeviceKey::of(event.device);
        let Some(stats) = self.tracks[process].summary.tensors.devices.get(&device) else {
            return Ok(());
        };
        let figures = [
            ("PyTorch allocated", stats.now.allocated),
            ("PyTorch reserved", stats.now.reserved),
        ];
        let (pid, ts) = (track_pid(&self.index.processes[process]), self.us(event.time_ns));
        for (what, bytes) in figures {
            write!(
                self.items.next()?,
                "{{\"ph\":\"C\",\"name\":\"{} {what}\",\"pid\":{pid},\"ts\":{ts:.3},\"args\":{{\"bytes\":{bytes}}}}}",
                device_label(device),
            )?;
        }
        Ok(())
    }

    /// The live-bytes counter of each device whose device memory `changes` changed.
    fn live_counters(&mut self, process: usize, changes: &[Change], ts: f64) -> io::Result<()> {
        let pid = track_pid(&self.index.processes[process]);
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
            if let Some(stats) = self.tracks[process].summary.devices.get(&device) {
                write!(
                    self.items.next()?,
                    "{{\"ph\":\"C\",\"name\":\"{} live bytes\",\"pid\":{pid},\"ts\":{ts:.3},\"args\":{{\"bytes\":{}}}}}",
                    device_label(device),
                    stats.current
                )?;
            }
        }
        Ok(())
    }

    /// The owner counters' last values, and the end of every slice still
    /// open: allocations live at the end end with the trace.
    fn finish(&mut self, memories: &[ProcessMemory]) -> io::Result<()> {
        let index = self.index;
        let end_ns = self.last_ns.max(index.end_ns());
        let end_ts = self.us(self.window.to_ns.map_or(end_ns, |to| end_ns.min(to)));
        for (process, info) in index.processes.iter().enumerate() {
            let owners = std::mem::replace(&mut self.tracks[process].owners, OwnerTracks::new(index, info));
            for c in owners.finish(index, info, &self.window) {
                self.counter(info, &c)?;
            }
            let slices = &self.tracks[process].slices;
            let mut live: Vec<(u64, &Allocation)> = memories[process]
                .live_allocations()
                .filter_map(|a| slices.get(&slice_key(a)).map(|&id| (id, a)))
                .collect();
            live.sort_by_key(|&(id, _)| id);
            for (id, a) in live {
                write!(
                    self.items.next()?,
                    "{{\"ph\":\"e\",\"cat\":\"memory\",\"name\":{},\"id\":\"{}-{id}\",\"pid\":{},\"tid\":0,\"ts\":{end_ts:.3},\"args\":{{\"live_at_end\":true}}}}",
                    json_string(&slice_name(a)),
                    info.start.process,
                    track_pid(info)
                )?;
            }
        }
        Ok(())
    }
}

impl<W: Write> Consumer for TraceWriter<'_, W> {
    type Error = io::Error;

    fn step(&mut self, step: &Step) -> Result<(), Self::Error> {
        let (index, info, event, changes) = (self.index, step.info, step.event, step.changes);
        let track = &mut self.tracks[step.process];
        track.summary.observe(event, changes);
        let counters = track.owners.observe(index, info, event, changes);
        if step.before_window {
            return Ok(());
        }
        for c in &counters {
            self.counter(info, c)?;
        }
        if event.op == Op::Tensor {
            return self.tensor_counters(step.process, event);
        }
        if !event.op.is_memory_event() {
            return Ok(());
        }
        if self.skip > 0 {
            self.skip -= 1;
            return Ok(());
        }
        let ts = self.us(event.time_ns);
        self.last_ns = self.last_ns.max(event.time_ns);
        let track = &mut self.tracks[step.process];
        if !track.opened {
            track.opened = true;
            open_live(index, info, track, step.memory, changes, ts, &mut self.items)?;
        }
        for change in changes {
            write_change(index, info, track, change, event, ts, &mut self.items)?;
        }
        self.live_counters(step.process, changes, ts)
    }
}

/// The pid a process image's tracks use: its pid, with the image number
/// above the highest pid Linux hands out (2^22), so that each image after
/// an exec is a process of its own.
fn track_pid(info: &ProcessIndex) -> u64 {
    u64::from(info.start.pid) | (u64::from(info.start.image) << 22)
}

fn slice_key(a: &Allocation) -> (u8, u64) {
    (a.kind as u8, a.address)
}

fn slice_name(a: &Allocation) -> String {
    format!("{} {}", bytes(a.size), a.api)
}

/// Opens slices for what was live before the window (or before the
/// newest `--max-events`) began.
#[allow(clippy::too_many_arguments)]
fn open_live(
    index: &TraceIndex,
    info: &ProcessIndex,
    track: &mut ProcessTrack,
    memory: &ProcessMemory,
    changes: &[Change],
    ts: f64,
    items: &mut Items<impl Write>,
) -> io::Result<()> {
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
    for a in earlier {
        begin_slice(index, info, track, &a, ts, true, items)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn begin_slice(
    index: &TraceIndex,
    info: &ProcessIndex,
    track: &mut ProcessTrack,
    a: &Allocation,
    ts: f64,
    before_window: bool,
    items: &mut Items<impl Write>,
) -> io::Result<()> {
    let id = track.next_slice;
    track.next_slice += 1;
    track.slices.insert(slice_key(a), id);
    let stack = track.stack_json(index, info, a.stack);
    let device = a.device.map_or("null".to_string(), |d| d.to_string());
    write!(
        items.next()?,
        "{{\"ph\":\"b\",\"cat\":\"memory\",\"name\":{},\"id\":\"{}-{id}\",\"pid\":{},\"tid\":0,\"ts\":{ts:.3},\"args\":{{\"address\":\"{:#x}\",\"size\":{},\"api\":\"{}\",\"kind\":\"{}\",\"device\":{device},\"stream\":{},\"stack\":{stack}{}}}}}",
        json_string(&slice_name(a)),
        info.start.process,
        track_pid(info),
        a.address,
        a.size,
        a.api,
        a.kind,
        a.stream,
        if before_window { ",\"allocated_before_window\":true" } else { "" }
    )
}

#[allow(clippy::too_many_arguments)]
fn write_change(
    index: &TraceIndex,
    info: &ProcessIndex,
    track: &mut ProcessTrack,
    change: &Change,
    event: &Event,
    ts: f64,
    items: &mut Items<impl Write>,
) -> io::Result<()> {
    match change {
        Change::Allocated(a) => begin_slice(index, info, track, a, ts, false, items),
        Change::Freed { allocation: a, reused } => {
            let Some(id) = track.slices.remove(&slice_key(a)) else {
                return Ok(());
            };
            write!(
                items.next()?,
                "{{\"ph\":\"e\",\"cat\":\"memory\",\"name\":{},\"id\":\"{}-{id}\",\"pid\":{},\"tid\":0,\"ts\":{ts:.3},\"args\":{{\"freed_by\":\"{}\",\"free_inferred\":{reused}}}}}",
                json_string(&slice_name(a)),
                info.start.process,
                track_pid(info),
                event.api
            )
        }
        Change::OutOfMemory {
            requested,
            device_free,
            device_total,
            by_limit,
        } => {
            let stack = track.stack_json(index, info, event.stack);
            let what = if *by_limit {
                "refused by the memory limit"
            } else {
                "out of memory"
            };
            write!(
                items.next()?,
                "{{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"oom\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{ts:.3},\"args\":{{\"requested\":{requested},\"device_free\":{device_free},\"device_total\":{device_total},\"refused_by_limit\":{by_limit},\"device\":{},\"api\":\"{}\",\"stack\":{}}}}}",
                json_string(&format!("{what}: {} asked for {}", event.api, bytes(*requested))),
                track_pid(info),
                event.tid,
                event.device.map_or("null".to_string(), |d| d.to_string()),
                event.api,
                stack
            )
        }
        Change::Mapped { .. } | Change::Unmapped { .. } | Change::Reserved { .. } | Change::Unreserved { .. } => Ok(()),
    }
}

fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}
