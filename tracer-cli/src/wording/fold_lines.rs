//! What outputs say of a folded trace (`run --max-size`): which span they
//! show in full detail.

use super::numbers::{count, duration};
use cudatrace_analysis::TraceIndex;

/// "detail from 2 h 41 min to the end (3 h 02 min); before that,
/// summaries (...)"; `None` for a trace never folded.
pub fn detail_span(index: &TraceIndex) -> Option<String> {
    let from = index.detail_from_ns()?;
    let since_start = |ns: u64| duration(ns.saturating_sub(index.start_ns()));
    // A merged trace has a cut of each host's: each said.
    let mut cuts: Vec<(u64, &str)> = index
        .processes
        .iter()
        .filter_map(|p| p.fold.as_ref().map(|f| (f.detail_from_ns, p.start.place.host.as_str())))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    if cuts.len() > 1 {
        let each: Vec<String> = cuts
            .iter()
            .map(|&(cut, host)| format!("from {} on {host}", since_start(cut)))
            .collect();
        return Some(format!(
            "detail {} to the end ({}); before that, summaries: {} folded to keep each trace under its size cap, \
             with the peaks, the OOMs, every count and what was live at each cut kept exact",
            each.join(", "),
            since_start(index.end_ns().max(from)),
            count(index.folded_events(), "record", "records"),
        ));
    }
    Some(format!(
        "detail from {} to the end ({}); before that, summaries: {} folded to keep the trace under its size cap, \
         with the peaks, the OOMs, every count and what was live at {} kept exact",
        since_start(from),
        since_start(index.end_ns().max(from)),
        count(index.folded_events(), "record", "records"),
        since_start(from),
    ))
}
