//! The part of Perfetto's trace protobuf that `cudatrace perfetto` writes,
//! as prost messages. Field numbers are those of Perfetto's `.proto` files
//! (`protos/perfetto/trace/…`); fields not written are left out. Repeated
//! numbers are not packed: the files declare them proto2 without
//! `[packed = true]`, and Perfetto's decoder reads them one by one.

/// `TracePacket.sequence_flags`: the sequence's incremental state (interned
/// data, defaults) was cleared; the packet starts it anew.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
/// `TracePacket.sequence_flags`: the packet needs the sequence's
/// incremental state.
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

/// `BuiltinClock.BUILTIN_CLOCK_MONOTONIC`: the trace's clock.
pub const CLOCK_MONOTONIC: u32 = 3;

/// `TrackEvent.Type.TYPE_SLICE_BEGIN`.
pub const TYPE_SLICE_BEGIN: i32 = 1;
/// `TrackEvent.Type.TYPE_SLICE_END`.
pub const TYPE_SLICE_END: i32 = 2;
/// `TrackEvent.Type.TYPE_INSTANT`.
pub const TYPE_INSTANT: i32 = 3;
/// `TrackEvent.Type.TYPE_COUNTER`.
pub const TYPE_COUNTER: i32 = 4;

/// `CounterDescriptor.Unit.UNIT_SIZE_BYTES`.
pub const UNIT_SIZE_BYTES: i32 = 3;

/// `TracePacket`: one packet of the trace (a `Trace` is its packets, each
/// as field 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    /// When it happened: ns of the clock `timestamp_clock_id` names (or the
    /// sequence's default clock).
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    /// The clock of `timestamp`, where not the sequence's default.
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    /// The sequence it belongs to: interned data and defaults are per sequence.
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    /// `SEQ_*` flags.
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// The first packet its sequence wrote.
    #[prost(bool, optional, tag = "87")]
    pub first_packet_on_sequence: Option<bool>,
    /// Strings and frames interned from this packet on.
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    /// Defaults for the sequence's later packets.
    #[prost(message, optional, tag = "59")]
    pub trace_packet_defaults: Option<TracePacketDefaults>,
    /// Clock readings that tie the sequence's clock to the trace's.
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    /// An event on a track.
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    /// A track.
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// `TracePacketDefaults`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacketDefaults {
    /// The clock of timestamps that name none.
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    /// Defaults of track events.
    #[prost(message, optional, tag = "11")]
    pub track_event_defaults: Option<TrackEventDefaults>,
}

/// `TrackEventDefaults`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEventDefaults {
    /// The track of events that name none.
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
}

/// `ClockSnapshot`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    /// Each clock's reading at one moment.
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    /// The clock the trace's times are in (`BuiltinClock`).
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

/// `ClockSnapshot.Clock`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    /// 1–63 built in; 64–127 the sequence's own.
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    /// Its reading, in ns.
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
    /// Timestamps of this clock are deltas from the sequence's last one.
    #[prost(bool, optional, tag = "3")]
    pub is_incremental: Option<bool>,
}

/// `TrackDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    /// The track's id, unique in the trace.
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    /// The track it is drawn under.
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    /// Its name.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    /// The process whose track it is.
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    /// The thread whose track it is.
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    /// It is a counter track.
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

/// `ProcessDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    /// The pid.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// The name.
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
    /// Labels shown beside the name.
    #[prost(string, repeated, tag = "8")]
    pub process_labels: Vec<String>,
}

/// `ThreadDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadDescriptor {
    /// Its process's pid.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// The tid.
    #[prost(int64, optional, tag = "2")]
    pub tid: Option<i64>,
}

/// `CounterDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {
    /// The unit of its values (`Unit`).
    #[prost(int32, optional, tag = "3")]
    pub unit: Option<i32>,
}

/// `TrackEvent`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    /// Interned categories (`EventCategory`).
    #[prost(uint64, repeated, packed = "false", tag = "3")]
    pub category_iids: Vec<u64>,
    /// Interned name (`EventName`).
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    /// `TYPE_*`.
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    /// Its track, where not the sequence's default.
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// A counter's new value (`TYPE_COUNTER`).
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    /// Other counter tracks with a value at the same time…
    #[prost(uint64, repeated, packed = "false", tag = "31")]
    pub extra_counter_track_uuids: Vec<u64>,
    /// …and their values, in the same order.
    #[prost(int64, repeated, packed = "false", tag = "12")]
    pub extra_counter_values: Vec<i64>,
    /// Interned call stack (`Callstack`).
    #[prost(uint64, optional, tag = "56")]
    pub callstack_iid: Option<u64>,
    /// Named arguments.
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
}

/// `DebugAnnotation`: one named argument of an event.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    /// Interned name (`DebugAnnotationName`).
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    /// A true or false value.
    #[prost(bool, optional, tag = "2")]
    pub bool_value: Option<bool>,
    /// A number.
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    /// A signed number.
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    /// An address, shown in hexadecimal.
    #[prost(uint64, optional, tag = "7")]
    pub pointer_value: Option<u64>,
    /// Interned text (`InternedData.debug_annotation_string_values`).
    #[prost(uint64, optional, tag = "17")]
    pub string_value_iid: Option<u64>,
}

/// `InternedData`: entries a sequence's later packets refer to by iid.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedData {
    /// Event categories.
    #[prost(message, repeated, tag = "1")]
    pub event_categories: Vec<NamedEntry>,
    /// Event names.
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<NamedEntry>,
    /// Argument names.
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<NamedEntry>,
    /// Function names of frames.
    #[prost(message, repeated, tag = "5")]
    pub function_names: Vec<InternedString>,
    /// Frames.
    #[prost(message, repeated, tag = "6")]
    pub frames: Vec<StackFrame>,
    /// Call stacks.
    #[prost(message, repeated, tag = "7")]
    pub callstacks: Vec<Callstack>,
    /// Source files of frames.
    #[prost(message, repeated, tag = "18")]
    pub source_paths: Vec<InternedString>,
    /// Text values of arguments.
    #[prost(message, repeated, tag = "29")]
    pub debug_annotation_string_values: Vec<InternedString>,
}

impl InternedData {
    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.event_categories.is_empty()
            && self.event_names.is_empty()
            && self.debug_annotation_names.is_empty()
            && self.function_names.is_empty()
            && self.frames.is_empty()
            && self.callstacks.is_empty()
            && self.source_paths.is_empty()
            && self.debug_annotation_string_values.is_empty()
    }
}

/// `EventCategory`, `EventName` and `DebugAnnotationName`: an iid and a name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamedEntry {
    /// Its iid.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// The name.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

/// `InternedString`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedString {
    /// Its iid.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// The text.
    #[prost(bytes = "vec", optional, tag = "2")]
    pub str: Option<Vec<u8>>,
}

/// `Frame` (of `profile_common.proto`): a frame with no mapping, named by
/// its function, file and line.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StackFrame {
    /// Its iid.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Interned function name (`function_names`).
    #[prost(uint64, optional, tag = "2")]
    pub function_name_id: Option<u64>,
    /// Interned source file (`source_paths`).
    #[prost(uint64, optional, tag = "5")]
    pub source_path_iid: Option<u64>,
    /// Line in the file.
    #[prost(uint32, optional, tag = "6")]
    pub line_number: Option<u32>,
}

/// `Callstack`: frames by iid, outermost first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Callstack {
    /// Its iid.
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// Its frames' iids.
    #[prost(uint64, repeated, packed = "false", tag = "2")]
    pub frame_ids: Vec<u64>,
}
