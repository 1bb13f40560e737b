//! Appending records to a trace file.

use crate::crc32;
use crate::encode::{encode, encode_events};
use crate::format::{
    DamagedSpool, Footer, Header, ProcessEnd, ProcessStart, Record, Refusal, EVENTS_PER_BLOCK, MAGIC, TAG_EVENTS,
};
use cudatrace_events::Event;
use std::collections::HashMap;
use std::io::{self, Write};

/// Writes a trace: the magic and header first, then records as they come.
/// Every record is a whole frame, so a reader never sees half a record
/// unless the writer died in the middle of `write`.
///
/// It also counts the events lost: the gaps in each process's sequence
/// numbers, and those it handed out after the last one written.
pub struct TraceWriter<W: Write> {
    out: W,
    scratch: Vec<u8>,
    bytes_written: u64,
    events_written: u64,
    next_seq: HashMap<u32, u64>,
    lost_events: u64,
    folded_events: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace with its header.
    pub fn new(out: W, header: &Header) -> io::Result<Self> {
        let mut writer = TraceWriter {
            out,
            scratch: Vec::with_capacity(1 << 16),
            bytes_written: 0,
            events_written: 0,
            next_seq: HashMap::new(),
            lost_events: 0,
            folded_events: 0,
        };
        writer.out.write_all(&MAGIC)?;
        writer.bytes_written += MAGIC.len() as u64;
        writer.record(&Record::Header(header.clone()))?;
        Ok(writer)
    }

    /// Writes any record as one frame. A [`Record::Fold`] (written before
    /// its process's events) makes the sequence numbers below its
    /// `folded_to` folded rather than lost, and carries its lost ones over.
    pub fn record(&mut self, record: &Record) -> io::Result<()> {
        if let Record::Fold(fold) = record {
            let next = self.next_seq.entry(fold.process).or_insert(0);
            *next = (*next).max(fold.folded_to);
            self.lost_events += fold.lost_below;
            self.folded_events += fold.folded_events;
        }
        self.scratch.clear();
        let tag = encode(record, &mut self.scratch);
        self.write_frame(tag)
    }

    /// Writes the frame of the record encoded in `scratch`, tagged `tag`.
    fn write_frame(&mut self, tag: u8) -> io::Result<()> {
        let length = u32::try_from(self.scratch.len()).map_err(|_| io::Error::other("record too large"))?;
        let mut head = [0u8; 5];
        head[0] = tag;
        head[1..].copy_from_slice(&length.to_le_bytes());
        let crc = crc32::update(crc32::update(0, &head), &self.scratch);
        self.out.write_all(&head)?;
        self.out.write_all(&self.scratch)?;
        self.out.write_all(&crc.to_le_bytes())?;
        self.bytes_written += self.scratch.len() as u64 + 9;
        Ok(())
    }

    /// Records that a process image appeared.
    pub fn process_start(&mut self, process: &ProcessStart) -> io::Result<()> {
        self.record(&Record::Process(process.clone()))
    }

    /// Writes events of one process image, in sequence order, in blocks.
    pub fn events(&mut self, process: u32, events: &[Event]) -> io::Result<()> {
        let next = self.next_seq.entry(process).or_insert(0);
        for event in events {
            self.lost_events += event.seq.saturating_sub(*next);
            *next = (*next).max(event.seq + 1);
        }
        for block in events.chunks(EVENTS_PER_BLOCK) {
            // Encoded from the slice: no copy of the events into a record.
            self.scratch.clear();
            encode_events(process, block, &mut self.scratch);
            self.write_frame(TAG_EVENTS)?;
            self.events_written += block.iter().filter(|e| e.op.is_memory_event()).count() as u64;
        }
        Ok(())
    }

    /// Records how a process image ended.
    pub fn process_end(&mut self, end: &ProcessEnd) -> io::Result<()> {
        let next = self.next_seq.get(&end.process).copied().unwrap_or(0);
        self.lost_events += end.reserved_events.saturating_sub(next);
        self.record(&Record::ProcessEnd(end.clone()))
    }

    /// Records a refused spool.
    pub fn refused(&mut self, refusal: &Refusal) -> io::Result<()> {
        self.record(&Record::Refused(refusal.clone()))
    }

    /// Records a spool that could not be read.
    pub fn damaged_spool(&mut self, damage: &DamagedSpool) -> io::Result<()> {
        self.record(&Record::DamagedSpool(damage.clone()))
    }

    /// Events lost so far: gaps in the sequence numbers written, and those
    /// handed out after the last one written of each ended process.
    pub fn lost_events(&self) -> u64 {
        self.lost_events
    }

    /// Memory events folded away before this trace's detail (see
    /// [`Record::Fold`]): recorded, but only summarised here.
    pub fn folded_events(&self) -> u64 {
        self.folded_events
    }

    /// The bytes `record` takes as a frame, without writing it.
    pub fn frame_len(&mut self, record: &Record) -> u64 {
        self.scratch.clear();
        encode(record, &mut self.scratch);
        self.scratch.len() as u64 + 9
    }

    /// Finishes the trace.
    pub fn footer(&mut self, footer: &Footer) -> io::Result<()> {
        self.record(&Record::Footer(footer.clone()))?;
        self.out.flush()
    }

    /// Pushes buffered records to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Events written so far.
    pub fn events_written(&self) -> u64 {
        self.events_written
    }

    /// The underlying writer, to sync it.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}
