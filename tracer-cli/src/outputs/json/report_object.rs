//! `cudatrace report --json`: the report as one JSON object (the documented
//! shape; keys may be added, never removed).

use super::call_site_object::{sites_json, stack_json};
use crate::wording::damage_text;
use crate::wording::tensor_status_line;
use cudatrace_analysis::{
    growing_sites, tensors_stopped_midway, Allocation, Measured, ProcessIndex, ProcessSummary, RankTable, Summary,
    TraceIndex,
};
use serde_json::{json, Value};

/// Allocations live at exit that a device lists: a program that leaks in
/// a loop holds millions, each of them counted by call site in
/// `live_at_exit_by_call_site` (and `cudatrace export` has every one).
const LIVE_LISTED: usize = 10_000;

/// The largest [`LIVE_LISTED`] of `live` (sorted by address), by address.
fn listed_live<'a>(live: &[&'a Allocation]) -> Vec<&'a Allocation> {
    let mut listed = live.to_vec();
    if listed.len() > LIVE_LISTED {
        listed.select_nth_unstable_by_key(LIVE_LISTED - 1, |a| (std::cmp::Reverse(a.size), a.address));
        listed.truncate(LIVE_LISTED);
        listed.sort_by_key(|a| a.address);
    }
    listed
}

/// The process's devices: allocations, peak, live at exit and OOMs.
fn devices_json(index: &TraceIndex, info: &ProcessIndex, process: &ProcessSummary, all_ooms: bool) -> Vec<Value> {
    let live = process.live_at_exit();
    process
        .devices
        .iter()
        .map(|(&device, stats)| {
            let live_here = live.get(&device).map_or(&[][..], Vec::as_slice);
            let live_list: Vec<Value> = listed_live(live_here)
                .iter()
                .map(|a| json!({"address": a.address, "size": a.size, "api": a.api.name(), "kind": a.kind.name(), "stack": stack_json(index, info, a.stack)}))
                .collect();
            let left_out = live_here.len() - live_list.len();
            let mut value = json!({
                "device": device.json(),
                "allocations": stats.allocations,
                "frees": stats.frees,
                "bytes_allocated": stats.bytes_allocated,
                "peak_bytes": stats.peak,
                "live_bytes_at_exit": stats.current,
                "live_at_exit": live_list,
                "live_at_exit_total": live_here.len(),
                "live_at_exit_left_out": left_out,
                "live_at_exit_by_call_site": sites_json(index, info, &stats.live_by_stack, "allocations"),
                "peak_by_call_site": sites_json(index, info, &stats.peak_by_stack, "allocations"),
            });
            super::oom_object::add_ooms(index, info, stats, all_ooms, &mut value);
            value
        })
        .collect()
}

/// PyTorch's tensors, per device.
fn tensor_devices_json(index: &TraceIndex, info: &ProcessIndex, process: &ProcessSummary) -> Vec<Value> {
    process
        .tensors
        .devices
        .iter()
        .map(|(&device, stats)| {
            let fragmentation: Vec<Value> = ["small", "large"]
                .iter()
                .zip(stats.fragmentation())
                .map(|(class, f)| json!({"class": class, "segments": f.segments, "reserved_bytes": f.reserved, "inactive_bytes": f.inactive}))
                .collect();
            let timeline: Vec<Value> = stats
                .timeline
                .iter()
                .map(|t| json!([t.time_ns, t.allocated, t.reserved]))
                .collect();
            json!({
                "device": device.json(),
                "allocations": stats.allocations,
                "frees": stats.frees,
                "ooms": stats.ooms,
                "allocated_bytes_at_exit": stats.now.allocated,
                "reserved_bytes_at_exit": stats.now.reserved,
                "inactive_bytes_at_exit": stats.now.inactive(),
                "allocated_peak_bytes": stats.allocated_peak.allocated,
                "reserved_peak_bytes": stats.reserved_peak,
                "live_tensors_at_exit": stats.live_tensors().len(),
                "live_at_exit_by_call_site": sites_json(index, info, &stats.live_by_stack, "tensors"),
                "allocated_peak_by_call_site": sites_json(index, info, &stats.peak_by_stack, "tensors"),
                "fragmentation_at_exit": fragmentation,
                "timeline_time_allocated_reserved": timeline,
            })
        })
        .collect()
}

/// The process's steps (each, or each range of merged steps) with their
/// figures per device, how they were found, and the call sites that keep
/// growing; `null` steps where none were found.
fn steps_json(index: &TraceIndex, info: &ProcessIndex, process: &ProcessSummary) -> (Value, Value) {
    let growing: Vec<Value> = growing_sites(index, info, process)
        .iter()
        .map(|g| {
            let mut site = json!({
                "device": g.device.json(),
                "call_site": g.call_site,
                "live_bytes_first_step": g.live_bytes_first_step,
                "live_bytes_last_step": g.live_bytes_last_step,
                "stack": stack_json(index, info, g.stack),
            });
            match g.measured {
                Measured::Steps => {
                    site["measured_on"] = json!("steps");
                    site["bytes_per_step"] = json!(g.bytes_per_step);
                    site["steps"] = json!(g.steps);
                    site["first_step"] = json!(g.first_step);
                    site["last_step"] = json!(g.last_step);
                }
                Measured::LowPoints { part_ns } => {
                    site["measured_on"] = json!("low points");
                    site["bytes_per_second"] = json!((g.bytes_per_step as f64 * 1e9 / part_ns.max(1) as f64).round());
                    site["over_s"] = json!((part_ns as f64 * g.steps as f64) / 1e9);
                }
            }
            site
        })
        .collect();
    let growing = if process.steps.is_none() && process.low_points.is_none() {
        Value::Null
    } else {
        json!(growing)
    };
    let Some(steps) = &process.steps else {
        return (Value::Null, growing);
    };
    let seconds = |ns: u64| ns.saturating_sub(index.start_ns()) as f64 / 1e9;
    let records: Vec<Value> = steps
        .records
        .iter()
        .map(|r| {
            let devices: Vec<Value> = r
                .devices
                .iter()
                .map(|(device, f)| {
                    json!({
                        "device": device.json(),
                        "allocated_peak_bytes": f.allocated_peak,
                        "allocated_bytes_at_end": f.allocated_end,
                        "reserved_bytes_at_end": f.reserved_end,
                    })
                })
                .collect();
            json!({
                "first": r.first,
                "last": r.last,
                "start_s": seconds(r.start_ns),
                "duration_s": (r.end_ns - r.start_ns) as f64 / 1e9,
                "complete": r.complete,
                "devices": devices,
            })
        })
        .collect();
    let found = json!({
        "count": steps.marker.steps,
        "measured_on": if steps.marker.tensors { "tensors" } else { "driver allocations" },
        "marker": stack_json(index, info, steps.marker.stack),
        "steps": records,
    });
    (found, growing)
}

fn process_json(index: &TraceIndex, info: &ProcessIndex, process: &ProcessSummary, all_ooms: bool) -> Value {
    let start = &info.start;
    let end = info.end.clone().unwrap_or_default();
    let devices = devices_json(index, info, process, all_ooms);
    let tensor_devices = tensor_devices_json(index, info, process);
    let (steps, growing) = steps_json(index, info, process);
    let exit_time = end
        .exit_time_ns
        .filter(|&t| t >= start.start_monotonic_ns)
        .map(|t| start.start_realtime_ns + (t - start.start_monotonic_ns));
    json!({
        "pid": start.pid,
        "host": start.place.host,
        "rank": start.place.rank,
        "local_rank": start.place.local_rank,
        "world_size": start.place.world_size,
        "start_time_ns": start.start_realtime_ns,
        "exit_time_ns": exit_time,
        "ppid": start.ppid,
        "image": start.image,
        "argv": start.argv,
        "exit_status": end.exit_status,
        "exec_into": end.exec_into,
        "process_exit_status": end.process_exit_status,
        "still_running": end.still_running,
        "events": process.memory.events,
        "folded_events": info.fold.as_ref().map_or(0, |f| f.folded_events),
        "lost_events": process.lost_events(info.end.as_ref().map(|e| e.reserved_events)),
        "dropped_events": end.dropped_records,
        "drop_reason": end.drop_errno.map(crate::system::errno::describe),
        "unfinished_records": end.unfinished_records,
        "damaged_records": end.damaged_records,
        "unknown_frees": end.unknown_frees,
        "reused_without_free": process.memory.reused_without_free,
        "freed_with_driver": {
            "allocations": process.memory.freed_with_driver.0,
            "bytes": process.memory.freed_with_driver.1,
        },
        "growing": growing,
        "steps": steps,
        "low_points": process.low_points.as_ref().map(|low| json!({
            "points": low.points(),
            "folded_points": low.older_points(),
            // Null where every point was kept by folds: no part here.
            "part_s": (low.own_points() > 0).then(|| low.part_ns() as f64 / 1e9),
        })),
        "devices": devices,
        "tensors": {
            "status": tensor_status_line(info),
            // Tracking stopped after recording: the live-at-exit figures are not an end state.
            "stopped_midway": tensors_stopped_midway(info),
            "actions": info.tensor_actions,
            "devices": tensor_devices,
        },
        "host_pinned": {
            "allocations": process.host.allocations,
            "frees": process.host.frees,
            "peak_bytes": process.host.peak,
            "live_bytes_at_exit": process.host.current,
        },
    })
}

/// The whole report as JSON; with `all_ooms`, every out-of-memory failure
/// in detail, not only each device's first ones.
pub fn report(index: &TraceIndex, summary: &Summary, all_ooms: bool) -> Value {
    let processes: Vec<Value> = index
        .processes
        .iter()
        .zip(&summary.processes)
        .zip(&summary.footprints)
        .map(|((info, process), footprints)| {
            let mut value = process_json(index, info, process, all_ooms);
            value["footprint"] = footprints.iter().map(super::footprint_object::footprint_json).collect();
            value
        })
        .collect();
    let refused: Vec<Value> = index
        .refused
        .iter()
        .map(|r| json!({"path": r.path, "uid": r.uid, "reason": r.reason}))
        .collect();
    let damaged_spools: Vec<Value> = index
        .damaged_spools
        .iter()
        .map(|d| json!({"pid": d.pid, "image": d.image, "path": d.path, "reason": d.reason}))
        .collect();
    let skipped: Vec<Value> = index.skipped.iter().map(|d| json!(damage_text(d))).collect();
    let dropped: u64 = index
        .processes
        .iter()
        .filter_map(|p| p.end.as_ref())
        .map(|end| end.dropped_records)
        .sum();
    let seconds = |ns: u64| ns.saturating_sub(index.start_ns()) as f64 / 1e9;
    json!({
        "format_version": index.header.as_ref().map_or(cudatrace_trace::FORMAT_VERSION, |h| h.format_version),
        "lost_events": summary.lost_events(index),
        "dropped_events": dropped,
        "complete": index.complete,
        "recording_paused": cudatrace_analysis::paused_spans(index)
            .iter()
            .map(|span| json!({
                "start_s": seconds(span.start_ns),
                "end_s": span.end_ns.map(seconds),
            }))
            .collect::<Vec<_>>(),
        "folded": index.detail_from_ns().map(|from| json!({
            "detail_from_s": seconds(from),
            "end_s": seconds(index.end_ns().max(from)),
            "folded_events": index.folded_events(),
        })),
        "damage": index.damage.as_ref().map(damage_text),
        "skipped_damage": skipped,
        "refused_spools": refused,
        "damaged_spools": damaged_spools,
        "unrecorded_processes": index.unrecorded.iter().map(unrecorded_json).collect::<Vec<_>>(),
        "forked_without_spool": cudatrace_analysis::silent_children(index).iter().map(silent_child_json).collect::<Vec<_>>(),
        "memory_limit": memory_limit_json(index, summary),
        "ranks": ranks_json(index, summary),
        "processes": processes,
    })
}

/// Every rank in one view (see [`RankTable`]): `null` when the trace holds
/// only one process and device that used a GPU.
fn ranks_json(index: &TraceIndex, summary: &Summary) -> Value {
    let Some(table) = RankTable::of(index, summary) else {
        return Value::Null;
    };
    let seconds = |ns: u64| ns.saturating_sub(index.start_ns()) as f64 / 1e9;
    let rows: Vec<Value> = table
        .rows
        .iter()
        .map(|row| {
            json!({
                "host": row.place.host,
                "rank": row.place.rank,
                "local_rank": row.place.local_rank,
                "world_size": row.place.world_size,
                "pid": row.pid,
                "device": row.device,
                "peak_bytes": row.peak_bytes,
                "peak_s": seconds(row.peak_time_ns),
                "peak_is_footprint": row.peak_is_footprint,
                "allocated_peak_bytes": row.allocated_peak,
                "reserved_peak_bytes": row.reserved_peak,
                "live_at_exit_bytes": row.live_at_exit,
                "ooms": row.ooms,
                "explained_percent": row.explained_percent,
            })
        })
        .collect();
    let outlier = table.outlier.as_ref().map(|o| {
        json!({
            "row": o.row,
            "median_row": o.median_row,
            "above_median_bytes": o.above_median,
            "percent": o.percent,
            "steps": o.step.map(|(first, last)| json!([first, last])),
            "call_site": o.site.as_ref().map(|(name, _)| name),
            "call_site_more_bytes": o.site.as_ref().map(|(_, more)| more),
        })
    });
    json!({"rows": rows, "outlier": outlier})
}

/// The memory limit's verdict per process and device (`run --limit`),
/// with its refusals (each of the first 10,000 a device failed, then the
/// first and latest past them; `refusals_total` counts every one); an
/// empty list when nothing ran under a limit.
/// `fits` is null where it is not known (PyTorch recovered from the
/// refusals, but how the process ended was not recorded).
fn memory_limit_json(index: &TraceIndex, summary: &Summary) -> Value {
    let seconds = |ns: u64| ns.saturating_sub(index.start_ns()) as f64 / 1e9;
    cudatrace_analysis::limit_verdicts(index, summary)
        .iter()
        .map(|verdict| {
            let info = &index.processes[verdict.process];
            json!({
                "pid": info.start.pid,
                "device": match verdict.device { cudatrace_analysis::DeviceKey::Gpu(d) => Some(d), _ => None },
                "limit_bytes": verdict.limit,
                "fits": match verdict.outcome() {
                    cudatrace_analysis::LimitOutcome::Fits => Some(true),
                    cudatrace_analysis::LimitOutcome::DidNotFit => Some(false),
                    cudatrace_analysis::LimitOutcome::NotKnown => None,
                },
                "recovered_by_pytorch": verdict.recovered_by_pytorch,
                "exit_status": match verdict.ending {
                    cudatrace_analysis::ProcessEnding::Status(status) => Some(status),
                    _ => None,
                },
                "failed_library": verdict.failed_library,
                "kept_alone": verdict.kept_alone.map(cudatrace_events::measures::limit_ledger::reason),
                "verdict": crate::wording::limit_lines::verdict_line(index, verdict),
                "peak_bytes": verdict.peak_bytes,
                "peak_s": seconds(verdict.peak_time_ns),
                "peak_parts": verdict.peak_parts.iter().map(|(name, bytes)| json!({"name": name, "bytes": bytes})).collect::<Vec<_>>(),
                "refusals_total": verdict.refused_count,
                "refusals": verdict.refused.iter().map(|o| json!({
                    "time_s": seconds(o.time_ns),
                    "api": o.api.name(),
                    "requested_bytes": o.requested_bytes,
                    "left_bytes": o.device_free,
                    "site": cudatrace_analysis::site_name(&index.frames(info, o.stack)),
                    "stack": stack_json(index, info, o.stack),
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// A silent child, as the JSON report shows it.
pub fn silent_child_json(child: &cudatrace_analysis::SilentChild) -> serde_json::Value {
    serde_json::json!({ "pid": child.pid, "ppid": child.ppid, "time_ns": child.time_ns })
}

/// A process that could not record, as `dump` and the JSON report show it.
pub fn unrecorded_json(process: &cudatrace_trace::UnrecordedProcess) -> serde_json::Value {
    serde_json::json!({
        "pid": process.pid,
        "ppid": process.ppid,
        "uid": process.uid,
        "time_ns": process.time_ns,
        "errno": process.errno,
        "name": process.name,
        "reason": process.reason,
    })
}
