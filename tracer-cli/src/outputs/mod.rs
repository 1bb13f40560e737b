//! One module per output of a trace. Each reads the same [`TraceIndex`]
//! and replays the same events (see [`cudatrace_analysis`]), so all agree.

pub mod folded_stacks;
pub mod footprint_table;
pub mod growth_tables;
pub mod html_page;
pub mod json;
pub mod merged_trace;
pub mod parquet_export;
pub mod perfetto_json;
pub mod perfetto_proto;
pub mod perfetto_scene;
pub mod pickle;
pub mod report_text;
pub mod steps_text;
pub mod torch_snapshot;

use crate::system::terminal::say;
use crate::wording::{bytes, count};
use crate::wording::{damage_text, unread_block_text};
use cudatrace_analysis::TraceIndex;
use cudatrace_analysis::UnreadBlock;

/// Autograd nodes named in a backward pass's line; the rest are counted.
const PARTS_NAMED: usize = 5;

/// A call site's parts (the backward pass's bytes by autograd node) as
/// one line: `by autograd node: ConvolutionBackward0 89.5 MiB, …`.
pub fn parts_text(parts: &[(String, u64)]) -> Option<String> {
    if parts.is_empty() {
        return None;
    }
    let mut named: Vec<String> = parts
        .iter()
        .take(PARTS_NAMED)
        .map(|(node, size)| format!("{node} {}", bytes(*size)))
        .collect();
    if parts.len() > PARTS_NAMED {
        let rest: u64 = parts[PARTS_NAMED..].iter().map(|(_, size)| size).sum();
        named.push(format!("{} more {}", parts.len() - PARTS_NAMED, bytes(rest)));
    }
    Some(format!("by autograd node: {}", named.join(", ")))
}

/// Says on stderr what is wrong with the trace, if anything; returns the
/// exit code that reading it deserves (1 when it is damaged).
pub fn say_what_the_trace_lacks(index: &TraceIndex, stream_errors: &[UnreadBlock]) -> u8 {
    let path = index.path.display();
    let mut code = 0;
    if !index.skipped.is_empty() {
        say(&format!(
            "cudatrace: {path} has {}, skipped (the first {}); the events they held are counted as lost",
            count(index.skipped.len() as u64, "damaged frame", "damaged frames"),
            damage_text(&index.skipped[0])
        ));
        code = 1;
    }
    if let Some(damage) = &index.damage {
        say(&format!(
            "cudatrace: {path} is damaged {}; the output covers the {} records before it",
            damage_text(damage),
            index.records
        ));
        code = 1;
    } else if !index.complete {
        say(&format!(
            "cudatrace: {path} has no footer: it is still being written, or its writer was stopped"
        ));
    }
    if let Some(line) = crate::wording::fold_lines::detail_span(index) {
        say(&format!("cudatrace: {path}: {line}"));
    }
    if !index.unrecorded.is_empty() {
        say(&format!(
            "cudatrace: {path} lacks every event of {} that could not record (the report names them)",
            count(index.unrecorded.len() as u64, "process", "processes")
        ));
    }
    if let Some(first) = stream_errors.first() {
        say(&format!(
            "cudatrace: {path} changed while it was read ({}); the output lacks {}",
            unread_block_text(first),
            count(stream_errors.len() as u64, "block of events", "blocks of events")
        ));
        code = 1;
    }
    code
}
