//! [`write`]: the scene drawn as Perfetto's protobuf packets.

use super::interning::Interner;
use super::messages::{
    DebugAnnotation, TracePacket, TrackDescriptor, TrackEvent, TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END,
};
use super::riding_counters::Moment;
use super::sequence::Sequence;
use super::tracks::{Tracks, RECORDING_TRACK};
use crate::outputs::perfetto_scene::{
    self, Canvas, Counter, Ending, Mark, Process, ProcessStart, Refusal, SliceBegin, SliceEnd,
};
use cudatrace_analysis::Progress;
use cudatrace_analysis::{TraceIndex, UnreadBlock, Window};
use std::io::{self, Write};

/// Writes `index` as a Perfetto protobuf trace into `out`, its packets
/// compressed if `compress`: the part of the run inside `window` and, with
/// `max_events`, only its newest memory events. Returns the blocks of events
/// that could not be read again.
pub fn write(
    index: &TraceIndex,
    window: Window,
    max_events: Option<u64>,
    compress: bool,
    out: &mut impl Write,
    progress: &Progress,
) -> io::Result<Vec<UnreadBlock>> {
    let mut canvas = ProtoCanvas {
        sequence: Sequence::new(out, index.start_ns(), compress),
        interner: Interner::default(),
        tracks: Tracks::default(),
        moment: Moment::default(),
        new_tracks: Vec::new(),
    };
    perfetto_scene::draw(index, window, max_events, &mut canvas, progress)
}

/// An argument: its name, and how its value is set.
fn argument(interner: &mut Interner, name: &'static str, set: impl FnOnce(&mut DebugAnnotation)) -> DebugAnnotation {
    let mut annotation = DebugAnnotation {
        name_iid: Some(interner.argument_name(name)),
        ..Default::default()
    };
    set(&mut annotation);
    annotation
}

fn uint(interner: &mut Interner, name: &'static str, value: u64) -> DebugAnnotation {
    argument(interner, name, |a| a.uint_value = Some(value))
}

fn boolean(interner: &mut Interner, name: &'static str, value: bool) -> DebugAnnotation {
    argument(interner, name, |a| a.bool_value = Some(value))
}

fn text(interner: &mut Interner, name: &'static str, value: &str) -> DebugAnnotation {
    let iid = interner.string(value);
    argument(interner, name, |a| a.string_value_iid = Some(iid))
}

/// A device ordinal; no value (the JSON's `null`) when it is unknown.
fn device(interner: &mut Interner, device: Option<u8>) -> DebugAnnotation {
    argument(interner, "device", |a| a.int_value = device.map(i64::from))
}

/// The protobuf being written.
struct ProtoCanvas<W: Write> {
    sequence: Sequence<W>,
    interner: Interner,
    tracks: Tracks,
    /// The moment held back.
    moment: Moment,
    /// Descriptors of tracks new to the thing being drawn.
    new_tracks: Vec<TrackDescriptor>,
}

impl<W: Write> ProtoCanvas<W> {
    /// Writes the descriptors of the tracks made new since the last call.
    fn describe_new_tracks(&mut self) -> io::Result<()> {
        let mut new = std::mem::take(&mut self.new_tracks);
        for descriptor in new.drain(..) {
            let mut packet = TracePacket {
                track_descriptor: Some(descriptor),
                ..Default::default()
            };
            self.sequence.write(&mut packet, None)?;
        }
        self.new_tracks = new;
        Ok(())
    }

    /// Draws `event` at `time_ns`, with the interned entries made for it.
    fn event(&mut self, time_ns: u64, event: TrackEvent) -> io::Result<()> {
        self.describe_new_tracks()?;
        let interned = self.interner.take_fresh();
        self.moment.event(time_ns, event, interned, &mut self.sequence)
    }

    /// An instant named `name` in category `category` on track `track`.
    fn instant(&mut self, track: Option<u64>, name: &str, category: &'static str) -> TrackEvent {
        TrackEvent {
            r#type: Some(TYPE_INSTANT),
            track_uuid: track,
            name_iid: Some(self.interner.event_name(name)),
            category_iids: vec![self.interner.category(category)],
            ..Default::default()
        }
    }
}

impl<W: Write> Canvas for ProtoCanvas<W> {
    fn begin(&mut self) -> io::Result<()> {
        self.sequence.start(RECORDING_TRACK)?;
        let mut recording = TracePacket {
            track_descriptor: Some(self.tracks.recording()),
            ..Default::default()
        };
        self.sequence.write(&mut recording, None)
    }

    fn process(&mut self, process: Process) -> io::Result<()> {
        self.tracks.process(process, &mut self.new_tracks);
        self.describe_new_tracks()
    }

    fn process_start(&mut self, process: Process, start: &ProcessStart) -> io::Result<()> {
        let track = self.tracks.thread(process, start.tid, &mut self.new_tracks);
        let mut event = self.instant(Some(track), start.what, "process");
        let i = &mut self.interner;
        event.debug_annotations = vec![
            uint(i, "ppid", u64::from(start.ppid)),
            uint(i, "image", u64::from(start.image)),
            text(i, "argv", &start.argv),
        ];
        self.event(start.time_ns, event)
    }

    fn mark(&mut self, mark: &Mark) -> io::Result<()> {
        let event = self.instant(None, mark.name, "recording");
        self.event(mark.time_ns, event)
    }

    fn counter(&mut self, process: Process, counter: &Counter) -> io::Result<()> {
        let track = self.tracks.counter(process, &counter.name, &mut self.new_tracks);
        self.describe_new_tracks()?;
        let value = i64::try_from(counter.bytes).unwrap_or(i64::MAX);
        self.moment.counter(counter.time_ns, track, value, &mut self.sequence)
    }

    fn slice_begin(&mut self, process: Process, slice: &SliceBegin) -> io::Result<()> {
        let a = slice.allocation;
        let track = self.tracks.lane(process, slice.lane, &mut self.new_tracks);
        let i = &mut self.interner;
        let mut arguments = Vec::with_capacity(7);
        arguments.push(argument(i, "address", |v| v.pointer_value = Some(a.address)));
        arguments.push(uint(i, "size", a.size));
        arguments.push(text(i, "api", a.api.name()));
        arguments.push(text(i, "kind", a.kind.name()));
        arguments.push(device(i, a.device));
        arguments.push(uint(i, "stream", a.stream));
        if slice.before_window {
            arguments.push(boolean(i, "allocated_before_window", true));
        }
        let event = TrackEvent {
            r#type: Some(TYPE_SLICE_BEGIN),
            track_uuid: Some(track),
            name_iid: Some(i.slice_name(a)),
            category_iids: vec![i.category("memory")],
            callstack_iid: i.callstack(process.number, &slice.stack),
            debug_annotations: arguments,
            ..Default::default()
        };
        self.event(slice.time_ns, event)
    }

    fn slice_end(&mut self, process: Process, slice: &SliceEnd) -> io::Result<()> {
        let track = self.tracks.lane(process, slice.lane, &mut self.new_tracks);
        let i = &mut self.interner;
        let arguments = match slice.ending {
            Ending::Freed { by, inferred } => {
                vec![text(i, "freed_by", by.name()), boolean(i, "free_inferred", inferred)]
            }
            Ending::LiveAtEnd => vec![boolean(i, "live_at_end", true)],
        };
        let event = TrackEvent {
            r#type: Some(TYPE_SLICE_END),
            track_uuid: Some(track),
            debug_annotations: arguments,
            ..Default::default()
        };
        self.event(slice.time_ns, event)
    }

    fn refusal(&mut self, process: Process, refusal: &Refusal) -> io::Result<()> {
        let track = self.tracks.thread(process, refusal.tid, &mut self.new_tracks);
        let mut event = self.instant(Some(track), &refusal.name, "oom");
        let i = &mut self.interner;
        event.debug_annotations = vec![
            uint(i, "requested", refusal.requested),
            uint(i, "device_free", refusal.device_free),
            uint(i, "device_total", refusal.device_total),
            boolean(i, "refused_by_limit", refusal.by_limit),
            device(i, refusal.device),
            text(i, "api", refusal.api.name()),
        ];
        event.callstack_iid = i.callstack(process.number, &refusal.stack);
        self.event(refusal.time_ns, event)
    }

    fn end(&mut self) -> io::Result<()> {
        self.moment.flush(&mut self.sequence)?;
        self.sequence.finish()
    }
}
