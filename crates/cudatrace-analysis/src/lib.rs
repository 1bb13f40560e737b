//! Reading a cudatrace trace, for every view of it: the trace model, the
//! one replay engine every output is a [`Consumer`] of, and what is worked
//! out from the replay (the summary, step finding, growth within a run and
//! between runs, retention, the memory limit's verdicts), with the
//! symbolization of a run's stacks once it is collected.
//!
//! A trace is read in two steps. [`TraceIndex`] reads it once and keeps
//! what is small (processes, their ends, strings, stack symbols and nodes,
//! damage) and where each block of events lies. [`Replay`] then reads the
//! blocks again in event order and hands every event, with the memory
//! [`Change`] it made, to a [`Consumer`]. So all views of a trace agree,
//! and memory stays proportional to the live set and the number of
//! distinct stacks, never to the number of events.
//!
//! The crate is built in layers, each using only those below it
//! (`tests/layers.rs` at the workspace root checks it):
//!
//! | layer | job |
//! | --- | --- |
//! | `analysis` | the trace model, the replay and every figure worked out from it |
//! | `symbolize` | native symbols and Python line tables, for the stack nodes of a run |
//! | `system` | a pass's progress bar, and refusing an input that is not a regular file |
//!
//! It returns data (figures, enums, names that identify a place); the
//! words that say them are the command line's.
//!
//! With the `testing` feature, `test_events` makes events for the tests
//! of the crates built on this one.

#![warn(missing_docs)]

mod analysis;
mod symbolize;
mod system;

pub use analysis::*;
pub use symbolize::{StackCatalog, PYTHON_MODULE};
pub use system::cores::{each_on_a_thread, helpers as helper_threads};
pub use system::progress::Progress;
