//! `cudatrace dump`: spool files and traces as JSON lines, streamed: each
//! file's header is checked before anything else is read, and records are
//! printed as they are read, so any file of any size can be given.

use crate::collector::spool_tail::SpoolTail;
use crate::commands::arguments::DumpArgs;
use crate::system::failure::Failure;
use crate::system::terminal::Stdout;
use cudatrace_events::{naming, Event, Pass, SpoolHeaderInfo};
use cudatrace_trace::{Record, TraceReader};
use serde_json::{json, Value};
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
        "stack": event.stack,
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

/// One trace record as JSON lines (an events record, one line an event).
fn record_lines(path: &Path, record: Record) -> Vec<Value> {
    match record {
        Record::Header(h) => vec![json!({"header": {
            "file": path.display().to_string(),
            "format_version": h.format_version,
            "tracer_version": h.tracer_version,
            "host": h.host,
            "start_realtime_ns": h.start_realtime_ns,
            "start_monotonic_ns": h.start_monotonic_ns,
            "command": h.command,
        }})],
        Record::Process(p) => vec![json!({"process": {
            "process": p.process,
            "pid": p.pid,
            "ppid": p.ppid,
            "image": p.image,
            "argv": p.argv,
            "start_monotonic_ns": p.start_monotonic_ns,
            "start_realtime_ns": p.start_realtime_ns,
        }})],
        Record::Events { process, events } => events
            .iter()
            .map(|event| {
                let mut line = event_line(event);
                line["process"] = json!(process);
                line
            })
            .collect(),
        Record::ProcessEnd(e) => vec![json!({"process_end": {
            "process": e.process,
            "exit_status": e.exit_status,
            "exit_time_ns": e.exit_time_ns,
            "still_running": e.still_running,
            "reserved_events": e.reserved_events,
            "unfinished_records": e.unfinished_records,
            "unknown_frees": e.unknown_frees,
            "registry_overflows": e.registry_overflows,
            "dropped_records": e.dropped_records,
            "drop_errno": e.drop_errno,
            "damaged_records": e.damaged_records,
        }})],
        Record::Refused(r) => vec![json!({"refused": {"path": r.path, "uid": r.uid, "reason": r.reason}})],
        Record::DamagedSpool(d) => {
            vec![json!({"damaged_spool": {"pid": d.pid, "image": d.image, "path": d.path, "reason": d.reason}})]
        }
        Record::Unrecorded(u) => vec![json!({"unrecorded": crate::outputs::report_json::unrecorded_json(&u)})],
        Record::String { id, text } => vec![json!({"string": {"id": id, "text": text}})],
        Record::Symbols { process, nodes } => nodes
            .iter()
            .map(|n| {
                let frames: Vec<Value> = n
                    .frames
                    .iter()
                    .map(|f| json!({"function": f.function, "file": f.file, "line": f.line, "module": f.module}))
                    .collect();
                json!({"symbols": {"process": process, "node": n.node, "frames": frames}})
            })
            .collect(),
        Record::Footer(f) => vec![json!({"footer": {
            "processes": f.processes,
            "events": f.events,
            "dropped_events": f.dropped_events,
            "lost_events": f.lost_events,
            "refused_spools": f.refused_spools,
            "damaged_spools": f.damaged_spools,
            "end_realtime_ns": f.end_realtime_ns,
        }})],
        Record::Nvml(n) => vec![json!({"nvml": {
            "time_ns": n.time_ns,
            "uuid": n.uuid,
            "pid": n.pid,
            "used_bytes": n.used_bytes,
            "free_bytes": n.free_bytes,
            "total_bytes": n.total_bytes,
        }})],
        Record::NvmlStatus(n) => vec![json!({"nvml_status": {
            "time_ns": n.time_ns,
            "devices_ok": n.devices_ok,
            "pids_match": n.pids_match,
            "reason": n.reason,
        }})],
        Record::Unknown { tag } => vec![json!({"unknown_record": tag})],
    }
}

/// Prints one line per record of the trace at `path`; `None` once stdout
/// is closed, else the exit code (1 if the trace is damaged).
fn dump_trace(path: &Path, out: &mut Stdout) -> Result<Option<u8>, Failure> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let reader = TraceReader::new(std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(|damage| format!("{}: {}", path.display(), damage.reason))?;
    let mut code = 0;
    for record in reader {
        let lines: Vec<Value> = match record {
            Err(damage) => {
                code = 1;
                vec![
                    json!({"damage": {"file": path.display().to_string(), "at": damage.offset, "reason": damage.reason, "skipped": damage.skipped}}),
                ]
            }
            Ok(record) => record_lines(path, record),
        };
        for line in lines {
            if !out.write(&format!("{line}\n"))? {
                return Ok(None);
            }
        }
    }
    Ok(Some(code))
}

/// Prints every file; stops at the first unreadable one, after printing the
/// files before it.
pub fn command(args: DumpArgs) -> Result<u8, Failure> {
    if args.spools.is_empty() && args.dir.is_none() {
        return Err("dump needs spool files or traces, or --dir DIR (see --help)".into());
    }
    let mut files: Vec<PathBuf> = args.spools;
    if let Some(dir) = &args.dir {
        files.extend(naming::spool_files_in(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?);
    }
    let mut out = Stdout::new();
    for path in &files {
        crate::analysis::check_regular_file(path)?;
        let image = naming::parse_spool_file_name(path).map_or(0, |(_, image)| image);
        if is_trace(path) {
            match dump_trace(path, &mut out)? {
                Some(0) => continue,
                Some(code) => {
                    out.finish()?;
                    return Ok(code);
                }
                None => return Ok(0),
            }
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
