//! Writing a record's payload: LEB128 numbers, events delta-encoded
//! against the one before them in their block.

use crate::format::*;
use crate::varint::{put, put_signed, put_string};
use cudatrace_events::Event;

fn put_strings(out: &mut Vec<u8>, list: &[String]) {
    put(out, list.len() as u64);
    list.iter().for_each(|s| put_string(out, s));
}

/// Encodes a record's payload; returns its tag.
pub(crate) fn encode(record: &Record, out: &mut Vec<u8>) -> u8 {
    match record {
        Record::Header(h) => {
            encode_header(h, out);
            TAG_HEADER
        }
        Record::Process(p) => {
            encode_process(p, out);
            TAG_PROCESS
        }
        Record::Events { process, events } => {
            encode_events(*process, events, out);
            TAG_EVENTS
        }
        Record::ProcessEnd(e) => {
            encode_process_end(e, out);
            TAG_PROCESS_END
        }
        Record::Refused(r) => {
            put_string(out, &r.path);
            put(out, u64::from(r.uid));
            put_string(out, &r.reason);
            TAG_REFUSED
        }
        Record::DamagedSpool(d) => {
            put(out, u64::from(d.pid));
            put(out, u64::from(d.image));
            put_string(out, &d.path);
            put_string(out, &d.reason);
            TAG_DAMAGED_SPOOL
        }
        Record::Unrecorded(u) => {
            encode_unrecorded(u, out);
            TAG_UNRECORDED
        }
        Record::String { id, text } => {
            put(out, *id);
            put_string(out, text);
            TAG_STRING
        }
        Record::Symbols { process, nodes } => {
            encode_symbols(*process, nodes, out);
            TAG_SYMBOLS
        }
        Record::Footer(f) => {
            for v in [
                f.processes,
                f.events,
                f.dropped_events,
                f.refused_spools,
                f.end_realtime_ns,
                f.lost_events,
                f.damaged_spools,
            ] {
                put(out, v);
            }
            TAG_FOOTER
        }
        Record::Nvml(n) => {
            put(out, n.time_ns);
            put_string(out, &n.uuid);
            put(out, u64::from(n.pid));
            put(out, n.used_bytes);
            put(out, n.free_bytes);
            put(out, n.total_bytes);
            TAG_NVML
        }
        Record::NvmlStatus(n) => {
            put(out, n.time_ns);
            put(out, u64::from(n.devices_ok) | u64::from(n.pids_match) << 1);
            put_string(out, &n.reason);
            TAG_NVML_STATUS
        }
        Record::RecordingSwitch(switch) => {
            put(out, switch.time_ns);
            put(out, switch.state.to_word());
            TAG_RECORDING_SWITCH
        }
        Record::Fold(fold) => {
            encode_fold(fold, out);
            TAG_FOLD
        }
        Record::StepsState(state) => {
            encode_steps_state(state, out);
            TAG_STEPS_STATE
        }
        Record::LowPointsState(state) => {
            encode_low_points_state(state, out);
            TAG_LOW_POINTS_STATE
        }
        Record::Unknown { tag } => *tag,
    }
}

/// The run's header: versions, host, start times, command.
fn encode_header(h: &Header, out: &mut Vec<u8>) {
    put(out, u64::from(h.format_version));
    put_string(out, &h.tracer_version);
    put_string(out, &h.host);
    put(out, h.start_realtime_ns);
    put(out, h.start_monotonic_ns);
    put_strings(out, &h.command);
}

/// A process's start: its numbers, times, arguments and place in the job.
fn encode_process(p: &ProcessStart, out: &mut Vec<u8>) {
    for v in [p.process, p.pid, p.ppid, p.image] {
        put(out, u64::from(v));
    }
    put(out, p.start_monotonic_ns);
    put(out, p.start_realtime_ns);
    put_strings(out, &p.argv);
    put_string(out, &p.place.host);
    for number in [p.place.rank, p.place.local_rank, p.place.world_size] {
        put(out, number.map_or(0, |n| u64::from(n) + 1));
    }
}

/// A process that ran without recording, and why.
fn encode_unrecorded(u: &UnrecordedProcess, out: &mut Vec<u8>) {
    for v in [u.pid, u.ppid, u.uid] {
        put(out, u64::from(v));
    }
    put(out, u.time_ns);
    put_signed(out, i64::from(u.errno));
    put_string(out, &u.name);
    put_string(out, &u.reason);
}

/// A process's events folded into sites.
fn encode_fold(fold: &Fold, out: &mut Vec<u8>) {
    put(out, u64::from(fold.process));
    put(out, fold.folded_to);
    put(out, fold.lost_below);
    put(out, fold.folded_events);
    put(out, fold.detail_from_ns);
    put(out, fold.sites.len() as u64);
    for site in &fold.sites {
        put_signed(out, site.device.map_or(-1, i64::from));
        put(out, u64::from(site.stack));
        put(out, site.allocations);
        put(out, site.frees);
        put(out, site.bytes);
        put(out, u64::from(site.tensors) | u64::from(site.host) << 1);
    }
}

/// The low points kept so far, with their sites.
fn encode_low_points_state(state: &LowPointsState, out: &mut Vec<u8>) {
    put(out, u64::from(state.process));
    put(out, u64::from(state.tensors));
    put(out, state.points.len() as u64);
    for point in &state.points {
        put(out, point.time_ns);
        put(out, point.sites.len() as u64);
        for site in &point.sites {
            put_device(out, site.device);
            put(out, u64::from(site.stack));
            put(out, site.bytes);
        }
    }
}

fn put_device(out: &mut Vec<u8>, device: Option<u8>) {
    put_signed(out, device.map_or(-1, i64::from));
}

fn encode_step_row(row: &StepRow, out: &mut Vec<u8>) {
    put(out, row.first);
    put(out, row.last);
    put(out, row.start_ns);
    put(out, row.end_ns);
    put(out, u64::from(row.complete));
    put(out, row.devices.len() as u64);
    for device in &row.devices {
        put_device(out, device.device);
        put(out, device.allocated_peak);
        put(out, device.allocated_end);
        put(out, device.reserved_end.map_or(0, |r| r + 1));
    }
}

fn encode_steps_state(state: &StepsState, out: &mut Vec<u8>) {
    put(out, u64::from(state.process));
    put(out, u64::from(state.marker_stack));
    put_device(out, state.marker_device);
    put(out, u64::from(state.tensors));
    put(out, state.started);
    put(out, state.stride);
    put(out, state.records.len() as u64);
    for row in &state.records {
        encode_step_row(row, out);
    }
    put(out, u64::from(state.open.is_some()));
    if let Some(row) = &state.open {
        encode_step_row(row, out);
    }
    put(out, state.ends.len() as u64);
    for &end in &state.ends {
        put(out, end);
    }
    put(out, state.series.len() as u64);
    for series in &state.series {
        put_device(out, series.device);
        put(out, u64::from(series.stack));
        put(out, series.bytes.len() as u64);
        for &bytes in &series.bytes {
            put(out, bytes);
        }
    }
}

fn encode_process_end(e: &ProcessEnd, out: &mut Vec<u8>) {
    put(out, u64::from(e.process));
    put_signed(out, e.exit_status.map_or(i64::MIN, i64::from));
    put(out, e.exit_time_ns.map_or(0, |t| t.saturating_add(1)));
    put(out, u64::from(e.still_running));
    for v in [
        e.unfinished_records,
        e.unknown_frees,
        e.registry_overflows,
        e.dropped_records,
    ] {
        put(out, v);
    }
    put_signed(out, e.drop_errno.map_or(0, i64::from));
    put(out, e.reserved_events);
    put(out, e.damaged_records);
    for number in e.ranks_at_end {
        put(out, number.map_or(0, |n| u64::from(n) + 1));
    }
    put_string(out, e.exec_into.as_deref().unwrap_or(""));
    put_signed(out, e.process_exit_status.map_or(i64::MIN, i64::from));
}

fn encode_symbols(process: u32, nodes: &[NodeSymbols], out: &mut Vec<u8>) {
    put(out, u64::from(process));
    put(out, nodes.len() as u64);
    for node in nodes {
        put(out, u64::from(node.node));
        put(out, node.frames.len() as u64);
        for frame in &node.frames {
            put(out, frame.function);
            put(out, frame.file);
            put(out, u64::from(frame.line));
            put(out, frame.module);
        }
    }
}

pub(crate) fn encode_events(process: u32, events: &[Event], out: &mut Vec<u8>) {
    put(out, u64::from(process));
    put(out, events.len() as u64);
    let Some(first) = events.first() else { return };
    put(out, first.seq);
    put(out, first.time_ns);
    let (mut seq, mut time, mut tid, mut address) = (first.seq.wrapping_sub(1), first.time_ns, 0u32, 0u64);
    for e in events {
        let seq_delta = e.seq.wrapping_sub(seq);
        let mut flags = 0u8;
        flags |= if seq_delta != 1 { HAS_SEQ_GAP } else { 0 };
        flags |= if e.tid != tid { HAS_TID } else { 0 };
        flags |= if e.device.is_some() { HAS_DEVICE } else { 0 };
        flags |= if e.stream != 0 { HAS_STREAM } else { 0 };
        flags |= if e.arg1 != 0 { HAS_ARG1 } else { 0 };
        flags |= if e.arg2 != 0 { HAS_ARG2 } else { 0 };
        flags |= if e.stack != 0 { HAS_STACK } else { 0 };
        out.push(flags);
        out.push(e.op as u8);
        out.push(e.kind as u8);
        out.push(e.api as u8);
        if flags & HAS_SEQ_GAP != 0 {
            put(out, seq_delta);
        }
        put_signed(out, e.time_ns.wrapping_sub(time) as i64);
        if flags & HAS_TID != 0 {
            put(out, u64::from(e.tid));
        }
        if let Some(device) = e.device {
            out.push(device);
        }
        put_signed(out, e.address.wrapping_sub(address) as i64);
        put(out, e.size);
        for (flag, value) in [
            (HAS_STREAM, e.stream),
            (HAS_ARG1, e.arg1),
            (HAS_ARG2, e.arg2),
            (HAS_STACK, u64::from(e.stack)),
        ] {
            if flags & flag != 0 {
                put(out, value);
            }
        }
        (seq, time, tid, address) = (e.seq, e.time_ns, e.tid, e.address);
    }
}
