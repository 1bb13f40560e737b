//! When to fold: the one rule both writers of a trace follow, the live
//! collector's writer thread and `collect` by hand, so that either keeps
//! the trace under its cap (`run --max-size`, `collect --max-size`).
//!
//! The trace folds before a write would take it past its fold size, never
//! after: events are written in pieces small beside the cap, each measured
//! before it is written once the fold size is near. So when a fold starts
//! the trace is at most its fold size, and with the fold's new file (at
//! most its target, else the state that must stay exact is too large,
//! which is said) the two take at most the cap plus a tenth.

use super::collection_summary::Folds;
use super::fold;
use cudatrace_events::Event;
use cudatrace_trace::{Record, TraceWriter};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

/// The smallest cap a trace may have: a fold needs room for the state it
/// keeps.
pub const SMALLEST_CAP: u64 = 64 << 10;

/// Room kept for the footer, the last record of a trace.
const FOOTER_BYTES: u64 = 128;

/// The most bytes one event takes in a block (its flags, op, kind and api,
/// then up to ten varints), and a block's own frame and head: bounds that
/// tell when a piece of events may reach the fold size and must be
/// measured.
const MOST_BYTES_PER_EVENT: u64 = 96;
const BLOCK_HEAD_BYTES: u64 = 64;

/// About the bytes an event takes in a block, to size the pieces.
const USUAL_BYTES_PER_EVENT: u64 = 16;

/// A piece of events takes about this share of the cap: small enough that
/// a fold's cut falls near where it aims, even under the smallest cap.
const PIECE_SHARE: u64 = 40;

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

    /// The size at which the trace folds next.
    fn fold_size(&self, cap: u64) -> u64 {
        self.folds.next_at.max(cap / 10 * fold::FOLD_AT_PARTS)
    }

    /// Folds the trace `trace` writes at `path` if it has reached its fold
    /// size, or, at the end, when the last `reserve` bytes (the symbols and
    /// the footer) would take it past its cap. A fold that fails leaves
    /// `trace` as it was, to be written on.
    pub fn fold_if_due(&mut self, trace: &mut TraceWriter<BufWriter<File>>, path: &Path, reserve: u64) {
        self.fold_before(trace, path, 0, reserve);
    }

    /// Folds the trace first if writing `next` more bytes would take it to
    /// its fold size, as [`FoldSchedule::fold_if_due`] does.
    fn fold_before(&mut self, trace: &mut TraceWriter<BufWriter<File>>, path: &Path, next: u64, reserve: u64) {
        let Some(cap) = self.folds.cap else { return };
        let written = trace.bytes_written();
        let at = self.fold_size(cap);
        let past_cap_at_end = reserve > 0 && written + reserve > cap && self.folds.state_too_large.is_none();
        if written + next < at && !past_cap_at_end {
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
                // The old file and the new one were both on the disk.
                self.folds.highest_bytes = self.folds.highest_bytes.max(written + kept);
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
                    let largest = self.folds.largest_state.unwrap_or(0).max(folded.state_bytes);
                    self.folds.largest_state = Some(largest);
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

    /// Before `record` is written: folds if it would take the trace to its
    /// fold size.
    pub fn make_room_for(&mut self, trace: &mut TraceWriter<BufWriter<File>>, path: &Path, record: &Record) {
        if self.folds.cap.is_some() {
            let bytes = trace.frame_len(record);
            self.fold_before(trace, path, bytes, 0);
        }
    }

    /// Writes `events` of `process`, in pieces, folding the trace before
    /// any piece that would take it to its fold size.
    pub fn write_events(
        &mut self,
        trace: &mut TraceWriter<BufWriter<File>>,
        path: &Path,
        process: u32,
        events: &[Event],
    ) -> std::io::Result<()> {
        let Some(cap) = self.folds.cap else {
            return trace.events(process, events);
        };
        let piece_events = (cap / PIECE_SHARE / USUAL_BYTES_PER_EVENT).clamp(16, 4096) as usize;
        for piece in events.chunks(piece_events) {
            // Measured (encoded once more) only where it may reach the
            // fold size: far from it, the bound says it cannot.
            let bound = piece.len() as u64 * MOST_BYTES_PER_EVENT + BLOCK_HEAD_BYTES;
            if trace.bytes_written() + bound >= self.fold_size(cap) {
                let block = Record::Events {
                    process,
                    events: piece.to_vec(),
                };
                let bytes = trace.frame_len(&block);
                self.fold_before(trace, path, bytes, 0);
            }
            trace.events(process, piece)?;
        }
        Ok(())
    }

    /// Before the trace's last records (`last`, then the footer) are
    /// written: folds if they would take it past its cap.
    pub fn fold_before_the_end(&mut self, trace: &mut TraceWriter<BufWriter<File>>, path: &Path, last: &[Record]) {
        let reserve = FOOTER_BYTES + last.iter().map(|r| trace.frame_len(r)).sum::<u64>();
        self.fold_if_due(trace, path, reserve);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudatrace_analysis::test_events::driver_event;
    use cudatrace_events::{Kind, Op};
    use cudatrace_trace::{Header, ProcessStart};

    /// 200,000 events of 8 KiB allocated and freed, written as the spools'
    /// batches of 16,384 under `cap`: the schedule's folds.
    fn pairs_under(cap: u64) -> (Folds, u64) {
        let dir = std::env::temp_dir().join(format!("cudatrace-schedule-{cap}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.trace");
        let header = Header {
            format_version: cudatrace_trace::FORMAT_VERSION,
            tracer_version: "test".into(),
            host: "box".into(),
            start_realtime_ns: 0,
            start_monotonic_ns: 0,
            command: vec!["pairs".into()],
        };
        let mut trace = TraceWriter::new(BufWriter::new(File::create(&path).unwrap()), &header).unwrap();
        let mut schedule = FoldSchedule::new(Some(cap));
        let start = Record::Process(ProcessStart {
            process: 0,
            pid: 1,
            ppid: 0,
            image: 0,
            start_monotonic_ns: 0,
            start_realtime_ns: 0,
            argv: vec!["pairs".into()],
            place: Default::default(),
        });
        schedule.make_room_for(&mut trace, &path, &start);
        trace.record(&start).unwrap();
        let events: Vec<Event> = (0..200_000u64)
            .map(|seq| {
                let op = if seq % 2 == 0 { Op::Alloc } else { Op::Free };
                driver_event(seq, 1000 + seq * 10, op, Kind::Device, 0x7000_0000, 8192, 3)
            })
            .collect();
        for batch in events.chunks(16384) {
            schedule.write_events(&mut trace, &path, 0, batch).unwrap();
        }
        schedule.fold_before_the_end(&mut trace, &path, &[]);
        let bytes = trace.bytes_written();
        let _ = std::fs::remove_dir_all(&dir);
        (schedule.folds, bytes)
    }

    #[test]
    fn a_trace_and_its_folds_new_file_never_take_more_than_the_cap_and_a_tenth() {
        for cap in [SMALLEST_CAP, 96 << 10, 256 << 10, 1 << 20] {
            let (folds, bytes) = pairs_under(cap);
            assert!(folds.done >= 2, "{cap}: {} folds", folds.done);
            assert_eq!((folds.failure, folds.largest_state), (None, None), "{cap}");
            assert!(
                folds.highest_bytes <= cap + cap / 10,
                "{cap}: {} at once",
                folds.highest_bytes
            );
            assert!(bytes <= cap, "{cap}: {bytes} at the end");
        }
    }
}
