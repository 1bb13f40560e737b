//! What outputs say of a folded trace (`run --max-size`): which span they
//! show in full detail.

use super::numbers::{count, duration};
use crate::analysis::TraceIndex;

/// "detail from 2 h 41 min to the end (3 h 02 min); before that,
/// summaries (...)"; `None` for a trace never folded.
pub fn detail_span(index: &TraceIndex) -> Option<String> {
    let from = index.detail_from_ns()?;
    let since_start = |ns: u64| duration(ns.saturating_sub(index.start_ns()));
    Some(format!(
        "detail from {} to the end ({}); before that, summaries: {} folded to keep the trace under its size cap, \
         with the peaks, the OOMs, every count and what was live at {} kept exact",
        since_start(from),
        since_start(index.end_ns().max(from)),
        count(index.folded_events(), "record", "records"),
        since_start(from),
    ))
}
