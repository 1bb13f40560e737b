//! A device's out-of-memory failures in `cudatrace report --json`: the
//! first ones in detail and every one counted by call site, so that a
//! program retrying in a loop (millions of failures) gives a report of a
//! few kilobytes; `--all-ooms` lists each.

use super::call_site_object::{largest_sites_json, stack_json};
use cudatrace_analysis::{Oom, OOM_STATES_KEPT};
use cudatrace_analysis::{ProcessIndex, TraceIndex};
use cudatrace_events::Api;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Failures listed in detail per device without `--all-ooms`: those whose
/// state the summary keeps.
pub const OOMS_LISTED: usize = OOM_STATES_KEPT;

/// The `ooms`, `ooms_total`, `ooms_left_out` and `ooms_by_call_site` keys of
/// one device, added to `device`.
pub fn add_ooms(index: &TraceIndex, info: &ProcessIndex, ooms: &[Oom], all: bool, device: &mut Value) {
    let listed = if all { ooms.len() } else { ooms.len().min(OOMS_LISTED) };
    let detailed: Vec<Value> = ooms[..listed].iter().map(|o| oom_json(index, info, o)).collect();
    device["ooms"] = Value::Array(detailed);
    device["ooms_total"] = json!(ooms.len());
    device["ooms_left_out"] = json!(ooms.len() - listed);
    device["ooms_by_call_site"] = Value::Array(by_call_site(index, info, ooms));
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

/// Failures with one call stack, entry point and cause.
struct Repeated {
    count: u64,
    smallest: u64,
    largest: u64,
    first_ns: u64,
    last_ns: u64,
}

/// Every failure counted by (stack, entry point, refused by the limit),
/// most frequent first; ties in the order they first failed.
fn by_call_site(index: &TraceIndex, info: &ProcessIndex, ooms: &[Oom]) -> Vec<Value> {
    let mut sites: HashMap<(u32, Api, bool), Repeated> = HashMap::new();
    for o in ooms {
        let site = sites.entry((o.stack, o.api, o.by_limit)).or_insert(Repeated {
            count: 0,
            smallest: u64::MAX,
            largest: 0,
            first_ns: o.time_ns,
            last_ns: o.time_ns,
        });
        site.count += 1;
        site.smallest = site.smallest.min(o.requested_bytes);
        site.largest = site.largest.max(o.requested_bytes);
        site.first_ns = site.first_ns.min(o.time_ns);
        site.last_ns = site.last_ns.max(o.time_ns);
    }
    let mut sites: Vec<((u32, Api, bool), Repeated)> = sites.into_iter().collect();
    sites.sort_by_key(|(_, r)| (std::cmp::Reverse(r.count), r.first_ns));
    sites
        .into_iter()
        .map(|((stack, api, by_limit), r)| {
            json!({
                "count": r.count,
                "api": api.name(),
                "refused_by_limit": by_limit,
                "smallest_requested_bytes": r.smallest,
                "largest_requested_bytes": r.largest,
                "first_time_s": seconds(index, r.first_ns),
                "last_time_s": seconds(index, r.last_ns),
                "stack": stack_json(index, info, stack),
            })
        })
        .collect()
}
