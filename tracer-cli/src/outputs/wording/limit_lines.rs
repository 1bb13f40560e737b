//! The memory limit's verdict (`cudatrace run --limit`), as the text report
//! opens with it: one line per process and device.

use super::devices::device_label;
use super::numbers::{bytes, count};
use crate::analysis::{site_name, LimitVerdict, Oom, TraceIndex};

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

/// "fits: peak 21.3 GiB of the 24.0 GiB limit (…)" or "did not fit: …",
/// with what the reader needs to weigh it: a limit larger than the card, a
/// peak past the limit, refusals PyTorch recovered from.
pub fn verdict_line(index: &TraceIndex, verdict: &LimitVerdict) -> String {
    let info = &index.processes[verdict.process];
    let site = |oom: &Oom| site_name(&index.frames(info, oom.stack));
    let mut line = if verdict.fits() {
        let mut line = fits_line(verdict);
        let ooms: Vec<&Oom> = verdict.refused.iter().chain(&verdict.card_ooms).copied().collect();
        if let Some(first) = ooms.iter().min_by_key(|o| o.time_ns) {
            let by = if verdict.refused.is_empty() {
                "the card"
            } else {
                "the limit"
            };
            line += &format!(
                ", after PyTorch freed its cache when {} refused by {by} ({})",
                count(ooms.len() as u64, "allocation was", "allocations were"),
                at_site(&site(first), ooms.len())
            );
        }
        if verdict.peak_bytes > verdict.limit {
            line += &format!(
                "; the peak passed the limit by {} in memory the limit does not refuse (managed memory) or that the \
                 driver took after its last reading",
                bytes(verdict.peak_bytes - verdict.limit)
            );
        }
        line
    } else if let Some(first) = verdict.refused.first() {
        let asked = if first.requested_bytes == 0 {
            "a context".to_string()
        } else {
            format!("asked {}", bytes_apart(first.requested_bytes, first.device_free).0)
        };
        format!(
            "did not fit: {} refused, {} ({asked} with {} left of the {} limit)",
            count(verdict.refused.len() as u64, "allocation", "allocations"),
            at_site(&site(first), verdict.refused.len()),
            bytes_apart(first.requested_bytes, first.device_free).1,
            bytes(verdict.limit)
        )
    } else {
        let first = verdict.card_ooms[0];
        let (asked, free) = bytes_apart(first.requested_bytes, first.device_free);
        format!(
            "did not fit: the card itself refused {}, {} (asked {asked} with {free} free of {})",
            count(verdict.card_ooms.len() as u64, "allocation", "allocations"),
            at_site(&site(first), verdict.card_ooms.len()),
            bytes(first.device_total)
        )
    };
    if verdict.limit_above_card() {
        line += &format!(
            "; the {} limit is larger than this card ({}), which held the job to its own size",
            bytes(verdict.limit),
            bytes(verdict.card_total.unwrap_or(0))
        );
    }
    line
}

/// "at SITE" for one failure, "the first at SITE" for several; where no
/// stack was recorded (`--stacks none`, a paused job), it says so.
fn at_site(site: &str, failures: usize) -> String {
    let which = if failures == 1 { "" } else { "the first " };
    if site == crate::analysis::NO_STACK || site == crate::analysis::PAUSED_SITE {
        format!("{which}with no call stack recorded")
    } else {
        format!("{which}at {site}")
    }
}

/// Two byte counts as text, exact where their rounded forms would read
/// alike (an ask of 256.0 MiB refused with 256.0 MiB left).
fn bytes_apart(a: u64, b: u64) -> (String, String) {
    let (rounded_a, rounded_b) = (bytes(a), bytes(b));
    if rounded_a == rounded_b && a != b {
        (format!("{a} B"), format!("{b} B"))
    } else {
        (rounded_a, rounded_b)
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
