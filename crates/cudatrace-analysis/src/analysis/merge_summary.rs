//! What merging several traces into one found, per input and in all: the
//! figures `cudatrace merge` writes and then says.

use cudatrace_trace::Damage;

/// What merging found, per input and in all.
#[derive(Debug, Default)]
pub struct MergeSummary {
    /// Per input, in order: nanoseconds its times moved by.
    pub shifts_ns: Vec<i64>,
    /// Per input: process images.
    pub processes: Vec<u64>,
    /// Per input: damage met while reading it (each skipped frame, or where it stopped).
    pub damage: Vec<Vec<Damage>>,
    /// Per input: records left out because they belong to no process the
    /// input started (its process record was damaged), or name texts whose
    /// ids do not fit past the inputs' before.
    pub left_out: Vec<u64>,
    /// Per input: whether it ended with its footer.
    pub complete: Vec<bool>,
    /// Per input: times that fell off the merged clock's ends and were
    /// clamped there (none, as the clock is chosen; said if ever).
    pub clamped: Vec<u64>,
    /// Whether the merged trace got its footer: every input whole, with
    /// nothing damaged or left out.
    pub footer_written: bool,
}
