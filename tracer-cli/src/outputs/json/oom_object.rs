//! A device's out-of-memory failures in `cudatrace report --json`: the
//! first ones in detail and every one counted by call site, so that a
//! program retrying in a loop (millions of failures) gives a report of a
//! few kilobytes; `--all-ooms` lists each.

use super::call_site_object::{largest_sites_json, stack_json};
use crate::outputs::every_failure;
use crate::system::terminal::Stdout;
use crate::system::write_failure::WriteFailure;
use cudatrace_analysis::{DeviceStats, Oom, OomSites, OOM_STATES_KEPT};
use cudatrace_analysis::{ProcessIndex, Summary, TraceIndex};
use serde_json::{json, Value};

/// Failures listed in detail per device without `--all-ooms`: those whose
/// state the summary keeps.
pub const OOMS_LISTED: usize = OOM_STATES_KEPT;

/// The `ooms`, `ooms_total`, `ooms_left_out` and `ooms_by_call_site` keys of
/// one device, added to `device`.
/// With `all`, the summary kept every failure (`OomsKept::EVERY`), and
/// `ooms` is a placeholder that [`write_with_every_oom`] fills in as the
/// report goes out.
pub fn add_ooms(index: &TraceIndex, info: &ProcessIndex, stats: &DeviceStats, all: bool, device: &mut Value) {
    let ooms = &stats.ooms;
    let listed = if all { ooms.len() } else { ooms.len().min(OOMS_LISTED) };
    let total = stats.oom_sites.total();
    device["ooms"] = if all {
        Value::String(every_failure::placeholder(stats))
    } else {
        Value::Array(ooms[..listed].iter().map(|o| oom_json(index, info, o)).collect())
    };
    device["ooms_total"] = json!(total);
    device["ooms_left_out"] = json!(total - listed as u64);
    device["ooms_by_call_site"] = Value::Array(by_call_site(index, info, &stats.oom_sites));
}

/// Writes `report`, made with every failure (`report --json --all-ooms`),
/// to `out`, each device's failures turned into JSON one at a time as they
/// are written (see [`every_failure`]): the same bytes as the report with
/// its lists in place. `false` when the reader went away.
pub fn write_with_every_oom(
    index: &TraceIndex,
    summary: &Summary,
    report: &Value,
    out: &mut Stdout,
) -> Result<bool, WriteFailure> {
    // In JSON a placeholder is a quoted string, its mark escaped.
    let lists = every_failure::lists(index, summary, |placeholder| Value::String(placeholder).to_string());
    let start = Value::String(every_failure::MARK.to_string()).to_string();
    let start = start.trim_end_matches('"');
    let length = |from: &str| from[1..].find('"').map_or(from.len(), |end| end + 2);
    every_failure::write_filled(
        &format!("{report}\n"),
        start,
        length,
        &lists,
        out,
        |(info, ooms), out| {
            if !out.write("[")? {
                return Ok(false);
            }
            for (n, oom) in ooms.iter().enumerate() {
                let comma = if n == 0 { "" } else { "," };
                if !out.write(comma)? || !out.write(&oom_json(index, info, oom).to_string())? {
                    return Ok(false);
                }
            }
            out.write("]")
        },
    )
}

/// One failure, with what held the device then where that was kept.
fn oom_json(index: &TraceIndex, info: &ProcessIndex, o: &Oom) -> Value {
    let held = o.held.as_ref().map(|held| {
        json!({
            "live_bytes": held.live_bytes,
            "live_by_call_site": largest_sites_json(index, info, &held.live_by_stack, "allocations"),
            "torch": held.tensors.as_ref().map(|(now, by_stack)| json!({
                "allocated_bytes": now.allocated,
                "reserved_bytes": now.reserved,
                "inactive_bytes": now.inactive(),
                "tensors_by_call_site": largest_sites_json(index, info, by_stack, "tensors"),
            })),
        })
    });
    json!({
        "requested_bytes": o.requested_bytes,
        "api": o.api.name(),
        "refused_by_limit": o.by_limit,
        "device_free": o.device_free,
        "device_total": o.device_total,
        "time_s": seconds(index, o.time_ns),
        "stack": stack_json(index, info, o.stack),
        "held": held,
    })
}

fn seconds(index: &TraceIndex, time_ns: u64) -> f64 {
    time_ns.saturating_sub(index.start_ns()) as f64 / 1e9
}

/// Every failure counted by (stack, entry point, refused by the limit),
/// most frequent first; ties in the order they first failed.
fn by_call_site(index: &TraceIndex, info: &ProcessIndex, sites: &OomSites) -> Vec<Value> {
    let sites = sites.most_frequent_first();
    sites
        .into_iter()
        .map(|site| {
            json!({
                "count": site.count,
                "api": site.api.name(),
                "refused_by_limit": site.by_limit,
                "smallest_requested_bytes": site.smallest,
                "largest_requested_bytes": site.largest,
                "first_time_s": seconds(index, site.first_ns),
                "last_time_s": seconds(index, site.last_ns),
                "stack": stack_json(index, info, site.stack),
            })
        })
        .collect()
}
