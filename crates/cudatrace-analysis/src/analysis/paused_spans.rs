//! The spans of a run whose recording was paused (`cudatrace pause`,
//! `run --start-paused`), from the trace's switch records. Events of a
//! paused span are all in the trace, without call stacks: each carries
//! the paused mark, which [`PAUSED_SITE`] names.

use super::trace_index::TraceIndex;

/// What every output names the call site of an event recorded while
/// paused: it has no frames of its own.
pub const PAUSED_SITE: &str = "(recorded while paused: no call stack)";

/// One span of the run with recording paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PausedSpan {
    /// When it began, `CLOCK_MONOTONIC` ns.
    pub start_ns: u64,
    /// When recording resumed; `None` if it never did before the run ended.
    pub end_ns: Option<u64>,
}

/// The paused spans, in order, from the switches the trace holds.
pub fn paused_spans(index: &TraceIndex) -> Vec<PausedSpan> {
    let mut spans: Vec<PausedSpan> = Vec::new();
    for switch in &index.switches {
        let open = spans.last().is_some_and(|span| span.end_ns.is_none());
        match (switch.state.paused, open) {
            (true, false) => spans.push(PausedSpan {
                start_ns: switch.time_ns,
                end_ns: None,
            }),
            (false, true) => {
                if let Some(span) = spans.last_mut() {
                    span.end_ns = Some(switch.time_ns);
                }
            }
            // A change of stack setting only, or a repeat.
            _ => {}
        }
    }
    spans
}
