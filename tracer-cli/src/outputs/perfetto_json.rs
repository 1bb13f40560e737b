//! Perfetto as Chrome trace-event JSON (`cudatrace perfetto --format
//! json`), which Perfetto's UI (and `chrome://tracing`) opens. What it
//! draws is [`super::perfetto_scene`]'s; this writes it as JSON:
//!
//! - each process as `process_name` and `process_labels` metadata;
//! - counters as `C` events with their bytes in `args.bytes`;
//! - each allocation as an async slice (`b` and `e` events, with an id of
//!   its own in its process), its address, size, API, kind, device, stream
//!   and top frames in `args`;
//! - process starts and refusals as instants, and the recording marks as
//!   global instants.
//!
//! Times are microseconds from the trace's start. The JSON is streamed.

use crate::outputs::perfetto_scene::{
    self, slice_name, Canvas, Counter, Ending, Mark, Process, ProcessStart, Refusal, SliceBegin, SliceEnd,
};
use crate::wording::frame_text;
use cudatrace_analysis::Progress;
use cudatrace_analysis::{TraceIndex, UnreadBlock, Window};
use foldhash::HashMap;
use std::io::{self, Write};

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
    let mut canvas = JsonCanvas {
        start_ns: index.start_ns(),
        out,
        first: true,
        stacks: HashMap::default(),
    };
    perfetto_scene::draw(index, window, max_events, &mut canvas, progress)
}

/// The JSON being written.
struct JsonCanvas<W: Write> {
    start_ns: u64,
    out: W,
    /// No item is written yet.
    first: bool,
    /// `args.stack` text of each stack of each process, JSON-escaped.
    stacks: HashMap<(usize, u32), String>,
}

impl<W: Write> JsonCanvas<W> {
    /// Where the next item goes, after the comma that separates it from the last.
    fn next(&mut self) -> io::Result<&mut W> {
        if self.first {
            self.first = false;
        } else {
            self.out.write_all(b",\n")?;
        }
        Ok(&mut self.out)
    }

    /// Microseconds from the trace's start.
    fn us(&self, time_ns: u64) -> f64 {
        time_ns.saturating_sub(self.start_ns) as f64 / 1000.0
    }

    /// Where the next item goes, and the top frames of `stack` as a JSON
    /// list of strings (made once per stack).
    fn next_with_stack(&mut self, process: Process, stack: &perfetto_scene::Stack) -> io::Result<(&mut W, &str)> {
        let text = self.stacks.entry((process.number, stack.id)).or_insert_with(|| {
            let frames: Vec<String> = stack.top_frames().iter().map(frame_text).collect();
            serde_json::to_string(&frames).unwrap_or_else(|_| "[]".into())
        });
        if self.first {
            self.first = false;
        } else {
            self.out.write_all(b",\n")?;
        }
        Ok((&mut self.out, text))
    }
}

impl<W: Write> Canvas for JsonCanvas<W> {
    fn begin(&mut self) -> io::Result<()> {
        self.out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")
    }

    fn process(&mut self, process: Process) -> io::Result<()> {
        let pid = process.track_pid();
        let name = json_string(&process.name());
        write!(
            self.next()?,
            "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":{name}}}}}"
        )?;
        let label = json_string(&process.label());
        write!(
            self.next()?,
            "{{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":{pid},\"args\":{{\"labels\":{label}}}}}"
        )
    }

    fn process_start(&mut self, process: Process, start: &ProcessStart) -> io::Result<()> {
        let ts = self.us(start.time_ns);
        write!(
            self.next()?,
            "{{\"ph\":\"i\",\"s\":\"p\",\"name\":\"{}\",\"cat\":\"process\",\"pid\":{},\"tid\":{},\"ts\":{ts:.3},\"args\":{{\"ppid\":{},\"image\":{},\"argv\":{}}}}}",
            start.what,
            process.track_pid(),
            start.tid,
            start.ppid,
            start.image,
            json_string(&start.argv)
        )
    }

    fn mark(&mut self, mark: &Mark) -> io::Result<()> {
        let ts = self.us(mark.time_ns);
        write!(
            self.next()?,
            "{{\"ph\":\"i\",\"s\":\"g\",\"name\":\"{}\",\"cat\":\"recording\",\"pid\":0,\"tid\":0,\"ts\":{ts:.3}}}",
            mark.name
        )
    }

    fn counter(&mut self, process: Process, c: &Counter) -> io::Result<()> {
        let ts = self.us(c.time_ns);
        write!(
            self.next()?,
            "{{\"ph\":\"C\",\"name\":{},\"pid\":{},\"ts\":{ts:.3},\"args\":{{\"bytes\":{}}}}}",
            json_string(&c.name),
            process.track_pid(),
            c.bytes
        )
    }

    fn slice_begin(&mut self, process: Process, slice: &SliceBegin) -> io::Result<()> {
        let a = slice.allocation;
        let ts = self.us(slice.time_ns);
        let device = a.device.map_or("null".to_string(), |d| d.to_string());
        let (out, stack) = self.next_with_stack(process, &slice.stack)?;
        write!(
            out,
            "{{\"ph\":\"b\",\"cat\":\"memory\",\"name\":{},\"id\":\"{}-{}\",\"pid\":{},\"tid\":0,\"ts\":{ts:.3},\"args\":{{\"address\":\"{:#x}\",\"size\":{},\"api\":\"{}\",\"kind\":\"{}\",\"device\":{device},\"stream\":{},\"stack\":{stack}{}}}}}",
            json_string(&slice_name(a)),
            process.info.start.process,
            slice.id,
            process.track_pid(),
            a.address,
            a.size,
            a.api,
            a.kind,
            a.stream,
            if slice.before_window { ",\"allocated_before_window\":true" } else { "" }
        )
    }

    fn slice_end(&mut self, process: Process, slice: &SliceEnd) -> io::Result<()> {
        let ts = self.us(slice.time_ns);
        let out = self.next()?;
        write!(
            out,
            "{{\"ph\":\"e\",\"cat\":\"memory\",\"name\":{},\"id\":\"{}-{}\",\"pid\":{},\"tid\":0,\"ts\":{ts:.3},\"args\":{{",
            json_string(&slice_name(slice.allocation)),
            process.info.start.process,
            slice.id,
            process.track_pid(),
        )?;
        match slice.ending {
            Ending::Freed { by, inferred } => write!(out, "\"freed_by\":\"{by}\",\"free_inferred\":{inferred}}}}}"),
            Ending::LiveAtEnd => out.write_all(b"\"live_at_end\":true}}"),
        }
    }

    fn refusal(&mut self, process: Process, refusal: &Refusal) -> io::Result<()> {
        let ts = self.us(refusal.time_ns);
        let (out, stack) = self.next_with_stack(process, &refusal.stack)?;
        write!(
            out,
            "{{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"oom\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{ts:.3},\"args\":{{\"requested\":{},\"device_free\":{},\"device_total\":{},\"refused_by_limit\":{},\"device\":{},\"api\":\"{}\",\"stack\":{}}}}}",
            json_string(&refusal.name),
            process.track_pid(),
            refusal.tid,
            refusal.requested,
            refusal.device_free,
            refusal.device_total,
            refusal.by_limit,
            refusal.device.map_or("null".to_string(), |d| d.to_string()),
            refusal.api,
            stack
        )
    }

    fn end(&mut self) -> io::Result<()> {
        self.out.write_all(b"\n]}\n")
    }
}

fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}
