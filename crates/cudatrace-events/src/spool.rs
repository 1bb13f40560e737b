//! Reading spool files back into events, outside the traced process: the
//! header, and what each record slot holds.

use crate::codes::{Api, Kind, Op};
use crate::cursor::{Pass, SlotSource, SpoolCursor};
use crate::layout::{
    commit_matches, committed_seq, RawRecord, SpoolHeader, CHUNK_RECORDS, CMDLINE_CAPACITY, CMDLINE_OFFSET,
    HEADER_SIZE, RECORD_SIZE, SPOOL_MAGIC, SPOOL_VERSION,
};
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
    /// Innermost node of the call stack (see [`crate::stacks`]); 0 = none recorded.
    pub stack: u32,
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
    Incomplete(&'static str),
    /// A whole record.
    Complete(Event),
}

/// Decides what the slot of sequence number `index` holds, for process `pid`.
pub fn classify(raw: &RawRecord, index: u64, pid: u32) -> SlotState {
    if raw.commit == 0 {
        return SlotState::Unwritten;
    }
    if committed_seq(raw.commit) != index & ((1 << crate::layout::SEQ_BITS) - 1) {
        return SlotState::Incomplete("its sequence number belongs to another slot");
    }
    if !commit_matches(raw.commit, index, &raw.body_words()) {
        return SlotState::Incomplete("its check does not match its contents");
    }
    if raw.op == crate::layout::DROPPED_OP {
        return SlotState::Dropped;
    }
    let (Some(op), Some(api), Some(kind)) = (
        Op::from_code(raw.op),
        Api::from_code(raw.api),
        Kind::from_code(raw.kind),
    ) else {
        return SlotState::Incomplete("it holds an unknown code");
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

/// Everything a spool file holds, read once its process is gone.
#[derive(Clone, Debug)]
pub struct Spool {
    /// What its header says.
    pub header: SpoolHeaderInfo,
    /// Whole records in sequence order, failed calls included.
    pub events: Vec<Event>,
    /// Sequence numbers handed out whose slot was never written: dropped
    /// records, and calls cut short by the process's death.
    pub unwritten_records: u64,
    /// Slots whose record is not whole.
    pub damaged_records: u64,
}

impl Spool {
    /// The process that wrote it.
    pub fn process(&self) -> &ProcessInfo {
        &self.header.process
    }

    /// Calls cut short by the process's death: unwritten slots that were not dropped.
    pub fn unfinished_records(&self) -> u64 {
        unfinished(self.unwritten_records, self.header.dropped_records)
    }
}

/// Of `unwritten` slots (gaps), those not `dropped` for lack of space: calls
/// cut short by the process's death, or still in flight.
pub fn unfinished(unwritten: u64, dropped: u64) -> u64 {
    unwritten.saturating_sub(dropped)
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
}

impl std::fmt::Display for SpoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpoolError::Io(e) => write!(f, "cannot read spool: {e}"),
            SpoolError::NotAFile => f.write_str("not a regular file"),
            SpoolError::Truncated { len: 0 } => {
                f.write_str("spool is empty: its process could not reserve space for it (disk full?)")
            }
            SpoolError::Truncated { len } => {
                write!(f, "spool is {len} bytes, shorter than its {HEADER_SIZE}-byte header")
            }
            SpoolError::Unfinished => f.write_str("its header was never completed (its process died creating it?)"),
            SpoolError::NotASpool => f.write_str("not a cudatrace spool file (bad magic)"),
            SpoolError::Version { found } => write!(
                f,
                "spool format version {found} is not supported (this build reads {SPOOL_VERSION})"
            ),
        }
    }
}

impl std::error::Error for SpoolError {}

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
    /// Sequence numbers handed out so far.
    pub reserved_seqs: u64,
}

/// Decodes spool files held in memory.
pub struct SpoolReader;

impl SpoolReader {
    /// Reads and decodes the spool file at `path`, through a mapping of it,
    /// checking its header before reading anything else.
    pub fn read_path(path: &Path) -> Result<Spool, SpoolError> {
        let mut file = crate::spool_file::SpoolFile::open(path, false)?;
        let header = file.header();
        read_all(&mut file, header)
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
        if version != SPOOL_VERSION
            || u32_at(offset_of!(SpoolHeader, record_size)) as usize != RECORD_SIZE
            || u32_at(offset_of!(SpoolHeader, header_size)) as usize != HEADER_SIZE
            || u32_at(offset_of!(SpoolHeader, chunk_records)) as usize != CHUNK_RECORDS
        {
            return Err(SpoolError::Version { found: version });
        }
        let cmdline_len = (u32_at(offset_of!(SpoolHeader, cmdline_len)) as usize).min(CMDLINE_CAPACITY);
        let argv = bytes[CMDLINE_OFFSET..CMDLINE_OFFSET + cmdline_len]
            .split(|&b| b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
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
            },
            unknown_frees: u64_at(offset_of!(SpoolHeader, unknown_frees)),
            registry_overflows: u64_at(offset_of!(SpoolHeader, registry_overflows)),
            dropped_records: u64_at(offset_of!(SpoolHeader, dropped_records)),
            drop_errno: (drop_errno != 0).then_some(drop_errno),
            released_records: u64::from(u32_at(offset_of!(SpoolHeader, released_chunks))) * CHUNK_RECORDS as u64,
            reserved_seqs: u64_at(offset_of!(SpoolHeader, reserved_seqs)),
        })
    }

    /// Decodes a whole spool file held in memory, as after its process has
    /// gone: a trailing partial record is ignored.
    pub fn parse(bytes: &[u8]) -> Result<Spool, SpoolError> {
        let header = Self::parse_header(bytes)?;
        read_all(&mut SlotBytes(&bytes[HEADER_SIZE..]), header)
    }
}

fn read_all(source: &mut impl SlotSource, header: SpoolHeaderInfo) -> Result<Spool, SpoolError> {
    let mut cursor = SpoolCursor::new(header.process.pid, header.released_records);
    let mut events = Vec::new();
    while !cursor.read(source, Pass::Final, usize::MAX, &mut events)? {}
    cursor.finish(header.reserved_seqs);
    Ok(Spool {
        events,
        unwritten_records: cursor.unwritten,
        damaged_records: cursor.damaged,
        header,
    })
}

/// Record slots held in memory.
struct SlotBytes<'a>(&'a [u8]);

impl SlotSource for SlotBytes<'_> {
    fn slot_count(&mut self) -> Result<u64, SpoolError> {
        Ok((self.0.len() / RECORD_SIZE) as u64)
    }

    fn slot(&mut self, index: u64) -> RawRecord {
        let at = index as usize * RECORD_SIZE;
        let bytes: &[u8; RECORD_SIZE] = self.0[at..at + RECORD_SIZE].try_into().expect("whole record");
        RawRecord::from_bytes(bytes)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn header(pid: u32, argv: &[u8], reserved: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; HEADER_SIZE];
        bytes[0..8].copy_from_slice(&SPOOL_MAGIC);
        bytes[8..12].copy_from_slice(&SPOOL_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&(RECORD_SIZE as u32).to_le_bytes());
        bytes[16..20].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        bytes[20..24].copy_from_slice(&(CHUNK_RECORDS as u32).to_le_bytes());
        bytes[24..28].copy_from_slice(&pid.to_le_bytes());
        bytes[28..32].copy_from_slice(&1u32.to_le_bytes());
        bytes[48..56].copy_from_slice(&3u64.to_le_bytes());
        bytes[64..72].copy_from_slice(&1u64.to_le_bytes());
        bytes[72..80].copy_from_slice(&555u64.to_le_bytes());
        bytes[80..84].copy_from_slice(&3i32.to_le_bytes());
        bytes[84..88].copy_from_slice(&1u32.to_le_bytes());
        bytes[88..92].copy_from_slice(&(argv.len() as u32).to_le_bytes());
        bytes[96..104].copy_from_slice(&reserved.to_le_bytes());
        bytes[104..108].copy_from_slice(&28i32.to_le_bytes());
        bytes[CMDLINE_OFFSET..CMDLINE_OFFSET + argv.len()].copy_from_slice(argv);
        bytes
    }

    pub(crate) fn record(seq: u64, op: Op, address: u64) -> RawRecord {
        RawRecord {
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
        .committed(seq)
    }

    #[test]
    fn decodes_header_and_whole_records_and_counts_every_gap() {
        let mut bytes = header(77, b"python\0train.py\0", 7);
        bytes.extend_from_slice(&record(0, Op::Alloc, 0x1000).to_bytes());
        bytes.extend_from_slice(&[0u8; RECORD_SIZE]); // reserved, never written
        bytes.extend_from_slice(&record(2, Op::Failed, 0).to_bytes());
        bytes.extend_from_slice(&record(3, Op::Free, 0x1000).to_bytes());
        let mut torn = record(4, Op::Alloc, 0x2000);
        torn.size = 0; // a word the writer had not stored yet
        bytes.extend_from_slice(&torn.to_bytes());
        bytes.extend_from_slice(&[0u8; RECORD_SIZE * 4]); // slots 5 and 6 reserved, then unused space
        bytes.extend_from_slice(&[1u8; 10]); // partial record at the end
        let spool = SpoolReader::parse(&bytes).unwrap();
        assert_eq!(spool.process().pid, 77);
        assert_eq!(spool.process().ppid, 1);
        assert_eq!(spool.process().exit, Some((3, 555)));
        assert_eq!(spool.process().argv, vec!["python".to_string(), "train.py".to_string()]);
        assert_eq!(spool.header.unknown_frees, 3);
        assert_eq!(spool.header.drop_errno, Some(28));
        assert_eq!(spool.header.reserved_seqs, 7);
        // Slot 1, and slots 5 and 6 below the 7 reserved, were never written.
        assert_eq!(spool.unwritten_records, 3);
        assert_eq!(spool.damaged_records, 1);
        assert_eq!(spool.unfinished_records(), 2);
        let seqs: Vec<(u64, Op)> = spool.events.iter().map(|e| (e.seq, e.op)).collect();
        assert_eq!(seqs, vec![(0, Op::Alloc), (2, Op::Failed), (3, Op::Free)]);
        assert_eq!(spool.events[2].address, 0x1000);
        assert_eq!(spool.events[2].device, Some(0));
    }

    #[test]
    fn a_set_commit_word_with_a_zero_or_torn_body_is_not_a_record() {
        // Every word non-zero, so that each one missing is a real tear.
        let whole = RawRecord {
            stream: 0x1234,
            arg1: 7,
            arg2: 8,
            stack: 0,
            spare: 0,
            ..record(5, Op::Alloc, 0x7000)
        }
        .committed(5);
        assert!(matches!(classify(&whole, 5, 1), SlotState::Complete(_)));
        // The commit word stored, nothing else: what a copy made out of order sees.
        let zero_body = RawRecord {
            commit: whole.commit,
            ..Default::default()
        };
        assert_eq!(
            classify(&zero_body, 5, 1),
            SlotState::Incomplete("its check does not match its contents")
        );
        // Each word of the body missing in turn.
        let words = whole.to_bytes();
        for word in 1..8 {
            let mut torn = words;
            torn[word * 8..word * 8 + 8].fill(0);
            let state = classify(&RawRecord::from_bytes(&torn), 5, 1);
            assert!(matches!(state, SlotState::Incomplete(_)), "word {word}: {state:?}");
        }
        // Half of the commit word itself.
        let mut half = words;
        half[4..8].fill(0);
        assert!(matches!(
            classify(&RawRecord::from_bytes(&half), 5, 1),
            SlotState::Incomplete(_)
        ));
        // A whole record in the wrong slot.
        assert_eq!(
            classify(&whole, 6, 1),
            SlotState::Incomplete("its sequence number belongs to another slot")
        );
        // A zero op with a matching check is still not a record.
        let no_op = RawRecord { op: 0, ..whole }.committed(5);
        assert_eq!(
            classify(&no_op, 5, 1),
            SlotState::Incomplete("it holds an unknown code")
        );
        assert_eq!(classify(&RawRecord::default(), 5, 1), SlotState::Unwritten);
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        assert!(matches!(
            SpoolReader::parse(&[0u8; 100]),
            Err(SpoolError::Truncated { len: 100 })
        ));
        assert!(matches!(
            SpoolReader::parse(&[0u8; HEADER_SIZE]),
            Err(SpoolError::Unfinished)
        ));
        assert!(matches!(
            SpoolReader::parse(&[7u8; HEADER_SIZE]),
            Err(SpoolError::NotASpool)
        ));
        let mut old = header(1, b"", 0);
        old[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(
            SpoolReader::parse(&old).unwrap_err().to_string(),
            "spool format version 1 is not supported (this build reads 3)"
        );
    }
}
