//! Walking a spool's slots in sequence order, the same way whoever reads:
//! the collector following a live process, recovery, and `dump`.

use crate::layout::RawRecord;
use crate::slots::{classify, Event, SlotState, SpoolError};

/// Record slots to read, from a file mapping or from bytes in memory.
pub trait SlotSource {
    /// Slots the file holds now (it grows while its writer lives).
    fn slot_count(&mut self) -> Result<u64, SpoolError>;
    /// The record in slot `index`, which is below [`SlotSource::slot_count`].
    fn slot(&mut self, index: u64) -> RawRecord;
}

/// How a read treats slots that are not whole records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// The writer may still be storing: stop at the first slot that is not
    /// a whole record, and read it again later.
    Live,
    /// The writer is gone (or the run is over): step over such slots,
    /// counting them.
    Final,
}

/// A reading position in one spool and what was found so far.
#[derive(Clone, Debug)]
pub struct SpoolCursor {
    pid: u32,
    /// The next slot to read.
    pub next: u64,
    /// Unwritten slots since the last record: gaps if a record follows.
    pending: u64,
    /// Slots below the reserved count that hold no record: dropped (with or
    /// without a tombstone) or cut short.
    pub unwritten: u64,
    /// Slots whose commit word is set but whose record is not whole.
    pub damaged: u64,
}

impl SpoolCursor {
    /// Starts reading `pid`'s spool at slot `first`.
    pub fn new(pid: u32, first: u64) -> SpoolCursor {
        SpoolCursor {
            pid,
            next: first,
            pending: 0,
            unwritten: 0,
            damaged: 0,
        }
    }

    /// Reads whole records into `out`, up to `limit` slots. Returns true once
    /// the end of the slots present was reached.
    pub fn read(
        &mut self,
        source: &mut impl SlotSource,
        pass: Pass,
        limit: usize,
        out: &mut Vec<Event>,
    ) -> Result<bool, SpoolError> {
        let end = source.slot_count()?;
        let stop = end.min(self.next.saturating_add(limit as u64));
        while self.next < stop {
            match classify(&source.slot(self.next), self.next, self.pid) {
                SlotState::Complete(event) => {
                    self.unwritten += std::mem::take(&mut self.pending);
                    out.push(event);
                }
                SlotState::Dropped => {
                    self.unwritten += std::mem::take(&mut self.pending) + 1;
                }
                _ if pass == Pass::Live => return Ok(false),
                SlotState::Unwritten => self.pending += 1,
                SlotState::Incomplete(_) => {
                    self.unwritten += std::mem::take(&mut self.pending);
                    self.damaged += 1;
                }
            }
            self.next += 1;
        }
        Ok(self.next >= end)
    }

    /// Ends a final read: of the trailing unwritten slots, those below the
    /// `reserved` sequence numbers were handed out and never stored, and so
    /// are gaps; slots past it are unused space.
    pub fn finish(&mut self, reserved: u64) {
        let after_last = self.next - std::mem::take(&mut self.pending);
        self.unwritten += reserved.saturating_sub(after_last);
        self.next = self.next.max(reserved);
    }
}
