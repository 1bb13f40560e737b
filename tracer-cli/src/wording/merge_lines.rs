//! What `cudatrace merge` says: each input's place on the merged clock, and
//! what any input lacked.

use super::numbers::{count, duration};
use super::trace_damage::damage_text;
use cudatrace_analysis::{MergeSummary, ProcessImage};
use std::path::{Path, PathBuf};

/// The same file given as an input and as the output.
pub fn output_is_an_input(path: &Path) -> String {
    format!(
        "{} is one of the traces to merge: write the merged trace elsewhere",
        path.display()
    )
}

/// One trace given twice.
pub fn given_twice(first: &Path, again: &Path) -> String {
    if first == again {
        format!("{} is given twice: each run is merged once", first.display())
    } else {
        format!(
            "{} and {} are the same file: each run is merged once",
            first.display(),
            again.display()
        )
    }
}

/// Two inputs that hold one run: the same header, or a process image both
/// hold (`process`).
pub fn same_run(first: &Path, again: &Path, process: Option<&ProcessImage>) -> String {
    match process {
        None => format!(
            "{} and {} are the same run (one host, one start): each run is merged once",
            first.display(),
            again.display()
        ),
        Some(process) => format!(
            "{} holds a run that {} holds too (pid {} on {}): each run is merged once",
            again.display(),
            first.display(),
            process.pid,
            process.host
        ),
    }
}

/// An input without a header record.
pub fn no_header(path: &Path) -> String {
    format!("{}: no header record: not a whole cudatrace trace", path.display())
}

/// One line per input: its processes and how far its clock moved; then
/// what each input lacked, and what that makes of the merged trace.
pub fn summary_lines(paths: &[PathBuf], summary: &MergeSummary) -> Vec<String> {
    let mut lines = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let shift = summary.shifts_ns[i];
        // Under a microsecond is the two clock readings' own spread.
        let clock = if shift.unsigned_abs() < 1000 {
            "on the merged clock as it is".to_string()
        } else {
            let direction = if shift > 0 { "later" } else { "earlier" };
            format!(
                "its times moved {} {direction} onto the merged clock",
                duration(shift.unsigned_abs())
            )
        };
        lines.push(format!(
            "cudatrace: {}: {}, {clock}",
            path.display(),
            count(summary.processes[i], "process image", "process images")
        ));
        for damage in &summary.damage[i] {
            let what = if damage.skipped {
                "a damaged record skipped"
            } else {
                "reading stopped"
            };
            lines.push(format!("cudatrace: {}: {what} {}", path.display(), damage_text(damage)));
        }
        if summary.left_out[i] > 0 {
            lines.push(format!(
                "cudatrace: {}: {} left out: their process's start record was damaged, or their texts' ids do not fit",
                path.display(),
                count(summary.left_out[i], "record", "records")
            ));
        }
        if summary.clamped[i] > 0 {
            lines.push(format!(
                "cudatrace: {}: {} fell off the merged clock and stand at its end instead",
                path.display(),
                count(summary.clamped[i], "time", "times")
            ));
        }
        if !summary.complete[i] {
            lines.push(format!(
                "cudatrace: {}: the trace has no footer: its run was still going or was stopped",
                path.display()
            ));
        }
    }
    if !summary.footer_written {
        lines.push(
            "cudatrace: the merged trace is written without a footer, so that readers call it incomplete: an input lacked events"
                .to_string(),
        );
    }
    lines
}
