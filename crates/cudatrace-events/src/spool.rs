//! Reading spool files back into events, outside the traced process.
//!
//! Only [`unfinished`] is the command line's: the whole-file reader
//! ([`SpoolReader`]) is for tests, benches and the fuzzer, behind the
//! `testing` feature (the collector follows spools with
//! [`crate::SpoolCursor`] as they grow).

#[cfg(feature = "testing")]
use crate::cursor::{Pass, SlotSource, SpoolCursor};
#[cfg(feature = "testing")]
use crate::layout::{RawRecord, HEADER_SIZE, RECORD_SIZE};
#[cfg(feature = "testing")]
use crate::slots::{parse_header, Event, ProcessInfo, SpoolError, SpoolHeaderInfo};
#[cfg(feature = "testing")]
use std::path::Path;

#[cfg(feature = "testing")]
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

#[cfg(feature = "testing")]
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

#[cfg(feature = "testing")]
/// Decodes spool files held in memory.
pub struct SpoolReader;

#[cfg(feature = "testing")]
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
        parse_header(bytes)
    }

    /// Decodes a whole spool file held in memory, as after its process has
    /// gone: a trailing partial record is ignored.
    pub fn parse(bytes: &[u8]) -> Result<Spool, SpoolError> {
        let header = Self::parse_header(bytes)?;
        read_all(&mut SlotBytes(&bytes[HEADER_SIZE..]), header)
    }
}

#[cfg(feature = "testing")]
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

#[cfg(feature = "testing")]
/// Record slots held in memory.
struct SlotBytes<'a>(&'a [u8]);

#[cfg(feature = "testing")]
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
    use crate::codes::{Api, Kind, Op};
    use crate::layout::{CHUNK_RECORDS, CMDLINE_OFFSET, SPOOL_MAGIC, SPOOL_VERSION};
    use crate::slots::{classify, Incomplete, SlotState};

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
        bytes[112..116].copy_from_slice(&crate::layout::MAX_RING_CHUNKS.to_le_bytes());
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
            SlotState::Incomplete(Incomplete::CheckMismatch)
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
        assert_eq!(classify(&whole, 6, 1), SlotState::Incomplete(Incomplete::OtherSlot));
        // A zero op with a matching check is still not a record.
        let no_op = RawRecord { op: 0, ..whole }.committed(5);
        assert_eq!(classify(&no_op, 5, 1), SlotState::Incomplete(Incomplete::UnknownCode));
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
        assert!(matches!(
            SpoolReader::parse(&old),
            Err(SpoolError::Version { found: 1 })
        ));
    }
}
