//! The trace file `cudatrace` writes for a whole run: every process of a
//! process tree and every memory event they made, in one file.
//!
//! The file is a magic number followed by framed records (see
//! `docs/trace-format.md`). Each frame carries its length and a CRC-32, so a
//! reader can consume a file that is still being written, or was cut short
//! by a crash, and stop cleanly at the first damaged frame, reporting where
//! and why. Events are stored in per-process blocks, delta- and
//! varint-encoded (about 15 bytes an event).

#![warn(missing_docs)]

mod crc32;
mod decode;
mod encode;
mod event_block;
pub mod format;
mod problem;
pub mod reader;
pub mod relabel;
#[cfg(feature = "testing")]
pub mod synthetic;
mod varint;
pub mod writer;

pub use format::{
    DamagedSpool, Fold, FoldedSite, Footer, Header, LowPoint, LowPointSite, LowPointsState, NodeSymbols, NvmlSample,
    NvmlStatus, ProcessEnd, ProcessStart, Record, Refusal, StepDeviceRow, StepRow, StepSeries, StepsState, SymbolFrame,
    UnrecordedProcess, FORMAT_VERSION, MAGIC, OLDEST_READABLE_VERSION,
};
pub use problem::{Malformed, Problem};
pub use reader::{read_record_at, Damage, TraceReader};
pub use writer::TraceWriter;
