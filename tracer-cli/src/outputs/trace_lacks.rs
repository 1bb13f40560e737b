//! What every command that reads a trace says about it on stderr: frames
//! skipped, damage, a missing footer, blocks that changed while read.

use crate::system::terminal::say;
use crate::wording::count;
use crate::wording::{damage_text, unread_block_text};
use cudatrace_analysis::TraceIndex;
use cudatrace_analysis::UnreadBlock;

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
