//! What a collection wrote.

use crate::wording::{collector_lines, said};
use cudatrace_trace::UnrecordedProcess;
use std::path::{Path, PathBuf};

/// What a collection wrote.
#[derive(Clone, Debug, Default)]
pub struct CollectionSummary {
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

impl CollectionSummary {
    /// The line `run` and `collect` print when they are done.
    pub fn describe(&self, trace: &Path) -> String {
        collector_lines::wrote_trace(trace, self.processes, self.events, self.folded_events, self.bytes)
    }

    /// Lines about what the trace lacks, naming `spool_dir` when a process
    /// could not store events there.
    pub fn warnings(&self, spool_dir: &Path) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(why) = &self.folds.failure {
            lines.push(collector_lines::could_not_fold(why));
        }
        // Said only when the trace did end up over its cap, or took, with a
        // fold's new file, more than the cap and a tenth.
        let over_cap = self
            .folds
            .cap
            .is_some_and(|cap| self.bytes > cap || self.folds.highest_bytes > cap + cap / 10);
        if let (Some(kept), 0, true) = (self.folds.largest_state, self.folds.failure.iter().count(), over_cap) {
            lines.push(collector_lines::state_larger_than_cap(kept));
        }
        if self.dropped_events > 0 {
            lines.push(collector_lines::events_not_recorded(
                self.dropped_events,
                self.drop_errno,
                spool_dir,
            ));
        }
        if self.lost_events > self.dropped_events {
            lines.push(collector_lines::trace_lacks_events(self.lost_events));
        }
        if self.damaged_spools > 0 {
            lines.push(collector_lines::spools_unreadable(self.damaged_spools));
        }
        if let Some(line) = crate::wording::unrecorded_line(&self.unrecorded) {
            lines.push(said(line));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_too_large_is_said_whenever_the_promised_bound_was_passed() {
        let cap = 64 << 10;
        let summary = |bytes: u64, highest_bytes: u64| CollectionSummary {
            bytes,
            folds: Folds {
                cap: Some(cap),
                largest_state: Some(30 << 10),
                highest_bytes,
                ..Default::default()
            },
            ..Default::default()
        };
        let said = collector_lines::state_larger_than_cap(30 << 10);
        let spools = Path::new("/spools");
        // Over the cap at the end, or over the cap and a tenth on the way.
        assert_eq!(summary(cap + 1, cap).warnings(spools), std::slice::from_ref(&said));
        assert_eq!(summary(cap, cap + cap / 10 + 1).warnings(spools), [said]);
        // Within both: nothing to say.
        assert!(summary(cap, cap + cap / 10).warnings(spools).is_empty());
    }
}
