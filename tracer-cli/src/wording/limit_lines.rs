//! The memory limit's verdict (`cudatrace run --limit`), as the text report
//! opens with it: one line per process and device.

use super::devices::device_label;
use super::image_end::status_text;
use super::numbers::{bytes, count};
use cudatrace_analysis::{site_name, LimitOutcome, LimitVerdict, Oom, ProcessEnding, TraceIndex};

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

/// "fits: peak 21.3 GiB of the 24.0 GiB limit (…)", "did not fit: …" or
/// "not known whether it fits: …", with what the reader needs to weigh it:
/// a limit larger than the card, a peak past the limit, refusals PyTorch
/// recovered from, how the process ended after them.
pub fn verdict_line(index: &TraceIndex, verdict: &LimitVerdict) -> String {
    let info = &index.processes[verdict.process];
    let site = |oom: &Oom| site_name(&index.frames(info, oom.stack));
    let mut line = if verdict.outcome() == LimitOutcome::Fits {
        let mut line = fits_line(verdict);
        let ooms = verdict.all_refusals();
        let failures = verdict.refused_count + verdict.card_oom_count;
        if let Some(first) = ooms.first() {
            let by = if verdict.refused.is_empty() {
                "the card"
            } else {
                "the limit"
            };
            line += &format!(
                ", after PyTorch freed its cache when {} refused by {by} ({})",
                count(failures, "allocation was", "allocations were"),
                at_site(&site(first), failures)
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
    } else if verdict.recovered_by_pytorch {
        // PyTorch raised no error: how the process ended decides.
        ended_line(verdict, &site)
    } else if let Some(first) = verdict.refused.first() {
        format!(
            "did not fit: {} refused, {} ({})",
            count(verdict.refused_count, "allocation", "allocations"),
            at_site(&site(first), verdict.refused_count),
            asked_text(verdict, first)
        )
    } else {
        let first = verdict.card_ooms[0];
        format!(
            "did not fit: the card itself refused {}, {} ({})",
            count(verdict.card_oom_count, "allocation", "allocations"),
            at_site(&site(first), verdict.card_oom_count),
            asked_text(verdict, first)
        )
    };
    if verdict.limit_above_card() {
        line += &format!(
            "; the {} limit is larger than this card ({}), which held the job to its own size",
            bytes(verdict.limit),
            bytes(verdict.card_total.unwrap_or(0))
        );
    }
    if let Some(why) = verdict.kept_alone {
        line += &format!(
            "; this process kept the limit to itself ({}): the job's other processes did not count against it",
            cudatrace_events::measures::limit_ledger::reason(why)
        );
    }
    line
}

/// The verdict of a process whose refusals PyTorch raised no error for,
/// but that did not end well or whose end is not known: "did not fit: the
/// process exited 1 after 2 allocations were refused by the limit, the last
/// made by libcublas.so.12 at train.py:40 main (asked 4.0 MiB with 1.2 MiB
/// left of the 24.0 GiB limit)". The library named is the one whose
/// allocation failed last, which the site (the program's line) hides when
/// it is a library PyTorch calls.
fn ended_line(verdict: &LimitVerdict, site: &dyn Fn(&Oom) -> String) -> String {
    let ooms = verdict.all_refusals();
    let Some(&last) = ooms.last() else {
        return String::new();
    };
    let head = match verdict.ending {
        ProcessEnding::Status(status) => format!("did not fit: the process {}", status_text(status, "exited")),
        ProcessEnding::StillRunning => {
            "not known whether it fits: the process was still running when the trace ended,".to_string()
        }
        ProcessEnding::NotRecorded => {
            "not known whether it fits: the process's exit status was not recorded,".to_string()
        }
    };
    let by = if verdict.refused.is_empty() {
        "the card"
    } else {
        "the limit"
    };
    let failures = verdict.refused_count + verdict.card_oom_count;
    let mut which = String::from(if failures == 1 { "" } else { "the last " });
    if let Some(library) = &verdict.failed_library {
        which += &format!("made by {library} ");
    }
    format!(
        "{head} after {} refused by {by}, {which}{} ({})",
        count(failures, "allocation was", "allocations were"),
        at_site(&site(last), 1),
        asked_text(verdict, last)
    )
}

/// What a refused allocation asked for and what was left: "asked 2.0 GiB
/// with 412.0 MiB left of the 24.0 GiB limit", "a context with …", or for
/// the card's own refusal "asked 2.0 GiB with 1.1 GiB free of 80.0 GiB".
fn asked_text(verdict: &LimitVerdict, oom: &Oom) -> String {
    let (asked, left) = bytes_apart(oom.requested_bytes, oom.device_free);
    if oom.by_limit {
        let asked = if oom.requested_bytes == 0 {
            "a context".to_string()
        } else {
            format!("asked {asked}")
        };
        format!("{asked} with {left} left of the {} limit", bytes(verdict.limit))
    } else {
        format!("asked {asked} with {left} free of {}", bytes(oom.device_total))
    }
}

/// "at SITE" for one failure, "the first at SITE" for several; where no
/// stack was recorded (`--stacks none`, a paused job), it says so.
fn at_site(site: &str, failures: u64) -> String {
    let which = if failures == 1 { "" } else { "the first " };
    if site == cudatrace_analysis::NO_STACK || site == cudatrace_analysis::PAUSED_SITE {
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
