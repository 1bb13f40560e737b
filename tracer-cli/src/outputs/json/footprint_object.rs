//! The footprint table's figures as JSON, under each process's
//! `footprint` in `cudatrace report --json`.

use crate::wording::note_text;
use cudatrace_analysis::{Breakdown, DeviceFootprint};
use serde_json::{json, Value};

fn breakdown_json(breakdown: &Breakdown) -> Value {
    let owners: Vec<Value> = breakdown
        .owners
        .iter()
        .map(|(owner, bytes)| json!({"owner": owner, "bytes": bytes}))
        .collect();
    json!({
        "reference_bytes": breakdown.reference.bytes,
        "reference_source": breakdown.reference.source.name(),
        "time_ns": breakdown.reference.time_ns,
        "reading_bytes": breakdown.reading.bytes,
        "reading_time_ns": breakdown.reading.time_ns,
        "owners": owners,
        "pools_beyond_live_bytes": breakdown.pools,
        "graph_bytes": breakdown.graphs,
        "context_bytes": breakdown.context,
        "modules_and_kernels_bytes": breakdown.modules,
        "streams_and_events_bytes": breakdown.streams_and_events,
        "graph_executables_bytes": breakdown.graph_executables,
        "unexplained_bytes": breakdown.unexplained(),
        "explained_percent": (breakdown.explained_percent() * 10.0).round() / 10.0,
    })
}

/// One process's footprint on one device as JSON: the same figures as
/// the report's table.
pub fn footprint_json(footprint: &DeviceFootprint) -> Value {
    let limits: Vec<Value> = footprint
        .limits
        .iter()
        .map(|&(which, value)| json!({"limit": cudatrace_events::measures::limit::name(which), "bytes": value}))
        .collect();
    json!({
        "device": footprint.device,
        "name": footprint.info.as_ref().map(|i| i.name.clone()),
        "uuid": footprint.info.as_ref().map(|i| i.uuid_text()),
        "total_bytes": footprint.info.as_ref().map(|i| i.total_bytes),
        "at_exit": footprint.at_exit.as_ref().map(breakdown_json),
        "at_peak": footprint.at_peak.as_ref().map(breakdown_json),
        "limits": limits,
        "context_by_nvml_bytes": footprint.context_by_nvml,
        "notes": footprint.notes.iter().map(note_text).collect::<Vec<String>>(),
    })
}
