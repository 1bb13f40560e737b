//! `cudatrace perfetto`: Chrome trace-event JSON, which Perfetto's UI (and
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

use crate::analysis::{Allocation, Change, DeviceKey, EventStream, ProcessIndex, ProcessSummary, TraceIndex, Window};
use crate::cli::PerfettoArgs;
use crate::failure::Failure;
use crate::output_file::{is_private, OutputFile};
use crate::progress::Progress;
use crate::wording::bytes;
use cudatrace_events::{Event, Op};
use std::collections::HashMap;
use std::io::{self, BufWriter, Write};

mod owner_tracks;

use owner_tracks::{Counter, OwnerTracks};

/// Past this size Perfetto's UI struggles to open a JSON trace.
const WARN_BYTES: u64 = 500 << 20;
/// Frames of an allocation's stack named in its slice's `args`.
const TOP_FRAMES: usize = 5;

/// Counts what it writes.
struct Counting<W: Write> {
    out: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

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
                .map(|f| f.text())
                .collect();
            serde_json::to_string(&frames).unwrap_or_else(|_| "[]".into())
        })
    }
}

/// `cudatrace perfetto`.
pub fn command(args: PerfettoArgs) -> Result<u8, Failure> {
    let index = TraceIndex::read(&args.trace)?;
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| args.trace.with_extension("perfetto.json"));
    let window = Window::seconds(index.start_ns(), args.window.from, args.window.to);
    let passes = if args.window.max_events.is_some() { 2 } else { 1 };
    let progress = Progress::new("perfetto", index.events * passes);
    let skip = match args.window.max_events {
        Some(max) => count_in_window(&index, &window, &progress).saturating_sub(max),
        None => 0,
    };
    let mut output = OutputFile::create(&path, is_private(&args.trace), args.replace.force)?;
    let mut out = Counting {
        out: BufWriter::with_capacity(1 << 20, output.file()),
        written: 0,
    };
    let errors = match write(&index, &window, skip, &mut out, &progress).and_then(|errors| {
        out.flush()?;
        Ok(errors)
    }) {
        Ok(errors) => errors,
        Err(e) => {
            drop(out);
            output.abandon();
            return Err(format!("cannot write {}: {e}", path.display()).into());
        }
    };
    let written = out.written;
    drop(out);
    output.finish()?;
    drop(progress);
    println!("{}", path.display());
    crate::terminal::say("cudatrace: open it at ui.perfetto.dev with \"Open trace file\"");
    if written > WARN_BYTES {
        crate::terminal::say(&format!(
            "cudatrace: {} is {}: Perfetto's UI may fail to open JSON this large; narrow it with --from/--to or --max-events",
            path.display(),
            bytes(written)
        ));
    }
    Ok(super::say_what_the_trace_lacks(&index, &errors))
}

/// Memory events inside the window.
fn count_in_window(index: &TraceIndex, window: &Window, progress: &Progress) -> u64 {
    let mut n = 0;
    for (_, event) in EventStream::new(index) {
        progress.tick();
        n += u64::from(event.op.is_memory_event() && window.contains(event.time_ns));
    }
    progress.next_pass("perfetto");
    n
}

fn write(
    index: &TraceIndex,
    window: &Window,
    mut skip: u64,
    out: &mut impl Write,
    progress: &Progress,
) -> io::Result<Vec<String>> {
    let start_ns = index.start_ns();
    let us = |time_ns: u64| (time_ns.saturating_sub(start_ns)) as f64 / 1000.0;
    out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
    let mut first = true;
    let mut sep = |out: &mut dyn Write| -> io::Result<()> {
        if first {
            first = false;
            Ok(())
        } else {
            out.write_all(b",\n")
        }
    };
    for info in &index.processes {
        let s = &info.start;
        sep(out)?;
        write!(
            out,
            "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":{}}}}}",
            track_pid(info),
            json_string(&s.argv.join(" "))
        )?;
        sep(out)?;
        let label = if s.image > 0 {
            format!("pid {}, parent {}, image {} (after exec)", s.pid, s.ppid, s.image)
        } else {
            format!("pid {}, parent {}", s.pid, s.ppid)
        };
        write!(
            out,
            "{{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":{},\"args\":{{\"labels\":{}}}}}",
            track_pid(info),
            json_string(&label)
        )?;
        if window.contains(s.start_monotonic_ns) {
            sep(out)?;
            let what = if s.image > 0 { "exec" } else { "start" };
            write!(
                out,
                "{{\"ph\":\"i\",\"s\":\"p\",\"name\":\"{what}\",\"cat\":\"process\",\"pid\":{},\"tid\":{},\"ts\":{:.3},\"args\":{{\"ppid\":{},\"image\":{},\"argv\":{}}}}}",
                track_pid(info),
                s.pid,
                us(s.start_monotonic_ns),
                s.ppid,
                s.image,
                json_string(&s.argv.join(" "))
            )?;
        }
    }
    let mut tracks: Vec<ProcessTrack> = index
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
        .collect();
    let counter = |out: &mut dyn Write, info: &ProcessIndex, c: &Counter| {
        write!(
            out,
            "{{\"ph\":\"C\",\"name\":{},\"pid\":{},\"ts\":{:.3},\"args\":{{\"bytes\":{}}}}}",
            json_string(&c.name),
            track_pid(info),
            us(c.time_ns),
            c.bytes
        )
    };
    let mut changes = Vec::new();
    let mut last_ns = start_ns;
    let mut stream = EventStream::new(index);
    for (process, event) in &mut stream {
        progress.tick();
        if window.is_after(event.time_ns) {
            continue;
        }
        let track = &mut tracks[process];
        track.summary.apply(&event, &mut changes);
        let info = &index.processes[process];
        let counters = track.owners.observe(index, info, &event, &changes);
        if window.is_before(event.time_ns) {
            continue;
        }
        for c in &counters {
            sep(out)?;
            counter(out, info, c)?;
        }
        if event.op == Op::Tensor {
            // PyTorch's tensor track: its allocated and reserved bytes.
            let device = DeviceKey::of(event.device);
            if let Some(stats) = track.summary.tensors.devices.get(&device) {
                for (what, bytes) in [
                    ("PyTorch allocated", stats.now.allocated),
                    ("PyTorch reserved", stats.now.reserved),
                ] {
                    sep(out)?;
                    write!(
                        out,
                        "{{\"ph\":\"C\",\"name\":\"{} {what}\",\"pid\":{},\"ts\":{:.3},\"args\":{{\"bytes\":{bytes}}}}}",
                        device.label(),
                        track_pid(info),
                        us(event.time_ns)
                    )?;
                }
            }
            continue;
        }
        if !event.op.is_memory_event() {
            continue;
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        let ts = us(event.time_ns);
        last_ns = last_ns.max(event.time_ns);
        if !track.opened {
            track.opened = true;
            open_live(index, info, track, &changes, ts, out, &mut sep)?;
        }
        for change in &changes {
            write_change(index, info, track, change, &event, ts, out, &mut sep)?;
        }
        let mut counted: Option<DeviceKey> = None;
        for change in &changes {
            let (Change::Allocated(a) | Change::Freed { allocation: a, .. }) = change else {
                continue;
            };
            let device = DeviceKey::of(a.device);
            if !a.is_device_memory() || counted == Some(device) {
                continue;
            }
            counted = Some(device);
            if let Some(stats) = track.summary.devices.get(&device) {
                sep(out)?;
                write!(
                    out,
                    "{{\"ph\":\"C\",\"name\":\"{} live bytes\",\"pid\":{},\"ts\":{ts:.3},\"args\":{{\"bytes\":{}}}}}",
                    device.label(),
                    track_pid(info),
                    stats.current
                )?;
            }
        }
    }
    // Allocations still live at the end: their slices end with the trace.
    let end_ns = last_ns.max(index.end_ns());
    let end_ts = us(window.to_ns.map_or(end_ns, |to| end_ns.min(to)));
    for (process, track) in tracks.iter_mut().enumerate() {
        let info = &index.processes[process];
        let owners = std::mem::replace(&mut track.owners, OwnerTracks::new(index, info));
        for c in owners.finish(index, info, window) {
            sep(out)?;
            counter(out, info, &c)?;
        }
        let mut live: Vec<(u64, &Allocation)> = track
            .summary
            .memory
            .live_allocations()
            .filter_map(|a| track.slices.get(&slice_key(a)).map(|&id| (id, a)))
            .collect();
        live.sort_by_key(|&(id, _)| id);
        for (id, a) in live {
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"e\",\"cat\":\"memory\",\"name\":{},\"id\":\"{}-{id}\",\"pid\":{},\"tid\":0,\"ts\":{end_ts:.3},\"args\":{{\"live_at_end\":true}}}}",
                json_string(&slice_name(a)),
                info.start.process,
                track_pid(info)
            )?;
        }
    }
    out.write_all(b"\n]}\n")?;
    Ok(stream.errors)
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
    changes: &[Change],
    ts: f64,
    out: &mut impl Write,
    sep: &mut impl FnMut(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let made_now: Vec<(u8, u64)> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Allocated(a) => Some(slice_key(a)),
            _ => None,
        })
        .collect();
    let mut earlier: Vec<Allocation> = track
        .summary
        .memory
        .live_allocations()
        .filter(|a| !made_now.contains(&slice_key(a)))
        .cloned()
        .collect();
    earlier.sort_by_key(|a| (a.time_ns, a.address));
    for a in earlier {
        begin_slice(index, info, track, &a, ts, true, out, sep)?;
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
    out: &mut impl Write,
    sep: &mut impl FnMut(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let id = track.next_slice;
    track.next_slice += 1;
    track.slices.insert(slice_key(a), id);
    let stack = track.stack_json(index, info, a.stack);
    let device = a.device.map_or("null".to_string(), |d| d.to_string());
    sep(out)?;
    write!(
        out,
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
    out: &mut impl Write,
    sep: &mut impl FnMut(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    match change {
        Change::Allocated(a) => begin_slice(index, info, track, a, ts, false, out, sep),
        Change::Freed { allocation: a, reused } => {
            let Some(id) = track.slices.remove(&slice_key(a)) else {
                return Ok(());
            };
            sep(out)?;
            write!(
                out,
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
        } => {
            let stack = track.stack_json(index, info, event.stack);
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"oom\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{ts:.3},\"args\":{{\"requested\":{requested},\"device_free\":{device_free},\"device_total\":{device_total},\"device\":{},\"api\":\"{}\",\"stack\":{}}}}}",
                json_string(&format!("out of memory: {} asked for {}", event.api, bytes(*requested))),
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
