//! When to fold: the one rule both writers of a trace follow, the live
//! collector's writer thread and `collect` by hand, so that either keeps
//! the trace under its cap (`run --max-size`, `collect --max-size`).

use super::collection_summary::Folds;
use super::fold;
use cudatrace_trace::{Record, TraceWriter};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

/// The smallest cap a trace may have: a fold needs room for the state it
/// keeps.
pub const SMALLEST_CAP: u64 = 64 << 10;

/// Room kept for the footer, the last record of a trace.
const FOOTER_BYTES: u64 = 128;

/// A trace's cap and what folding has done to it so far.
#[derive(Default)]
pub struct FoldSchedule {
    /// The cap (`folds.cap`), folds done, and why the last one that failed
    /// failed.
    pub folds: Folds,
}

impl FoldSchedule {
    /// A schedule for a trace capped at `cap` bytes (`None`: never folded).
    pub fn new(cap: Option<u64>) -> FoldSchedule {
        FoldSchedule {
            folds: Folds {
                cap,
                ..Folds::default()
            },
        }
    }

    /// Folds the trace `trace` writes at `path` if it has reached its fold
    /// size, or, at the end, when the last `reserve` bytes (the symbols and
    /// the footer) would take it past its cap. A fold that fails leaves
    /// `trace` as it was, to be written on.
    pub fn fold_if_due(&mut self, trace: &mut TraceWriter<BufWriter<File>>, path: &Path, reserve: u64) {
        let Some(cap) = self.folds.cap else { return };
        let written = trace.bytes_written();
        let at = self.folds.next_at.max(cap / 10 * fold::FOLD_AT_PARTS);
        let past_cap_at_end = reserve > 0 && written + reserve > cap && self.folds.state_too_large.is_none();
        if written < at && !past_cap_at_end {
            return;
        }
        let target = (cap / 10 * fold::REWRITE_PARTS).min(cap.saturating_sub(reserve));
        let detail = (cap / 10 * fold::DETAIL_PARTS).min(target / 3 * 2);
        match fold::fold(trace, path, target, detail) {
            Ok(folded) => {
                *trace = folded.trace;
                self.folds.done += 1;
                self.folds.failure = None;
                let kept = trace.bytes_written();
                if kept <= target {
                    self.folds.state_too_large = None;
                    self.folds.next_at = kept + cap / 10;
                } else {
                    // What must stay exact (the memory live now, at the peaks
                    // and at the OOMs) takes more than the cap allows: said
                    // at the end, and folded again only once the trace has
                    // doubled, so that folding never costs more than the
                    // writing.
                    self.folds.state_too_large = Some(folded.state_bytes);
                    self.folds.next_at = kept.saturating_mul(2);
                }
            }
            Err(reason) => {
                // Tried again once a tenth of the cap more has come.
                self.folds.failure = Some(reason);
                self.folds.next_at = written + cap / 10;
            }
        }
    }

    /// Before the trace's last records (`last`, then the footer) are
    /// written: folds if they would take it past its cap.
    pub fn fold_before_the_end(&mut self, trace: &mut TraceWriter<BufWriter<File>>, path: &Path, last: &[Record]) {
        let reserve = FOOTER_BYTES + last.iter().map(|r| trace.frame_len(r)).sum::<u64>();
        self.fold_if_due(trace, path, reserve);
    }
}
