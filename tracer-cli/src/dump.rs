//! `cudatrace dump`: spool files as JSON lines, streamed: each file's header
//! is checked before anything else is read, and records are printed as they
//! are read, so any file of any size can be given.

use crate::cli::DumpArgs;
use crate::spool_tail::SpoolTail;
use crate::terminal::Stdout;
use crate::Failure;
use cudatrace_events::{naming, Event, Pass, SpoolHeaderInfo};
use serde_json::json;
use std::path::{Path, PathBuf};

fn process_line(path: &Path, header: &SpoolHeaderInfo) -> serde_json::Value {
    let process = &header.process;
    json!({
        "process": {
            "file": path.display().to_string(),
            "pid": process.pid,
            "ppid": process.ppid,
            "argv": process.argv,
            "start_monotonic_ns": process.start_monotonic_ns,
            "start_realtime_ns": process.start_realtime_ns,
            "reserved_events": header.reserved_seqs,
            "unknown_frees": header.unknown_frees,
            "registry_overflows": header.registry_overflows,
            "dropped_records": header.dropped_records,
            "drop_errno": header.drop_errno,
            "released_records": header.released_records,
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

fn end_line(tail: &SpoolTail, events: u64, header: &SpoolHeaderInfo) -> serde_json::Value {
    json!({
        "spool_end": {
            "pid": tail.pid,
            "events": events,
            "unwritten_records": tail.cursor.unwritten,
            "unfinished_records": cudatrace_events::unfinished(tail.cursor.unwritten, header.dropped_records),
            "damaged_records": tail.cursor.damaged,
        }
    })
}

/// Whether `path` starts like a trace file.
fn is_trace(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut magic))
        .is_ok_and(|()| magic == cudatrace_trace::MAGIC)
}

/// Prints every file; stops at the first unreadable one, after printing the
/// files before it.
pub fn command(args: DumpArgs) -> Result<u8, Failure> {
    if args.spools.is_empty() && args.dir.is_none() {
        return Err("dump needs spool files, or --dir DIR (see --help)".into());
    }
    let mut files: Vec<PathBuf> = args.spools;
    if let Some(dir) = &args.dir {
        files.extend(naming::spool_files_in(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?);
    }
    let mut out = Stdout::new();
    for path in &files {
        let image = naming::parse_spool_file_name(path).map_or(0, |(_, image)| image);
        if is_trace(path) {
            return Err(format!(
                "{} is a trace, not a spool: `cudatrace report {}` reads it",
                path.display(),
                path.display()
            )
            .into());
        }
        let (mut tail, header) =
            SpoolTail::open(path, 0, image, false).map_err(|e| format!("{}: {e}", path.display()))?;
        if !out.write(&format!("{}\n", process_line(path, &header)))? {
            return Ok(0);
        }
        let mut count = 0u64;
        loop {
            let (events, at_end) = tail.read_batch(Pass::Final)?;
            for event in &events {
                if !out.write(&format!("{}\n", event_line(event)))? {
                    return Ok(0);
                }
            }
            count += events.len() as u64;
            if at_end {
                break;
            }
        }
        let header = tail.header();
        tail.finish(&header);
        if !out.write(&format!("{}\n", end_line(&tail, count, &header)))? {
            return Ok(0);
        }
    }
    out.finish()?;
    Ok(0)
}
