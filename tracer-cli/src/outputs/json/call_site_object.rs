//! Call stacks and call sites as JSON, for every object of the report.

use cudatrace_analysis::{largest_call_sites, ByStack, Frame, ProcessIndex, TraceIndex};
use serde_json::{json, Value};

/// A source frame as JSON.
pub fn frame_json(frame: &Frame) -> Value {
    json!({"function": frame.function, "file": frame.file, "line": frame.line, "module": frame.module})
}

/// A stack as JSON: its frames, innermost first.
pub fn stack_json(index: &TraceIndex, info: &ProcessIndex, stack: u32) -> Value {
    index.frames(info, stack).iter().map(frame_json).collect()
}

/// Call sites, largest first, each with its bytes, its count under
/// `counted` and its stack.
pub fn sites_json(index: &TraceIndex, info: &ProcessIndex, by_stack: &ByStack, counted: &str) -> Vec<Value> {
    sites_json_up_to(index, info, by_stack, counted, usize::MAX)
}

/// The `most` largest of [`sites_json`].
fn sites_json_up_to(
    index: &TraceIndex,
    info: &ProcessIndex,
    by_stack: &ByStack,
    counted: &str,
    most: usize,
) -> Vec<Value> {
    largest_call_sites(by_stack)
        .into_iter()
        .take(most)
        .map(|(stack, bytes, n)| json!({"bytes": bytes, counted: n, "stack": stack_json(index, info, stack)}))
        .collect()
}

/// Call sites listed for each out-of-memory failure: a failure's state is
/// kept for up to `OOM_STATES_KEPT` failures a device, and thousands of
/// sites each would make the report as large as the trace.
const OOM_SITES_LISTED: usize = 20;

/// The [`OOM_SITES_LISTED`] largest call sites of `by_stack`, and how many
/// more there were.
pub fn largest_sites_json(index: &TraceIndex, info: &ProcessIndex, by_stack: &ByStack, counted: &str) -> Value {
    let listed = sites_json_up_to(index, info, by_stack, counted, OOM_SITES_LISTED);
    json!({"largest": listed, "more": by_stack.len().saturating_sub(OOM_SITES_LISTED)})
}
