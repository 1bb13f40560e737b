//! What a spool holds, as the reader sees it: the process it belongs to,
//! its header, each record slot's state and the events decoded from them.
//! Shared by the spool reader, the cursor that follows a spool and the
//! mapped spool file.

use crate::codes::{Api, Kind, Op};
use crate::layout::{
    commit_matches, committed_seq, ChildFailure, ProcessIdentity, RawRecord, SpoolHeader, CHILD_FAILURE_SLOTS,
    CHUNK_RECORDS, CMDLINE_CAPACITY, CMDLINE_OFFSET, EXEC_INTO_CAPACITY, EXEC_INTO_OFFSET, HEADER_SIZE,
    HOST_NAME_CAPACITY, IDENTITY_OFFSET, PROCESS_START_TICKS_OFFSET, RECORD_SIZE, SPOOL_MAGIC, SPOOL_VERSION,
};

/// The process a spool file belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id when tracing started in this process.
    pub ppid: u32,
    /// The command line, one string per argument.
    pub argv: Vec<String>,
    /// `CLOCK_MONOTONIC` when the spool was created.
    pub start_monotonic_ns: u64,
    /// `CLOCK_REALTIME` at the same instant.
    pub start_realtime_ns: u64,
    /// (status, `CLOCK_MONOTONIC` time) if the process ended by calling `exit`.
    pub exit: Option<(i32, u64)>,
    /// The image was calling `exec` when last seen, or a later image of its
    /// process said it replaced it: with no exit recorded, it was replaced,
    /// and did not exit.
    pub exec_started: bool,
    /// What it `exec`'d (a path), where known.
    pub exec_into: Option<String>,
    /// When its process started, in clock ticks after boot; 0 if unknown.
    pub process_start_ticks: u64,
    /// Its host, and its rank where its environment named one.
    pub place: ProcessPlace,
}

/// Where a process ran and its place in a distributed job: its host's
/// name, and the `RANK`, `LOCAL_RANK` and `WORLD_SIZE` of its environment,
/// where set (never guessed from its arguments).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessPlace {
    /// Host name; empty when unknown (then the trace's host).
    pub host: String,
    /// `RANK`.
    pub rank: Option<u32>,
    /// `LOCAL_RANK`.
    pub local_rank: Option<u32>,
    /// `WORLD_SIZE`.
    pub world_size: Option<u32>,
}

impl ProcessPlace {
    /// Decodes a header's [`ProcessIdentity`] (its words read atomically by
    /// the caller).
    pub fn from_identity(identity: &ProcessIdentity) -> Self {
        let end = identity
            .host
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(identity.host.len());
        let number = |stored: u32| stored.checked_sub(1);
        ProcessPlace {
            host: String::from_utf8_lossy(&identity.host[..end]).into_owned(),
            rank: number(identity.rank),
            local_rank: number(identity.local_rank),
            world_size: number(identity.world_size),
        }
    }
}

/// One decoded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Process id of the process that made the call.
    pub pid: u32,
    /// Kernel thread id of the caller.
    pub tid: u32,
    /// Per-process sequence number: the order in which memory changed.
    pub seq: u64,
    /// `CLOCK_MONOTONIC` in nanoseconds.
    pub time_ns: u64,
    /// Device ordinal, `None` for host memory or when unknown.
    pub device: Option<u8>,
    /// Stream of stream-ordered calls, else 0.
    pub stream: u64,
    /// Entry point the program called.
    pub api: Api,
    /// What happened.
    pub op: Op,
    /// What sort of memory.
    pub kind: Kind,
    /// Address or handle.
    pub address: u64,
    /// Bytes concerned.
    pub size: u64,
    /// Op-specific payload (see [`RawRecord::arg1`]).
    pub arg1: u64,
    /// Op-specific payload (see [`RawRecord::arg2`]).
    pub arg2: u64,
    /// Innermost node of the call stack (see [`crate::stacks`]); 0 = none recorded.
    pub stack: u32,
}

/// Why a slot whose commit word is set does not hold a whole record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incomplete {
    /// Its sequence number belongs to another slot.
    OtherSlot,
    /// Its check does not match its contents.
    CheckMismatch,
    /// It holds a code no writer stores.
    UnknownCode,
}

/// What one record slot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Nothing yet: the commit word is zero.
    Unwritten,
    /// A tombstone: the record of this sequence number was dropped, for
    /// lack of space when it happened. Settled, but no event.
    Dropped,
    /// The commit word is set but the record is not whole: it names another
    /// slot, fails its check, or holds codes no writer stores. While the
    /// writer lives this means "not yet"; once it is gone, damage.
    Incomplete(Incomplete),
    /// A whole record.
    Complete(Event),
}

/// Decides what the slot of sequence number `index` holds, for process `pid`.
pub fn classify(raw: &RawRecord, index: u64, pid: u32) -> SlotState {
    if raw.commit == 0 {
        return SlotState::Unwritten;
    }
    if committed_seq(raw.commit) != index & ((1 << crate::layout::SEQ_BITS) - 1) {
        return SlotState::Incomplete(Incomplete::OtherSlot);
    }
    if !commit_matches(raw.commit, index, &raw.body_words()) {
        return SlotState::Incomplete(Incomplete::CheckMismatch);
    }
    if raw.op == crate::layout::DROPPED_OP {
        return SlotState::Dropped;
    }
    let (Some(op), Some(api), Some(kind)) = (
        Op::from_code(raw.op),
        Api::from_code(raw.api),
        Kind::from_code(raw.kind),
    ) else {
        return SlotState::Incomplete(Incomplete::UnknownCode);
    };
    SlotState::Complete(Event {
        pid,
        tid: raw.tid,
        seq: index,
        time_ns: raw.time_ns,
        device: u8::try_from(raw.device).ok(),
        stream: raw.stream,
        api,
        op,
        kind,
        address: raw.address,
        size: raw.size,
        arg1: raw.arg1,
        arg2: raw.arg2,
        stack: raw.stack,
    })
}

/// Why a spool file could not be read.
#[derive(Debug)]
pub enum SpoolError {
    /// The file could not be read at all.
    Io(std::io::Error),
    /// Not a regular file (a device, a pipe, a folder).
    NotAFile,
    /// The file is shorter than its header.
    Truncated {
        /// Bytes in the file.
        len: u64,
    },
    /// The header is all zeros: its writer has not finished it (or died first).
    Unfinished,
    /// The file does not start with [`SPOOL_MAGIC`].
    NotASpool,
    /// The file was written by an incompatible tracer.
    Version {
        /// The version the file declares.
        found: u32,
    },
    /// The header declares a layout of this version that this build does
    /// not write (a record, header or chunk of another size): crafted or
    /// damaged.
    Layout {
        /// Which size: `"record size"`, `"header size"` or `"records per chunk"`.
        field: &'static str,
        /// What the header says.
        found: u32,
        /// What this build writes.
        expected: u32,
    },
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// What a spool header says; the counters are read at the moment of reading.
#[derive(Clone, Debug)]
pub struct SpoolHeaderInfo {
    /// Who wrote the spool.
    pub process: ProcessInfo,
    /// Frees of memory the tracer had not seen allocated.
    pub unknown_frees: u64,
    /// Allocations the live table had no room for.
    pub registry_overflows: u64,
    /// Records the writer could not store.
    pub dropped_records: u64,
    /// The `errno` that made the first record be dropped, if any was.
    pub drop_errno: Option<i32>,
    /// Records already collected into a trace and released from the file:
    /// reading starts after them.
    pub released_records: u64,
    /// Chunk places in the file ([`crate::layout::chunk_offset`]).
    pub ring_chunks: u32,
    /// Chunks whose place the collector has emptied for reuse.
    pub punched_chunks: u32,
    /// Sequence numbers handed out so far.
    pub reserved_seqs: u64,
    /// Forked children that said in this header that they could not
    /// record: published slots only, by slot index.
    pub child_failures: Vec<(usize, ChildFailure)>,
    /// Forked children that could not record and found no free slot.
    pub child_failures_lost: u32,
}

/// Decodes a spool's header page (the first [`HEADER_SIZE`] bytes).
pub fn parse_header(bytes: &[u8]) -> Result<SpoolHeaderInfo, SpoolError> {
    use std::mem::offset_of;
    if bytes.len() < HEADER_SIZE {
        return Err(SpoolError::Truncated {
            len: bytes.len() as u64,
        });
    }
    if bytes[0..8] != SPOOL_MAGIC {
        let unfinished = bytes[0..8] == [0; 8];
        return Err(if unfinished {
            SpoolError::Unfinished
        } else {
            SpoolError::NotASpool
        });
    }
    let u32_at = |offset| le_u32(bytes, offset);
    let u64_at = |offset| le_u64(bytes, offset);
    let version = u32_at(offset_of!(SpoolHeader, version));
    if version != SPOOL_VERSION {
        return Err(SpoolError::Version { found: version });
    }
    for (field, offset, expected) in [
        ("record size", offset_of!(SpoolHeader, record_size), RECORD_SIZE),
        ("header size", offset_of!(SpoolHeader, header_size), HEADER_SIZE),
        (
            "records per chunk",
            offset_of!(SpoolHeader, chunk_records),
            CHUNK_RECORDS,
        ),
    ] {
        let found = u32_at(offset);
        if found as usize != expected {
            return Err(SpoolError::Layout {
                field,
                found,
                expected: expected as u32,
            });
        }
    }
    let cmdline_len = (u32_at(offset_of!(SpoolHeader, cmdline_len)) as usize).min(CMDLINE_CAPACITY);
    let cmdline = &bytes[CMDLINE_OFFSET..CMDLINE_OFFSET + cmdline_len];
    // Arguments end with a NUL each: an empty argument is two NULs in a row,
    // and only the last NUL ends nothing. A long run of NULs at the end is
    // the zeros after the command line (a header whose length was
    // damaged), not hundreds of empty arguments.
    let trailing = cmdline.iter().rev().take_while(|&&b| b == 0).count();
    let cmdline = if trailing > MOST_TRAILING_EMPTY_ARGUMENTS {
        &cmdline[..cmdline.len() - trailing]
    } else {
        cmdline.strip_suffix(&[0]).unwrap_or(cmdline)
    };
    let argv = if cmdline_len == 0 {
        Vec::new()
    } else {
        cmdline
            .split(|&b| b == 0)
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect()
    };
    let drop_errno = u32_at(offset_of!(SpoolHeader, drop_errno)) as i32;
    let exit_recorded = u32_at(offset_of!(SpoolHeader, exit_recorded)) == 1;
    Ok(SpoolHeaderInfo {
        process: ProcessInfo {
            pid: u32_at(offset_of!(SpoolHeader, pid)),
            ppid: u32_at(offset_of!(SpoolHeader, ppid)),
            argv,
            start_monotonic_ns: u64_at(offset_of!(SpoolHeader, start_monotonic_ns)),
            start_realtime_ns: u64_at(offset_of!(SpoolHeader, start_realtime_ns)),
            exit: exit_recorded.then(|| {
                (
                    u32_at(offset_of!(SpoolHeader, exit_status)) as i32,
                    u64_at(offset_of!(SpoolHeader, exit_time_ns)),
                )
            }),
            exec_started: u32_at(offset_of!(SpoolHeader, exec_started)) == 1,
            exec_into: {
                let len = (u32_at(offset_of!(SpoolHeader, exec_into_len)) as usize).min(EXEC_INTO_CAPACITY);
                (len > 0)
                    .then(|| String::from_utf8_lossy(&bytes[EXEC_INTO_OFFSET..EXEC_INTO_OFFSET + len]).into_owned())
            },
            process_start_ticks: u64_at(PROCESS_START_TICKS_OFFSET),
            place: ProcessPlace::from_identity(&identity(bytes)),
        },
        unknown_frees: u64_at(offset_of!(SpoolHeader, unknown_frees)),
        registry_overflows: u64_at(offset_of!(SpoolHeader, registry_overflows)),
        dropped_records: u64_at(offset_of!(SpoolHeader, dropped_records)),
        drop_errno: (drop_errno != 0).then_some(drop_errno),
        released_records: u64::from(u32_at(offset_of!(SpoolHeader, released_chunks))) * CHUNK_RECORDS as u64,
        ring_chunks: u32_at(offset_of!(SpoolHeader, ring_chunks)).max(1),
        punched_chunks: u32_at(offset_of!(SpoolHeader, punched_chunks)),
        reserved_seqs: u64_at(offset_of!(SpoolHeader, reserved_seqs)),
        child_failures: child_failures(bytes),
        child_failures_lost: u32_at(offset_of!(SpoolHeader, child_failures_lost)),
    })
}

/// The header's [`ProcessIdentity`], copied out.
fn identity(bytes: &[u8]) -> ProcessIdentity {
    use std::mem::offset_of;
    let word = |field: usize| le_u32(bytes, IDENTITY_OFFSET + field);
    let mut host = [0u8; HOST_NAME_CAPACITY];
    let at = IDENTITY_OFFSET + offset_of!(ProcessIdentity, host);
    host.copy_from_slice(&bytes[at..at + HOST_NAME_CAPACITY]);
    ProcessIdentity {
        rank: word(offset_of!(ProcessIdentity, rank)),
        local_rank: word(offset_of!(ProcessIdentity, local_rank)),
        world_size: word(offset_of!(ProcessIdentity, world_size)),
        spare: 0,
        host,
    }
}

/// Empty arguments at the end of a command line taken as arguments; a
/// longer run of NULs is padding.
const MOST_TRAILING_EMPTY_ARGUMENTS: usize = 16;

/// The published slots of a header's [`SpoolHeader::child_failures`].
fn child_failures(bytes: &[u8]) -> Vec<(usize, ChildFailure)> {
    use std::mem::{offset_of, size_of};
    (0..CHILD_FAILURE_SLOTS)
        .filter_map(|index| {
            let at = offset_of!(SpoolHeader, child_failures) + index * size_of::<ChildFailure>();
            let u32_at = |field: usize| le_u32(bytes, at + field);
            if u32_at(offset_of!(ChildFailure, published)) != 1 {
                return None;
            }
            let name_at = at + offset_of!(ChildFailure, name);
            let mut name = [0u8; 16];
            name.copy_from_slice(&bytes[name_at..name_at + 16]);
            Some((
                index,
                ChildFailure {
                    pid: u32_at(offset_of!(ChildFailure, pid)),
                    uid: u32_at(offset_of!(ChildFailure, uid)),
                    errno: u32_at(offset_of!(ChildFailure, errno)) as i32,
                    reason: u32_at(offset_of!(ChildFailure, reason)),
                    time_ns: le_u64(bytes, at + offset_of!(ChildFailure, time_ns)),
                    name,
                    ppid: u32_at(offset_of!(ChildFailure, ppid)),
                    published: 1,
                },
            ))
        })
        .collect()
}
