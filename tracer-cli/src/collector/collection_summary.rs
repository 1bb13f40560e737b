//! What a collection wrote.

use cudatrace_trace::UnrecordedProcess;
use std::path::PathBuf;

/// What a collection wrote.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Process images in the trace.
    pub processes: u64,
    /// Events in the trace.
    pub events: u64,
    /// Events recorded but folded away to keep the trace under its cap.
    pub folded_events: u64,
    /// What folding did.
    pub folds: Folds,
    /// Events that happened but are not in the trace (gaps in sequence numbers).
    pub lost_events: u64,
    /// Of those, events the processes could not store.
    pub dropped_events: u64,
    /// Why the first of those could not be stored.
    pub drop_errno: Option<i32>,
    /// Spools refused.
    pub refused: u64,
    /// Spools that could not be read at all.
    pub damaged_spools: u64,
    /// Processes that could not record.
    pub unrecorded: Vec<UnrecordedProcess>,
    /// Processes still running when the trace was finished.
    pub still_running: u64,
    /// Spools read to their end, undamaged, of processes that are gone:
    /// every record they hold is in the trace.
    pub collected: Vec<PathBuf>,
    /// Bytes of the trace file.
    pub bytes: u64,
}

/// What folding did during a collection.
#[derive(Clone, Debug, Default)]
pub struct Folds {
    /// Folds done.
    pub done: u64,
    /// Why the last fold that could not be done failed.
    pub failure: Option<String>,
    /// What the last fold that could not get under its target kept, in
    /// bytes: the state that must stay exact was larger than the cap allows.
    pub state_too_large: Option<u64>,
    /// The largest state that must stay exact that a fold found too large
    /// for the cap, in bytes: while it lasted, the trace and a fold's new
    /// file could take more than the cap plus a tenth.
    pub largest_state: Option<u64>,
    /// The most bytes the trace and a fold's new file beside it took
    /// together.
    pub highest_bytes: u64,
    /// The cap folding kept the trace under; `None`: unlimited.
    pub cap: Option<u64>,
    /// Size at which the next fold is due.
    pub(super) next_at: u64,
}
