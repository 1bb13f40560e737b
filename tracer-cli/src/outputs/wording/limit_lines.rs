//! The memory limit's verdict (`cudatrace run --limit`), as the text report
//! opens with it: one line per process and device.

use super::devices::device_label;
use super::numbers::{bytes, count};
use crate::analysis::{site_name, LimitVerdict, TraceIndex};

/// Parts of a peak named on its line; the rest are in `report --json`.
const PARTS_NAMED: usize = 4;

/// The verdict's lines, with a heading; empty when nothing ran under a limit.
pub fn verdict_text(index: &TraceIndex, verdicts: &[LimitVerdict]) -> String {
    if verdicts.is_empty() {
        return String::new();
    }
    let mut out = String::from("memory limit:\n");
    for verdict in verdicts {
        let info = &index.processes[verdict.process];
        out += &format!(
            "  pid {}, {}: {}\n",
            info.start.pid,
            device_label(verdict.device),
            verdict_line(index, verdict)
        );
    }
    out
}

/// "fits: peak 21.3 GiB of the 24.0 GiB limit (…)" or "did not fit: …".
pub fn verdict_line(index: &TraceIndex, verdict: &LimitVerdict) -> String {
    let info = &index.processes[verdict.process];
    let first_site = |first: &crate::analysis::Oom| site_name(&index.frames(info, first.stack));
    match verdict.refused.first() {
        Some(first) if verdict.recovered_by_pytorch => format!(
            "{}, after PyTorch freed its cache when {} refused (the first at {})",
            fits_line(verdict),
            count(verdict.refused.len() as u64, "allocation was", "allocations were"),
            first_site(first)
        ),
        None => fits_line(verdict),
        Some(first) => {
            let asked = if first.requested_bytes == 0 {
                "a context".to_string()
            } else {
                format!("asked {}", bytes(first.requested_bytes))
            };
            format!(
                "did not fit: {} refused, the first at {} ({asked} with {} left of the {} limit)",
                count(verdict.refused.len() as u64, "allocation", "allocations"),
                first_site(first),
                bytes(first.device_free),
                bytes(verdict.limit)
            )
        }
    }
}

/// "fits: peak 21.3 GiB of the 24.0 GiB limit (…)".
fn fits_line(verdict: &LimitVerdict) -> String {
    let mut line = format!(
        "fits: peak {} of the {} limit",
        bytes(verdict.peak_bytes),
        bytes(verdict.limit)
    );
    if !verdict.peak_parts.is_empty() {
        let mut parts: Vec<String> = verdict
            .peak_parts
            .iter()
            .take(PARTS_NAMED)
            .map(|(name, part)| format!("{name} {}", bytes(*part)))
            .collect();
        if verdict.peak_parts.len() > PARTS_NAMED {
            parts.push("…".to_string());
        }
        line += &format!(" ({})", parts.join(", "));
    }
    line
}
