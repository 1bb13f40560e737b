//! `cudatrace dump`: spool files as JSON lines.

use cudatrace_events::{naming, Event, Spool, SpoolReader};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The spool files in `dir`, ordered by pid and then by image.
pub fn spools_in(dir: &Path) -> Result<Vec<PathBuf>, String> {
    naming::spool_files_in(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))
}

fn process_line(path: &Path, spool: &Spool) -> serde_json::Value {
    json!({
        "process": {
            "file": path.display().to_string(),
            "pid": spool.process.pid,
            "ppid": spool.process.ppid,
            "argv": spool.process.argv,
            "start_monotonic_ns": spool.process.start_monotonic_ns,
            "start_realtime_ns": spool.process.start_realtime_ns,
            "events": spool.events.len(),
            "unfinished_records": spool.unfinished_records,
            "unknown_frees": spool.unknown_frees,
            "registry_overflows": spool.registry_overflows,
            "dropped_records": spool.dropped_records,
            "released_records": spool.released_records,
        }
    })
}

fn event_line(event: &Event) -> serde_json::Value {
    json!({
        "pid": event.pid,
        "tid": event.tid,
        "seq": event.seq,
        "time_ns": event.time_ns,
        "op": event.op.name(),
        "api": event.api.name(),
        "kind": event.kind.name(),
        "device": event.device,
        "address": event.address,
        "size": event.size,
        "stream": event.stream,
        "arg1": event.arg1,
        "arg2": event.arg2,
    })
}

/// Prints every file; stops at the first unreadable one, after printing the
/// files before it.
pub fn print(files: &[PathBuf]) -> Result<(), String> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for path in files {
        let spool = SpoolReader::read_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let lines = std::iter::once(process_line(path, &spool)).chain(spool.events.iter().map(event_line));
        for line in lines {
            if writeln!(out, "{line}").is_err() {
                return Ok(()); // the reader went away (e.g. `| head`)
            }
        }
    }
    out.flush().ok();
    Ok(())
}
