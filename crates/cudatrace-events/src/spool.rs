//! Reading spool files back into events, outside the traced process.

use crate::codes::{Api, Kind, Op};
use crate::layout::{RawRecord, CHUNK_RECORDS, CMDLINE_CAPACITY, HEADER_SIZE, RECORD_SIZE, SPOOL_MAGIC, SPOOL_VERSION};
use std::path::Path;

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
}

/// Everything a spool file holds.
#[derive(Clone, Debug)]
pub struct Spool {
    /// Who wrote it.
    pub process: ProcessInfo,
    /// Completed events in sequence order, without void slots.
    pub events: Vec<Event>,
    /// Slots that were reserved but never completed (the process died inside a hook).
    pub unfinished_records: u64,
    /// Frees of memory the tracer had not seen allocated.
    pub unknown_frees: u64,
    /// Allocations the live table had no room for.
    pub registry_overflows: u64,
    /// Records the writer could not store.
    pub dropped_records: u64,
    /// Records already collected into a trace and released from the file.
    pub released_records: u64,
}

/// Why a spool file could not be read.
#[derive(Debug)]
pub enum SpoolError {
    /// The file could not be read at all.
    Io(std::io::Error),
    /// The file is shorter than its header.
    Truncated { len: usize },
    /// The file does not start with [`SPOOL_MAGIC`].
    NotASpool,
    /// The file was written by an incompatible tracer.
    Version { found: u32 },
    /// A completed record holds a code this reader does not know.
    BadRecord { offset: usize, reason: String },
}

impl std::fmt::Display for SpoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpoolError::Io(e) => write!(f, "cannot read spool: {e}"),
            SpoolError::Truncated { len } => {
                write!(f, "spool is {len} bytes, shorter than its {HEADER_SIZE}-byte header")
            }
            SpoolError::NotASpool => f.write_str("not a cudatrace spool file (bad magic)"),
            SpoolError::Version { found } => write!(
                f,
                "spool format version {found} is not supported (this build reads {SPOOL_VERSION})"
            ),
            SpoolError::BadRecord { offset, reason } => {
                write!(f, "corrupt record at byte {offset}: {reason}")
            }
        }
    }
}

impl std::error::Error for SpoolError {}

/// Decodes spool files.
pub struct SpoolReader;

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
    /// Records already collected into a trace and released from the file:
    /// reading starts after them.
    pub released_records: u64,
}

impl SpoolReader {
    /// Reads and decodes the spool file at `path`.
    pub fn read_path(path: &Path) -> Result<Spool, SpoolError> {
        let bytes = std::fs::read(path).map_err(SpoolError::Io)?;
        Self::parse(&bytes)
    }

    /// Decodes a spool's header page (the first [`HEADER_SIZE`] bytes).
    pub fn parse_header(bytes: &[u8]) -> Result<SpoolHeaderInfo, SpoolError> {
        if bytes.len() < HEADER_SIZE {
            return Err(SpoolError::Truncated { len: bytes.len() });
        }
        if bytes[0..8] != SPOOL_MAGIC {
            return Err(SpoolError::NotASpool);
        }
        let version = le_u32(bytes, 8);
        if version != SPOOL_VERSION
            || le_u32(bytes, 12) as usize != RECORD_SIZE
            || le_u32(bytes, 16) as usize != HEADER_SIZE
        {
            return Err(SpoolError::Version { found: version });
        }
        let cmdline_len = (le_u32(bytes, 88) as usize).min(CMDLINE_CAPACITY);
        let argv = bytes[96..96 + cmdline_len]
            .split(|&b| b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        Ok(SpoolHeaderInfo {
            process: ProcessInfo {
                pid: le_u32(bytes, 24),
                ppid: le_u32(bytes, 28),
                argv,
                start_monotonic_ns: le_u64(bytes, 32),
                start_realtime_ns: le_u64(bytes, 40),
                exit: (le_u32(bytes, 84) == 1).then(|| (le_u32(bytes, 80) as i32, le_u64(bytes, 72))),
            },
            unknown_frees: le_u64(bytes, 48),
            registry_overflows: le_u64(bytes, 56),
            dropped_records: le_u64(bytes, 64),
            released_records: u64::from(le_u32(bytes, 92)) * CHUNK_RECORDS as u64,
        })
    }

    /// Decodes the completed record in slot `index` of `pid`'s spool, stored
    /// at byte `offset`. `Ok(None)` for a void record.
    pub fn decode_record(raw: &RawRecord, index: u64, pid: u32, offset: usize) -> Result<Option<Event>, SpoolError> {
        let bad = |reason: String| SpoolError::BadRecord { offset, reason };
        let op = Op::from_code(raw.op).ok_or_else(|| bad(format!("unknown op code {}", raw.op)))?;
        if op == Op::Void {
            return Ok(None);
        }
        let api = Api::from_code(raw.api).ok_or_else(|| bad(format!("unknown api code {}", raw.api)))?;
        let kind = Kind::from_code(raw.kind).ok_or_else(|| bad(format!("unknown kind code {}", raw.kind)))?;
        if raw.seq_plus_one.wrapping_sub(1) != index {
            return Err(bad(format!(
                "sequence number {} stored in slot {index}",
                raw.seq_plus_one.wrapping_sub(1)
            )));
        }
        Ok(Some(Event {
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
        }))
    }

    /// Decodes a spool file's bytes. A trailing partial record is ignored.
    pub fn parse(bytes: &[u8]) -> Result<Spool, SpoolError> {
        let header = Self::parse_header(bytes)?;
        let pid = header.process.pid;
        let mut events = Vec::new();
        let mut empty_slots_since_last_record = 0u64;
        let mut unfinished_records = 0u64;
        let released = usize::try_from(header.released_records).unwrap_or(usize::MAX);
        let records = bytes[HEADER_SIZE..]
            .chunks_exact(RECORD_SIZE)
            .enumerate()
            .skip(released);
        for (index, chunk) in records {
            let raw = RawRecord::from_bytes(chunk.try_into().expect("chunks_exact gives whole records"));
            if raw.seq_plus_one == 0 {
                empty_slots_since_last_record += 1;
                continue;
            }
            // Empty slots followed by a completed one were reserved but never
            // finished; empty slots at the end are just unused space.
            unfinished_records += empty_slots_since_last_record;
            empty_slots_since_last_record = 0;
            let offset = HEADER_SIZE + index * RECORD_SIZE;
            if let Some(event) = Self::decode_record(&raw, index as u64, pid, offset)? {
                events.push(event);
            }
        }
        Ok(Spool {
            process: header.process,
            events,
            unfinished_records,
            unknown_frees: header.unknown_frees,
            registry_overflows: header.registry_overflows,
            dropped_records: header.dropped_records,
            released_records: header.released_records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: u32, argv: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0u8; HEADER_SIZE];
        bytes[0..8].copy_from_slice(&SPOOL_MAGIC);
        bytes[8..12].copy_from_slice(&SPOOL_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&(RECORD_SIZE as u32).to_le_bytes());
        bytes[16..20].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        bytes[24..28].copy_from_slice(&pid.to_le_bytes());
        bytes[28..32].copy_from_slice(&1u32.to_le_bytes());
        bytes[48..56].copy_from_slice(&3u64.to_le_bytes());
        bytes[72..80].copy_from_slice(&555u64.to_le_bytes());
        bytes[80..84].copy_from_slice(&3i32.to_le_bytes());
        bytes[84..88].copy_from_slice(&1u32.to_le_bytes());
        bytes[88..92].copy_from_slice(&(argv.len() as u32).to_le_bytes());
        bytes[96..96 + argv.len()].copy_from_slice(argv);
        bytes
    }

    fn record(seq: u64, op: Op, address: u64) -> [u8; RECORD_SIZE] {
        RawRecord {
            seq_plus_one: seq + 1,
            time_ns: 1000 + seq,
            address,
            size: 256,
            tid: 9,
            op: op as u8,
            kind: Kind::Device as u8,
            api: Api::CuMemAllocV2 as u8,
            device: 0,
            ..Default::default()
        }
        .to_bytes()
    }

    #[test]
    fn decodes_header_and_completed_records_and_counts_unfinished_slots() {
        let mut bytes = header(77, b"python\0train.py\0");
        bytes.extend_from_slice(&record(0, Op::Alloc, 0x1000));
        bytes.extend_from_slice(&[0u8; RECORD_SIZE]); // reserved, never finished
        bytes.extend_from_slice(&record(2, Op::Void, 0));
        bytes.extend_from_slice(&record(3, Op::Free, 0x1000));
        bytes.extend_from_slice(&[0u8; RECORD_SIZE * 4]); // unused tail
        bytes.extend_from_slice(&[1u8; 10]); // partial record at the end
        let spool = SpoolReader::parse(&bytes).unwrap();
        assert_eq!(spool.process.pid, 77);
        assert_eq!(spool.process.ppid, 1);
        assert_eq!(spool.process.exit, Some((3, 555)));
        assert_eq!(spool.process.argv, vec!["python".to_string(), "train.py".to_string()]);
        assert_eq!(spool.unknown_frees, 3);
        assert_eq!(spool.unfinished_records, 1);
        let seqs: Vec<u64> = spool.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![0, 3]);
        assert_eq!(spool.events[1].op, Op::Free);
        assert_eq!(spool.events[1].address, 0x1000);
        assert_eq!(spool.events[1].device, Some(0));
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        assert!(matches!(
            SpoolReader::parse(&[0u8; 100]),
            Err(SpoolError::Truncated { len: 100 })
        ));
        assert!(matches!(
            SpoolReader::parse(&[0u8; HEADER_SIZE]),
            Err(SpoolError::NotASpool)
        ));
        let mut bytes = header(1, b"");
        let mut bad = record(0, Op::Alloc, 1);
        bad[62] = 200;
        bytes.extend_from_slice(&bad);
        let err = SpoolReader::parse(&bytes).unwrap_err();
        assert_eq!(err.to_string(), "corrupt record at byte 4096: unknown api code 200");
    }
}
