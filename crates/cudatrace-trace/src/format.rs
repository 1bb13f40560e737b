//! Record types and their payload encoding.

use crate::varint::{put, put_signed, put_string, Cursor};
use cudatrace_events::{Api, Event, Kind, Op};

/// First eight bytes of a trace file.
pub const MAGIC: [u8; 8] = *b"CUTRACE\0";
/// Version of the record encodings; readers refuse other versions.
pub const FORMAT_VERSION: u32 = 7;
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
    /// [`Footer`].
    Footer(Footer),
    /// A record type this reader does not know (written by a newer version); skipped.
    Unknown {
        /// Its tag byte.
        tag: u8,
    },
}

fn put_strings(out: &mut Vec<u8>, list: &[String]) {
    put(out, list.len() as u64);
    list.iter().for_each(|s| put_string(out, s));
}

fn get_strings(cursor: &mut Cursor) -> Result<Vec<String>, &'static str> {
    let count = cursor.get()?;
    if count > cursor.remaining() as u64 {
        return Err("more strings than bytes");
    }
    (0..count).map(|_| cursor.string()).collect()
}

const HAS_SEQ_GAP: u8 = 1;
const HAS_TID: u8 = 2;
const HAS_DEVICE: u8 = 4;
const HAS_STREAM: u8 = 8;
const HAS_ARG1: u8 = 16;
const HAS_ARG2: u8 = 32;
const HAS_STACK: u8 = 64;

/// Encodes a record's payload; returns its tag.
pub(crate) fn encode(record: &Record, out: &mut Vec<u8>) -> u8 {
    match record {
        Record::Header(h) => {
            put(out, u64::from(h.format_version));
            put_string(out, &h.tracer_version);
            put_string(out, &h.host);
            put(out, h.start_realtime_ns);
            put(out, h.start_monotonic_ns);
            put_strings(out, &h.command);
            TAG_HEADER
        }
        Record::Process(p) => {
            for v in [p.process, p.pid, p.ppid, p.image] {
                put(out, u64::from(v));
            }
            put(out, p.start_monotonic_ns);
            put(out, p.start_realtime_ns);
            put_strings(out, &p.argv);
            TAG_PROCESS
        }
        Record::Events { process, events } => {
            encode_events(*process, events, out);
            TAG_EVENTS
        }
        Record::ProcessEnd(e) => {
            encode_process_end(e, out);
            TAG_PROCESS_END
        }
        Record::Refused(r) => {
            put_string(out, &r.path);
            put(out, u64::from(r.uid));
            put_string(out, &r.reason);
            TAG_REFUSED
        }
        Record::DamagedSpool(d) => {
            put(out, u64::from(d.pid));
            put(out, u64::from(d.image));
            put_string(out, &d.path);
            put_string(out, &d.reason);
            TAG_DAMAGED_SPOOL
        }
        Record::Unrecorded(u) => {
            for v in [u.pid, u.ppid, u.uid] {
                put(out, u64::from(v));
            }
            put(out, u.time_ns);
            put_signed(out, i64::from(u.errno));
            put_string(out, &u.name);
            put_string(out, &u.reason);
            TAG_UNRECORDED
        }
        Record::String { id, text } => {
            put(out, *id);
            put_string(out, text);
            TAG_STRING
        }
        Record::Symbols { process, nodes } => {
            encode_symbols(*process, nodes, out);
            TAG_SYMBOLS
        }
        Record::Footer(f) => {
            for v in [
                f.processes,
                f.events,
                f.dropped_events,
                f.refused_spools,
                f.end_realtime_ns,
                f.lost_events,
                f.damaged_spools,
            ] {
                put(out, v);
            }
            TAG_FOOTER
        }
        Record::Nvml(n) => {
            put(out, n.time_ns);
            put_string(out, &n.uuid);
            put(out, u64::from(n.pid));
            put(out, n.used_bytes);
            put(out, n.free_bytes);
            put(out, n.total_bytes);
            TAG_NVML
        }
        Record::NvmlStatus(n) => {
            put(out, n.time_ns);
            put(out, u64::from(n.devices_ok) | u64::from(n.pids_match) << 1);
            put_string(out, &n.reason);
            TAG_NVML_STATUS
        }
        Record::Unknown { tag } => *tag,
    }
}

fn encode_process_end(e: &ProcessEnd, out: &mut Vec<u8>) {
    put(out, u64::from(e.process));
    put_signed(out, e.exit_status.map_or(i64::MIN, i64::from));
    put(out, e.exit_time_ns.map_or(0, |t| t.saturating_add(1)));
    put(out, u64::from(e.still_running));
    for v in [
        e.unfinished_records,
        e.unknown_frees,
        e.registry_overflows,
        e.dropped_records,
    ] {
        put(out, v);
    }
    put_signed(out, e.drop_errno.map_or(0, i64::from));
    put(out, e.reserved_events);
    put(out, e.damaged_records);
}

fn encode_symbols(process: u32, nodes: &[NodeSymbols], out: &mut Vec<u8>) {
    put(out, u64::from(process));
    put(out, nodes.len() as u64);
    for node in nodes {
        put(out, u64::from(node.node));
        put(out, node.frames.len() as u64);
        for frame in &node.frames {
            put(out, frame.function);
            put(out, frame.file);
            put(out, u64::from(frame.line));
            put(out, frame.module);
        }
    }
}

fn encode_events(process: u32, events: &[Event], out: &mut Vec<u8>) {
    put(out, u64::from(process));
    put(out, events.len() as u64);
    let Some(first) = events.first() else { return };
    put(out, first.seq);
    put(out, first.time_ns);
    let (mut seq, mut time, mut tid, mut address) = (first.seq.wrapping_sub(1), first.time_ns, 0u32, 0u64);
    for e in events {
        let seq_delta = e.seq.wrapping_sub(seq);
        let mut flags = 0u8;
        flags |= if seq_delta != 1 { HAS_SEQ_GAP } else { 0 };
        flags |= if e.tid != tid { HAS_TID } else { 0 };
        flags |= if e.device.is_some() { HAS_DEVICE } else { 0 };
        flags |= if e.stream != 0 { HAS_STREAM } else { 0 };
        flags |= if e.arg1 != 0 { HAS_ARG1 } else { 0 };
        flags |= if e.arg2 != 0 { HAS_ARG2 } else { 0 };
        flags |= if e.stack != 0 { HAS_STACK } else { 0 };
        out.push(flags);
        out.push(e.op as u8);
        out.push(e.kind as u8);
        out.push(e.api as u8);
        if flags & HAS_SEQ_GAP != 0 {
            put(out, seq_delta);
        }
        put_signed(out, e.time_ns.wrapping_sub(time) as i64);
        if flags & HAS_TID != 0 {
            put(out, u64::from(e.tid));
        }
        if let Some(device) = e.device {
            out.push(device);
        }
        put_signed(out, e.address.wrapping_sub(address) as i64);
        put(out, e.size);
        for (flag, value) in [
            (HAS_STREAM, e.stream),
            (HAS_ARG1, e.arg1),
            (HAS_ARG2, e.arg2),
            (HAS_STACK, u64::from(e.stack)),
        ] {
            if flags & flag != 0 {
                put(out, value);
            }
        }
        (seq, time, tid, address) = (e.seq, e.time_ns, e.tid, e.address);
    }
}

fn decode_events(cursor: &mut Cursor, pid_of: &dyn Fn(u32) -> Option<u32>, packed: bool) -> Result<Record, String> {
    let process = cursor.get_u32()?;
    let pid = pid_of(process).ok_or_else(|| format!("events of process {process}, which has no process record"))?;
    let count = cursor.get()?;
    // An event takes at least five bytes: flags, op, api, time, address, size.
    if count > (cursor.remaining() / 5) as u64 {
        return Err("more events than the block has bytes for".into());
    }
    let mut events = Vec::with_capacity(count as usize);
    if count == 0 {
        return Ok(Record::Events { process, events });
    }
    let base_seq = cursor.get()?;
    let base_time = cursor.get()?;
    let (mut seq, mut time, mut tid, mut address) = (base_seq.wrapping_sub(1), base_time, 0u32, 0u64);
    for _ in 0..count {
        let flags = cursor.byte()?;
        let (op, kind) = if packed {
            let op_kind = cursor.byte()?;
            (op_kind & 15, op_kind >> 4)
        } else {
            (cursor.byte()?, cursor.byte()?)
        };
        let op = Op::from_code(op).ok_or("unknown op code")?;
        let kind = Kind::from_code(kind).ok_or("unknown kind code")?;
        let api = Api::from_code(cursor.byte()?).ok_or("unknown api code")?;
        seq = seq.wrapping_add(if flags & HAS_SEQ_GAP != 0 { cursor.get()? } else { 1 });
        time = time.wrapping_add(cursor.get_signed()? as u64);
        if flags & HAS_TID != 0 {
            tid = cursor.get_u32()?;
        }
        let device = if flags & HAS_DEVICE != 0 {
            Some(cursor.byte()?)
        } else {
            None
        };
        address = address.wrapping_add(cursor.get_signed()? as u64);
        let size = cursor.get()?;
        let mut optional = |flag: u8| -> Result<u64, &'static str> {
            if flags & flag != 0 {
                cursor.get()
            } else {
                Ok(0)
            }
        };
        let (stream, arg1, arg2) = (optional(HAS_STREAM)?, optional(HAS_ARG1)?, optional(HAS_ARG2)?);
        let stack = u32::try_from(optional(HAS_STACK)?).map_err(|_| "stack id out of range")?;
        events.push(Event {
            pid,
            tid,
            seq,
            time_ns: time,
            device,
            stream,
            api,
            op,
            kind,
            address,
            size,
            arg1,
            arg2,
            stack,
        });
    }
    Ok(Record::Events { process, events })
}

fn decode_process_end(c: &mut Cursor) -> Result<Record, String> {
    let process = c.get_u32()?;
    let status = c.get_signed()?;
    let exit_status = if status == i64::MIN {
        None
    } else {
        Some(i32::try_from(status).map_err(|_| "exit status out of range")?)
    };
    let exit_time_ns = c.get()?.checked_sub(1);
    Ok(Record::ProcessEnd(ProcessEnd {
        process,
        exit_status,
        exit_time_ns,
        still_running: c.get()? != 0,
        unfinished_records: c.get()?,
        unknown_frees: c.get()?,
        registry_overflows: c.get()?,
        dropped_records: c.get()?,
        drop_errno: match c.get_signed()? {
            0 => None,
            errno => Some(i32::try_from(errno).map_err(|_| "errno out of range")?),
        },
        reserved_events: c.get()?,
        damaged_records: c.get()?,
    }))
}

fn decode_symbols(c: &mut Cursor) -> Result<Record, String> {
    let process = c.get_u32()?;
    let count = c.get()?;
    if count > c.remaining() as u64 {
        return Err("more nodes than bytes".into());
    }
    let mut nodes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let node = c.get_u32()?;
        let frame_count = c.get()?;
        if frame_count > c.remaining() as u64 {
            return Err("more frames than bytes".into());
        }
        let frames = (0..frame_count)
            .map(|_| {
                Ok(SymbolFrame {
                    function: c.get()?,
                    file: c.get()?,
                    line: c.get_u32()?,
                    module: c.get()?,
                })
            })
            .collect::<Result<_, &'static str>>()?;
        nodes.push(NodeSymbols { node, frames });
    }
    Ok(Record::Symbols { process, nodes })
}

/// Decodes a payload. `pid_of` maps process indexes seen so far to pids.
pub(crate) fn decode(tag: u8, payload: &[u8], pid_of: &dyn Fn(u32) -> Option<u32>) -> Result<Record, String> {
    let mut c = Cursor::new(payload);
    let record = match tag {
        TAG_HEADER => Record::Header(Header {
            format_version: c.get_u32()?,
            tracer_version: c.string()?,
            host: c.string()?,
            start_realtime_ns: c.get()?,
            start_monotonic_ns: c.get()?,
            command: get_strings(&mut c)?,
        }),
        TAG_PROCESS => Record::Process(ProcessStart {
            process: c.get_u32()?,
            pid: c.get_u32()?,
            ppid: c.get_u32()?,
            image: c.get_u32()?,
            start_monotonic_ns: c.get()?,
            start_realtime_ns: c.get()?,
            argv: get_strings(&mut c)?,
        }),
        TAG_EVENTS => decode_events(&mut c, pid_of, false)?,
        TAG_EVENTS_PACKED => decode_events(&mut c, pid_of, true)?,
        TAG_PROCESS_END => decode_process_end(&mut c)?,
        TAG_REFUSED => Record::Refused(Refusal {
            path: c.string()?,
            uid: c.get_u32()?,
            reason: c.string()?,
        }),
        TAG_DAMAGED_SPOOL => Record::DamagedSpool(DamagedSpool {
            pid: c.get_u32()?,
            image: c.get_u32()?,
            path: c.string()?,
            reason: c.string()?,
        }),
        TAG_UNRECORDED => Record::Unrecorded(UnrecordedProcess {
            pid: c.get_u32()?,
            ppid: c.get_u32()?,
            uid: c.get_u32()?,
            time_ns: c.get()?,
            errno: i32::try_from(c.get_signed()?).map_err(|_| "errno out of range")?,
            name: c.string()?,
            reason: c.string()?,
        }),
        TAG_STRING => Record::String {
            id: c.get()?,
            text: c.string()?,
        },
        TAG_SYMBOLS => decode_symbols(&mut c)?,
        TAG_FOOTER => Record::Footer(Footer {
            processes: c.get()?,
            events: c.get()?,
            dropped_events: c.get()?,
            refused_spools: c.get()?,
            end_realtime_ns: c.get()?,
            lost_events: c.get()?,
            damaged_spools: c.get()?,
        }),
        TAG_NVML => Record::Nvml(NvmlSample {
            time_ns: c.get()?,
            uuid: c.string()?,
            pid: c.get_u32()?,
            used_bytes: c.get()?,
            free_bytes: c.get()?,
            total_bytes: c.get()?,
        }),
        TAG_NVML_STATUS => {
            let time_ns = c.get()?;
            let flags = c.get()?;
            Record::NvmlStatus(NvmlStatus {
                time_ns,
                devices_ok: flags & 1 != 0,
                pids_match: flags & 2 != 0,
                reason: c.string()?,
            })
        }
        other => return Ok(Record::Unknown { tag: other }),
    };
    if !c.is_empty() {
        return Err("trailing bytes after the record".into());
    }
    Ok(record)
}
