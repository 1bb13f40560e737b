//! Out-of-memory failures and the memory limit's refusals in words: the
//! line each process's section gives a failure, and the list the report
//! and the page open with (after the limit's verdict): a failure is an
//! answer, not a detail of a process.

use super::devices::device_label;
use super::numbers::{bytes, count, duration};
use super::rank_lines::place_text;
use cudatrace_analysis::{site_name, Oom, Summary, TraceIndex, NO_STACK, PAUSED_SITE};

/// Failures listed where the report opens; the rest are counted (each
/// process's section details its own, and `report --all-ooms` lists each).
pub const FAILURES_LISTED_FIRST: usize = 10;

/// "OUT OF MEMORY: cudaMalloc asked for 1.0 MiB with 512.0 KiB free of
/// 1.0 MiB", or, refused by the limit, "REFUSED BY THE MEMORY LIMIT: …
/// with 17.6 MiB left of the 256.0 MiB limit".
pub fn failure_text(oom: &Oom) -> String {
    if oom.by_limit {
        format!(
            "REFUSED BY THE MEMORY LIMIT: {} asked for {} with {} left of the {} limit",
            oom.api,
            bytes(oom.requested_bytes),
            bytes(oom.device_free),
            bytes(oom.device_total)
        )
    } else {
        format!(
            "OUT OF MEMORY: {} asked for {} with {} free of {}",
            oom.api,
            bytes(oom.requested_bytes),
            bytes(oom.device_free),
            bytes(oom.device_total)
        )
    }
}

/// The lines the report and the page open with: every failure of the
/// run in time order, at most [`FAILURES_LISTED_FIRST`] of them and a
/// count of the rest, each with its process, device, moment and call
/// site, then the failures PyTorch reported per process and device;
/// empty when nothing failed.
pub fn opening_lines(index: &TraceIndex, summary: &Summary) -> Vec<String> {
    let failures = summary.ooms_in_time_order();
    let mut lines: Vec<String> = failures
        .iter()
        .take(FAILURES_LISTED_FIRST)
        .map(|&(process, device, oom)| {
            let info = &index.processes[process];
            let site = site_name(&index.frames(info, oom.stack));
            let at = if site == NO_STACK || site == PAUSED_SITE {
                "with no call stack recorded".to_string()
            } else {
                format!("at {site}")
            };
            format!(
                "pid {}{}, {}, at {}: {}, {at}",
                info.start.pid,
                place_text(&info.start.place, index.several_hosts()),
                device_label(device),
                duration(oom.time_ns.saturating_sub(index.start_ns())),
                failure_text(oom)
            )
        })
        .collect();
    let failed = summary.oom_count();
    if failed > FAILURES_LISTED_FIRST as u64 {
        let more = failed - FAILURES_LISTED_FIRST as u64;
        lines.push(format!(
            "... and {more} more {} (each process's section below details its first; `report --all-ooms` lists each)",
            if more == 1 { "failure" } else { "failures" }
        ));
    }
    for (info, process) in index.processes.iter().zip(&summary.processes) {
        for (&device, tensors) in &process.tensors.devices {
            if tensors.ooms > 0 {
                lines.push(format!(
                    "pid {}{}, {}: PyTorch reported {}",
                    info.start.pid,
                    place_text(&info.start.place, index.several_hosts()),
                    device_label(device),
                    count(tensors.ooms, "out-of-memory failure", "out-of-memory failures")
                ));
            }
        }
    }
    lines
}
