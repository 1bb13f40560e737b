//! `cudatrace dump`'s JSON lines: a spool's process and its events, and
//! each record of a trace.

use crate::wording::problem_text;
use cudatrace_events::measures::DEVICE_BLOB;
use cudatrace_events::stacks::{blob_kind, frame_kind, BlobPiece, StackNode};
use cudatrace_events::{Event, SpoolCursor, SpoolHeaderInfo};
use cudatrace_trace::{Damage, Header, NodeSymbols, ProcessEnd, ProcessStart, Record, StepsState};
use serde_json::{json, Value};
use std::path::Path;

/// A spool's process, from its header.
pub fn process_line(path: &Path, header: &SpoolHeaderInfo) -> Value {
    let process = &header.process;
    json!({
        "process": {
            "file": path.display().to_string(),
            "pid": process.pid,
            "ppid": process.ppid,
            "argv": process.argv,
            "start_monotonic_ns": process.start_monotonic_ns,
            "start_realtime_ns": process.start_realtime_ns,
            "host": process.place.host,
            "rank": process.place.rank,
            "local_rank": process.place.local_rank,
            "world_size": process.place.world_size,
            "reserved_events": header.reserved_seqs,
            "unknown_frees": header.unknown_frees,
            "registry_overflows": header.registry_overflows,
            "dropped_records": header.dropped_records,
            "drop_errno": header.drop_errno,
            "released_records": header.released_records,
        }
    })
}

/// One event: a memory event or a measurement with its words, a stack
/// node or a blob piece with the fields it carries (its words hold those,
/// not addresses and sizes).
pub fn event_line(event: &Event) -> Value {
    if let Some(node) = StackNode::from_event(event) {
        return stack_node_line(event, &node);
    }
    if let Some(piece) = BlobPiece::from_event(event) {
        return blob_line(event, &piece);
    }
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

/// A frame kind's name, or its number for a kind this version does not know.
fn frame_kind_name(kind: u8) -> Value {
    match kind {
        frame_kind::NATIVE => json!("native"),
        frame_kind::PYTHON => json!("python"),
        frame_kind::NO_PYTHON => json!("no-python"),
        frame_kind::TRUNCATED => json!("truncated"),
        other => json!(other),
    }
}

/// A blob kind's name, or its number for a kind this version does not know.
fn blob_kind_name(kind: u8) -> Value {
    match kind {
        blob_kind::MODULE => json!("module"),
        blob_kind::CODE => json!("code"),
        DEVICE_BLOB => json!("device"),
        other => json!(other),
    }
}

/// One stack node: its id, its parent's, and the frame it stands for.
fn stack_node_line(event: &Event, node: &StackNode) -> Value {
    json!({
        "pid": event.pid,
        "tid": event.tid,
        "seq": event.seq,
        "time_ns": event.time_ns,
        "op": event.op.name(),
        "node": node.id,
        "parent": node.parent,
        "frame_kind": frame_kind_name(node.kind),
        "value": node.value,
        "offset": node.offset,
    })
}

/// One piece of a blob: which blob, where the piece lies in it, and its
/// bytes as recorded (all of them: the last piece's padding too).
fn blob_line(event: &Event, piece: &BlobPiece) -> Value {
    let bytes: String = piece.bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    json!({
        "pid": event.pid,
        "tid": event.tid,
        "seq": event.seq,
        "time_ns": event.time_ns,
        "op": event.op.name(),
        "blob_kind": blob_kind_name(piece.kind),
        "key": piece.key,
        "offset": piece.offset,
        "total": piece.total,
        "bytes": bytes,
    })
}

/// A spool's end: its events read, and the records not written (some of
/// them cut short by the process's end) or damaged.
pub fn end_line(pid: u32, events: u64, cursor: &SpoolCursor, header: &SpoolHeaderInfo) -> Value {
    json!({
        "spool_end": {
            "pid": pid,
            "events": events,
            "unwritten_records": cursor.unwritten,
            "unfinished_records": cudatrace_events::unfinished(cursor.unwritten, header.dropped_records),
            "damaged_records": cursor.damaged,
        }
    })
}

/// One trace record as JSON lines (an events record, one line an event).
pub fn record_lines(path: &Path, record: Record) -> Vec<Value> {
    match record {
        Record::Header(h) => vec![header_line(path, &h)],
        Record::Process(p) => vec![process_start_line(&p)],
        Record::Events { process, events } => events
            .iter()
            .map(|event| {
                let mut line = event_line(event);
                line["process"] = json!(process);
                line
            })
            .collect(),
        Record::ProcessEnd(e) => vec![process_end_line(&e)],
        Record::Refused(r) => vec![json!({"refused": {"path": r.path, "uid": r.uid, "reason": r.reason}})],
        Record::DamagedSpool(d) => {
            vec![json!({"damaged_spool": {"pid": d.pid, "image": d.image, "path": d.path, "reason": d.reason}})]
        }
        Record::Unrecorded(u) => vec![json!({"unrecorded": super::report_object::unrecorded_json(&u)})],
        Record::String { id, text } => vec![json!({"string": {"id": id, "text": text}})],
        Record::RecordingSwitch(switch) => vec![json!({"recording_switch": {
            "time_ns": switch.time_ns,
            "paused": switch.state.paused,
            "stacks": switch.state.stacks.map(|s| s.name()),
        }})],
        Record::Symbols { process, nodes } => symbol_lines(process, &nodes),
        Record::Fold(f) => vec![json!({"fold": {
            "process": f.process,
            "folded_to": f.folded_to,
            "lost_below": f.lost_below,
            "folded_events": f.folded_events,
            "detail_from_ns": f.detail_from_ns,
        }})],
        Record::StepsState(state) => vec![steps_state_line(&state)],
        Record::LowPointsState(state) => vec![json!({"low_points_state": {
            "process": state.process,
            "tensors": state.tensors,
            "points": state.points.len(),
        }})],
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

/// A trace's header, with the file it was read from.
fn header_line(path: &Path, h: &Header) -> Value {
    json!({"header": {
        "file": path.display().to_string(),
        "format_version": h.format_version,
        "tracer_version": h.tracer_version,
        "host": h.host,
        "start_realtime_ns": h.start_realtime_ns,
        "start_monotonic_ns": h.start_monotonic_ns,
        "command": h.command,
    }})
}

/// A process's start, as the trace holds it.
fn process_start_line(p: &ProcessStart) -> Value {
    json!({"process": {
        "process": p.process,
        "pid": p.pid,
        "ppid": p.ppid,
        "host": p.place.host,
        "rank": p.place.rank,
        "local_rank": p.place.local_rank,
        "world_size": p.place.world_size,
        "image": p.image,
        "argv": p.argv,
        "start_monotonic_ns": p.start_monotonic_ns,
        "start_realtime_ns": p.start_realtime_ns,
    }})
}

/// A process's end, with what its spool said of itself.
fn process_end_line(e: &ProcessEnd) -> Value {
    json!({"process_end": {
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
        "ranks_at_end": e.ranks_at_end,
        "exec_into": e.exec_into,
        "process_exit_status": e.process_exit_status,
    }})
}

/// A symbols record: one line a stack node, with its frames.
fn symbol_lines(process: u32, nodes: &[NodeSymbols]) -> Vec<Value> {
    nodes
        .iter()
        .map(|n| {
            let frames: Vec<Value> = n
                .frames
                .iter()
                .map(|f| json!({"function": f.function, "file": f.file, "line": f.line, "module": f.module}))
                .collect();
            json!({"symbols": {"process": process, "node": n.node, "frames": frames}})
        })
        .collect()
}

/// A process's steps state: its marker, and how much it holds.
fn steps_state_line(state: &StepsState) -> Value {
    json!({"steps_state": {
        "process": state.process,
        "marker_stack": state.marker_stack,
        "marker_device": state.marker_device,
        "tensors": state.tensors,
        "started": state.started,
        "records": state.records.len(),
        "open": state.open.is_some(),
        "series_ends": state.ends.len(),
        "series": state.series.len(),
    }})
}

/// Where a trace is damaged, and whether reading went on past it.
pub fn damage_line(path: &Path, damage: &Damage) -> Value {
    json!({"damage": {"file": path.display().to_string(), "at": damage.offset, "reason": problem_text(&damage.problem), "skipped": damage.skipped}})
}
