//! Record types, the frame's tags and the format's constants; their
//! payloads are written by `encode` and read by `decode`.

use cudatrace_events::recording_switch::Switch;
use cudatrace_events::{Event, ProcessPlace};

/// First eight bytes of a trace file.
pub const MAGIC: [u8; 8] = *b"CUTRACE\0";
/// Version of the record encodings; readers refuse other versions.
pub const FORMAT_VERSION: u32 = 13;
/// Oldest version readers still accept (it has no call stacks).
pub const OLDEST_READABLE_VERSION: u32 = 2;
/// Largest payload a frame may declare; anything larger is damage.
pub const MAX_PAYLOAD: usize = 64 << 20;
/// Most events the writer puts in one block.
pub const EVENTS_PER_BLOCK: usize = 4096;

pub(crate) const TAG_HEADER: u8 = b'H';
pub(crate) const TAG_PROCESS: u8 = b'P';
/// Version 2 and 3 event blocks: op and kind share one byte.
pub(crate) const TAG_EVENTS_PACKED: u8 = b'E';
/// Version 4 event blocks: op and kind have a byte each.
pub(crate) const TAG_EVENTS: u8 = b'e';
pub(crate) const TAG_NVML: u8 = b'N';
pub(crate) const TAG_NVML_STATUS: u8 = b'V';
pub(crate) const TAG_PROCESS_END: u8 = b'X';
pub(crate) const TAG_REFUSED: u8 = b'R';
pub(crate) const TAG_DAMAGED_SPOOL: u8 = b'D';
pub(crate) const TAG_UNRECORDED: u8 = b'U';
pub(crate) const TAG_STRING: u8 = b'S';
pub(crate) const TAG_SYMBOLS: u8 = b'K';
pub(crate) const TAG_FOOTER: u8 = b'F';
pub(crate) const TAG_RECORDING_SWITCH: u8 = b'W';
pub(crate) const TAG_FOLD: u8 = b'O';
pub(crate) const TAG_STEPS_STATE: u8 = b'Q';
pub(crate) const TAG_LOW_POINTS_STATE: u8 = b'L';

/// The first record: what wrote the trace, where and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// Version of the cudatrace that wrote the file.
    pub tracer_version: String,
    /// Host name.
    pub host: String,
    /// Wall-clock start of the run, ns since the Unix epoch.
    pub start_realtime_ns: u64,
    /// `CLOCK_MONOTONIC` at the same instant (event times use this clock).
    pub start_monotonic_ns: u64,
    /// The command that was traced.
    pub command: Vec<String>,
}

/// A process image appeared. `process` numbers images within the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessStart {
    /// Index of this process image in the trace (0, 1, ...).
    pub process: u32,
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// 0 for the first image of a pid, 1 after its first `exec`, ...
    pub image: u32,
    /// Command line.
    pub argv: Vec<String>,
    /// `CLOCK_MONOTONIC` when tracing started in it.
    pub start_monotonic_ns: u64,
    /// Wall clock at the same instant.
    pub start_realtime_ns: u64,
    /// Its host and rank (format 12 and later; before, the host is empty:
    /// the [`Header`]'s).
    pub place: ProcessPlace,
}

/// A process image ended, or the run ended while it was still running.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ProcessEnd {
    /// Index from [`ProcessStart::process`].
    pub process: u32,
    /// Exit code, or 128 + signal number; `None` when it could not be observed.
    pub exit_status: Option<i32>,
    /// `CLOCK_MONOTONIC` of the exit, when known.
    pub exit_time_ns: Option<u64>,
    /// The process was still alive when the trace was finished.
    pub still_running: bool,
    /// Hooks that never completed (the process died inside one).
    pub unfinished_records: u64,
    /// Frees of memory never seen allocated.
    pub unknown_frees: u64,
    /// Allocations the in-process live table had no room for.
    pub registry_overflows: u64,
    /// Records the process could not store (disk full, file size limit).
    pub dropped_records: u64,
    /// The `errno` that made the first record be dropped.
    pub drop_errno: Option<i32>,
    /// Sequence numbers the process handed out: events `0..reserved_events`
    /// happened, and those missing from the trace are lost.
    pub reserved_events: u64,
    /// Records found damaged in the spool.
    pub damaged_records: u64,
    /// `RANK`, `LOCAL_RANK` and `WORLD_SIZE` as the process's header said
    /// when it ended (format 12): a program may set them in its own
    /// environment once running, after its [`ProcessStart`] was written.
    pub ranks_at_end: [Option<u32>; 3],
    /// What the image `exec`'d (a path), for an image that replaced itself
    /// (format 13).
    pub exec_into: Option<String>,
    /// For the last traced image of a process that `exec`'d into images
    /// that did not record: the status the process itself ended with, as
    /// `cudatrace run` saw it (format 13).
    pub process_exit_status: Option<i32>,
}

/// A spool that could not be read at all: its process is in the trace only
/// through this record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedSpool {
    /// Process id, from the spool's name.
    pub pid: u32,
    /// Image number, from the spool's name.
    pub image: u32,
    /// Path of the spool.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A traced process that could not record: it found no way to create its
/// spool, and said so through the run's notice file (format 6 and later).
/// The trace keeps the notice's fields as they are.
pub type UnrecordedProcess = cudatrace_events::notices::Notice;

/// A spool the collector would not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Path of the spool.
    pub path: String,
    /// Owner of the spool.
    pub uid: u32,
    /// Why it was refused.
    pub reason: String,
}

/// What a fold (see `docs/trace-format.md`, "Folded traces") left of one
/// process image's older events: every sequence number below `folded_to`
/// that the trace does not hold was folded away on purpose, not lost.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Fold {
    /// Index from [`ProcessStart::process`].
    pub process: u32,
    /// The first sequence number kept in full detail: from here on every
    /// event is in the trace (or counted as lost).
    pub folded_to: u64,
    /// Events lost below `folded_to` before it was folded: gaps that were
    /// there already, which stay lost.
    pub lost_below: u64,
    /// Memory events and tensor records below `folded_to` that were folded
    /// away (not kept as state): recorded, then summarised.
    pub folded_events: u64,
    /// `CLOCK_MONOTONIC` ns from which the whole trace is in full detail.
    pub detail_from_ns: u64,
    /// Every allocation and free below `folded_to` (kept or folded), counted
    /// per device and call stack, so that a run's counts stay whole.
    pub sites: Vec<FoldedSite>,
}

/// The allocations and frees of one device and call stack below a fold:
/// the driver's device memory, pinned host memory, or PyTorch's tensors.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FoldedSite {
    /// Tensors (PyTorch's caching allocator's blocks), not driver memory.
    pub tensors: bool,
    /// Pinned host memory, not device memory.
    pub host: bool,
    /// Device ordinal; `None` for host memory or unknown.
    pub device: Option<u8>,
    /// Call stack (innermost node id; 0 = none).
    pub stack: u32,
    /// Allocations made.
    pub allocations: u64,
    /// Allocations freed.
    pub frees: u64,
    /// Bytes allocated in all.
    pub bytes: u64,
}

/// One device's figures over a step (see [`StepsState`]).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StepDeviceRow {
    /// Device ordinal; `None` when unknown.
    pub device: Option<u8>,
    /// Most bytes allocated at once during the step.
    pub allocated_peak: u64,
    /// Bytes allocated at its end.
    pub allocated_end: u64,
    /// Bytes reserved at its end, where PyTorch's tensors are recorded.
    pub reserved_end: Option<u64>,
}

/// One step, or a range of merged steps (see [`StepsState`]).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StepRow {
    /// Its number, from 1; the first of the range.
    pub first: u64,
    /// The last step of the range.
    pub last: u64,
    /// When it started (`CLOCK_MONOTONIC` ns).
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
    /// Whether the next step's start ended it.
    pub complete: bool,
    /// Per device.
    pub devices: Vec<StepDeviceRow>,
}

/// One call stack's live bytes on one device at the step ends a
/// [`StepsState`] keeps.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StepSeries {
    /// Device ordinal; `None` when unknown.
    pub device: Option<u8>,
    /// Call stack (innermost node id).
    pub stack: u32,
    /// Live bytes at each kept step end (shorter where it was not live at the later ones).
    pub bytes: Vec<u64>,
}

/// One call stack's live bytes on one device at a low point (see
/// [`LowPointsState`]).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LowPointSite {
    /// Device ordinal; `None` when unknown.
    pub device: Option<u8>,
    /// Call stack (innermost node id).
    pub stack: u32,
    /// Live bytes at the low point.
    pub bytes: u64,
}

/// One low point of a process's memory curve: the lowest moment of a
/// stretch of its run.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LowPoint {
    /// The middle of the stretch it is the lowest moment of
    /// (`CLOCK_MONOTONIC` ns).
    pub time_ns: u64,
    /// What was live then, per device and call stack (nothing listed: none).
    pub sites: Vec<LowPointSite>,
}

/// A process without steps, measured at the low points of its memory
/// curve: the low points of what folds took away, oldest first, so that
/// growth is measured over the whole run. Written right after the
/// process's [`Fold`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LowPointsState {
    /// Index from [`ProcessStart::process`].
    pub process: u32,
    /// Whether PyTorch's tensors are measured (else the driver's allocations).
    pub tensors: bool,
    /// The low points, in time order.
    pub points: Vec<LowPoint>,
}

/// A process's training steps as they stood at a fold's cut, so that the
/// steps and the growth measured before it survive the fold: written right
/// after the process's [`Fold`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StepsState {
    /// Index from [`ProcessStart::process`].
    pub process: u32,
    /// The call stack whose allocations start the steps.
    pub marker_stack: u32,
    /// The device of those allocations.
    pub marker_device: Option<u8>,
    /// Whether the marker is a tensor (else a driver allocation).
    pub tensors: bool,
    /// Steps started before the cut.
    pub started: u64,
    /// The growth series keep every `stride`-th step end.
    pub stride: u64,
    /// The steps (or ranges) ended before the cut.
    pub records: Vec<StepRow>,
    /// The step under way at the cut.
    pub open: Option<StepRow>,
    /// The step ends the growth series hold.
    pub ends: Vec<u64>,
    /// The growth series.
    pub series: Vec<StepSeries>,
}

/// The last record of a finished trace.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Footer {
    /// Process images in the trace.
    pub processes: u64,
    /// Events in the trace.
    pub events: u64,
    /// Events the processes could not record.
    pub dropped_events: u64,
    /// Spools refused.
    pub refused_spools: u64,
    /// Wall clock when the trace was finished.
    pub end_realtime_ns: u64,
    /// Events that happened but are not in the trace, from the gaps in each
    /// process's sequence numbers.
    pub lost_events: u64,
    /// Spools that could not be read at all.
    pub damaged_spools: u64,
}

/// The source frames one stack node stands for: one, or several where
/// the compiler inlined calls (innermost first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSymbols {
    /// The node id (see `cudatrace_events::stacks`).
    pub node: u32,
    /// Its frames, innermost first.
    pub frames: Vec<SymbolFrame>,
}

/// One resolved source frame. Text fields are [`Record::String`] ids; 0
/// means unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SymbolFrame {
    /// Function name (demangled), or `module+0xoffset` without symbols.
    pub function: u64,
    /// Source file.
    pub file: u64,
    /// Line; 0 if unknown.
    pub line: u32,
    /// Module path (the shared object, or `python` for Python frames).
    pub module: u64,
}

/// One reading of NVML, taken by the collector (never by a traced process).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NvmlSample {
    /// `CLOCK_MONOTONIC` of the reading.
    pub time_ns: u64,
    /// The device's UUID as NVML prints it (`GPU-...`, or `MIG-...`).
    pub uuid: String,
    /// The process it is about, or 0 for the whole device.
    pub pid: u32,
    /// Bytes used: by the process (`usedGpuMemory`), or on the whole device.
    pub used_bytes: u64,
    /// For the whole device: free bytes; 0 for a process.
    pub free_bytes: u64,
    /// For the whole device: total bytes; 0 for a process.
    pub total_bytes: u64,
}

/// What the collector could or could not learn from NVML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvmlStatus {
    /// `CLOCK_MONOTONIC` when it was found out.
    pub time_ns: u64,
    /// NVML answered for the whole device.
    pub devices_ok: bool,
    /// NVML's per-process figures name the traced pids.
    pub pids_match: bool,
    /// One line for the report, empty when all is well.
    pub reason: String,
}

/// One record of a trace file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// [`Header`].
    Header(Header),
    /// [`ProcessStart`].
    Process(ProcessStart),
    /// A block of events of one process image, in sequence order.
    Events {
        /// Index from [`ProcessStart::process`].
        process: u32,
        /// The events.
        events: Vec<Event>,
    },
    /// [`ProcessEnd`].
    ProcessEnd(ProcessEnd),
    /// [`Refusal`].
    Refused(Refusal),
    /// [`DamagedSpool`].
    DamagedSpool(DamagedSpool),
    /// [`UnrecordedProcess`].
    Unrecorded(UnrecordedProcess),
    /// An interned string (for stack frames); ids start at 1.
    String {
        /// Its id.
        id: u64,
        /// Its text.
        text: String,
    },
    /// What the stack nodes of one process image resolved to.
    Symbols {
        /// Index from [`ProcessStart::process`].
        process: u32,
        /// Nodes and their frames.
        nodes: Vec<NodeSymbols>,
    },
    /// [`NvmlSample`].
    Nvml(NvmlSample),
    /// [`NvmlStatus`].
    NvmlStatus(NvmlStatus),
    /// A switch of the job's recording (`cudatrace pause`, `resume`).
    RecordingSwitch(Switch),
    /// [`Fold`]: written right after its process's [`ProcessStart`].
    Fold(Fold),
    /// [`StepsState`]: written right after its process's [`Fold`].
    StepsState(StepsState),
    /// [`LowPointsState`]: written right after its process's [`Fold`].
    LowPointsState(LowPointsState),
    /// [`Footer`].
    Footer(Footer),
    /// A record type this reader does not know (written by a newer version); skipped.
    Unknown {
        /// Its tag byte.
        tag: u8,
    },
}

/// Which optional fields an event stores, as bits of its first byte.
pub(crate) const HAS_SEQ_GAP: u8 = 1;
pub(crate) const HAS_TID: u8 = 2;
pub(crate) const HAS_DEVICE: u8 = 4;
pub(crate) const HAS_STREAM: u8 = 8;
pub(crate) const HAS_ARG1: u8 = 16;
pub(crate) const HAS_ARG2: u8 = 32;
pub(crate) const HAS_STACK: u8 = 64;
