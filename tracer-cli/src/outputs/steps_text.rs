//! The report's lines on a process's steps: the call sites that keep
//! growing from one step to the next (or from one low point of its memory
//! curve to the next), which open the report, and the step table per
//! device.
//!
//! A long run's table shows its first and last steps and the steps around
//! its peak and each out-of-memory failure; the steps between are one line
//! each, with their ranges of figures.

use crate::wording::{bytes, count, device_label, duration, signed_bytes};
use cudatrace_analysis::{
    DeviceKey, GrowingSite, Measured, ProcessSummary, StepRecord, Steps, TraceIndex, FEWEST_RISES,
};
use std::collections::BTreeSet;

/// Steps shown at each end of a long table.
const STEPS_AT_EACH_END: usize = 5;
/// Steps shown on each side of the peak's and of each failure's step.
const STEPS_AROUND: usize = 1;
/// A table of at most this many steps is shown whole.
const STEPS_SHOWN_WHOLE: usize = 20;
/// A long table shows the steps around this many of a device's first
/// out-of-memory failures (the report details as many).
pub const OOMS_WITH_STEPS_AROUND: usize = 10;

/// A growing call site's figures in words: its rate ("+8.0 MiB a step",
/// or "+8.0 MiB a second" at low points), the points it was measured
/// between ("from step 1 to step 9", "over 1.27 s of low points") and its
/// bytes at both ("40.0 MiB to 104.0 MiB").
pub fn growing_figures(site: &GrowingSite) -> [String; 3] {
    let bytes_then_now = format!(
        "{} to {}",
        bytes(site.live_bytes_first_step),
        bytes(site.live_bytes_last_step)
    );
    match site.measured {
        Measured::Steps => [
            format!("{} a step", signed_bytes(site.bytes_per_step as i128)),
            format!(
                "from the end of step {} to the end of step {}",
                site.first_step, site.last_step
            ),
            bytes_then_now,
        ],
        Measured::LowPoints { part_ns } => {
            // A second where the span is under two minutes: a minute's
            // rate would stretch it past what was seen.
            let span = part_ns.saturating_mul(site.steps);
            let (unit_ns, unit) = if span < 120_000_000_000 {
                (1_000_000_000u128, "second")
            } else {
                (60_000_000_000, "minute")
            };
            let rate = (site.bytes_per_step as u128 * unit_ns / part_ns.max(1) as u128) as i128;
            [
                format!("{} a {unit}", signed_bytes(rate)),
                format!("over {} of low points", duration(span)),
                bytes_then_now,
            ]
        }
    }
}

/// One growing call site's line: "growing: train.py:20 <module> +8.0 MiB a
/// step from the end of step 1 to the end of step 9 (40.0 MiB to 104.0 MiB)".
pub fn growing_line(site: &GrowingSite, several_devices: bool) -> String {
    let on = if several_devices {
        format!(" on {}", device_label(site.device))
    } else {
        String::new()
    };
    let [rate, over, then_now] = growing_figures(site);
    format!("  growing{on}: {} {rate} {over} ({then_now})\n", site.call_site)
}

/// The heading of a process's growth: its steps, or that it has none and
/// its low points stand in; and whether anything grows.
pub fn growth_heading(process_name: &str, process: &ProcessSummary, anything_grows: bool) -> Option<String> {
    let steps_said = |steps: &Steps| count(steps.marker.steps, "step", "steps");
    let measured = if let Some(steps) = &process.steps {
        let ends = steps.series_ends();
        if ends.len() <= FEWEST_RISES {
            return Some(format!(
                "{process_name}: {}: too few to judge growth (it needs the ends of {} steps; the last step has no end)\n",
                steps_said(steps),
                FEWEST_RISES + 1
            ));
        }
        let (first, last) = (ends[0], ends[ends.len() - 1]);
        let spaced = match ends {
            [first, second, ..] if second - first > 1 => format!(", one every {} steps", second - first),
            _ => String::new(),
        };
        format!(
            "{}; growth measured at the ends of steps {first} to {last}{spaced} (the last step has no end)",
            steps_said(steps)
        )
    } else if let Some(low_points) = process
        .low_points
        .as_ref()
        .filter(|l| l.older_points() > 0 && l.own_points() == 0)
    {
        format!(
            "no repeating loop found; growth measured at {} low points of its memory curve, all kept by folds of its older part (it allocated nothing in the detailed span)",
            low_points.points()
        )
    } else if let Some(low_points) = process.low_points.as_ref().filter(|l| l.older_points() > 0) {
        format!(
            "no repeating loop found; growth measured at {} low points of its memory curve over the whole run: {} kept by folds of its older part, then the lowest moment of each of {} equal slices of the detailed span ({} each)",
            low_points.points(),
            low_points.older_points(),
            low_points.points() - low_points.older_points(),
            duration(low_points.part_ns())
        )
    } else if let Some(low_points) = &process.low_points {
        format!(
            "no repeating loop found; growth measured at the lowest moment of each of {} equal slices of its run ({} each)",
            low_points.points(),
            duration(low_points.part_ns())
        )
    } else {
        return None;
    };
    let verdict = if anything_grows { "" } else { "; nothing grows" };
    Some(format!("{process_name}: {measured}{verdict}\n"))
}

/// The step tables of a process: how its steps were found, then per device
/// its steps.
pub fn step_tables_text(index: &TraceIndex, steps: &Steps, process: &ProcessSummary, marker_site: &str) -> String {
    let what = if steps.marker.tensors { "tensor" } else { "allocation" };
    let mut out = format!(
        "  {}, found by the {what} at {marker_site} that starts each\n",
        count(steps.marker.steps, "step", "steps")
    );
    let devices: BTreeSet<DeviceKey> = steps.records.iter().flat_map(|r| r.devices.keys().copied()).collect();
    for device in devices {
        out += &device_table(index, steps, process, device);
    }
    out
}

fn device_table(index: &TraceIndex, steps: &Steps, process: &ProcessSummary, device: DeviceKey) -> String {
    let records = &steps.records;
    let (allocated, reserved) = if steps.marker.tensors {
        ("allocated", "reserved")
    } else {
        ("in use", "")
    };
    let heading = format!(
        "    {:>9} {:>10} {:>10} {:>14} {:>12} {:>12} {:>12}",
        "step",
        "start",
        "duration",
        format!("{allocated} peak"),
        "at end",
        "change",
        reserved
    );
    let mut out = format!("    steps on {}:\n{}\n", device_label(device), heading.trim_end());
    let shown = shown_records(records, process, device);
    let mut previous_shown: Option<usize> = None;
    for (at, record) in records.iter().enumerate() {
        if !shown.contains(&at) {
            continue;
        }
        let skipped_from = previous_shown.map_or(0, |p| p + 1);
        if at > skipped_from {
            out += &skipped_line(&records[skipped_from..at], device);
        }
        previous_shown = Some(at);
        out += &row(index, records, at, record, device);
    }
    let after = previous_shown.map_or(0, |p| p + 1);
    if after < records.len() {
        out += &skipped_line(&records[after..], device);
    }
    out
}

/// Which records a table shows: all of a short one; of a long one the ends,
/// and around the device's allocated peak and its failures.
fn shown_records(records: &[StepRecord], process: &ProcessSummary, device: DeviceKey) -> BTreeSet<usize> {
    let all = 0..records.len();
    if records.len() <= STEPS_SHOWN_WHOLE {
        return all.collect();
    }
    let mut shown: BTreeSet<usize> = all.clone().take(STEPS_AT_EACH_END).collect();
    shown.extend(all.clone().skip(records.len() - STEPS_AT_EACH_END));
    let peak = |r: &StepRecord| r.devices.get(&device).map_or(0, |f| f.allocated_peak);
    let mut around: Vec<usize> = Vec::new();
    if let Some(at) = all
        .clone()
        .max_by_key(|&at| (peak(&records[at]), std::cmp::Reverse(at)))
    {
        around.push(at);
    }
    let ooms = process
        .devices
        .get(&device)
        .map(|d| d.ooms.as_slice())
        .unwrap_or_default();
    // Around the first failures only, as many as the report details: a run
    // that fails every step would otherwise list every step.
    for oom in ooms.iter().take(OOMS_WITH_STEPS_AROUND) {
        if let Some(at) = records
            .iter()
            .position(|r| r.start_ns <= oom.time_ns && oom.time_ns <= r.end_ns)
        {
            around.push(at);
        }
    }
    for at in around {
        shown.extend(at.saturating_sub(STEPS_AROUND)..(at + STEPS_AROUND + 1).min(records.len()));
    }
    shown
}

fn step_number(record: &StepRecord) -> String {
    if record.first == record.last {
        record.first.to_string()
    } else {
        format!("{}-{}", record.first, record.last)
    }
}

fn row(index: &TraceIndex, records: &[StepRecord], at: usize, record: &StepRecord, device: DeviceKey) -> String {
    let Some(figures) = record.devices.get(&device) else {
        return String::new();
    };
    let change = match at.checked_sub(1).and_then(|p| records[p].devices.get(&device)) {
        Some(before) => signed_bytes(figures.allocated_end as i128 - before.allocated_end as i128),
        None => String::new(),
    };
    let reserved = figures.reserved_end.map(bytes).unwrap_or_default();
    let last = if record.complete { "" } else { " (last)" };
    let row = format!(
        "    {:>9} {:>10} {:>10} {:>14} {:>12} {:>12} {:>12}",
        step_number(record),
        duration(record.start_ns.saturating_sub(index.start_ns())),
        duration(record.end_ns - record.start_ns),
        bytes(figures.allocated_peak),
        bytes(figures.allocated_end),
        change,
        reserved
    );
    format!("{}{last}\n", row.trim_end())
}

/// One line for steps left out of a long table: their ranges of figures.
fn skipped_line(records: &[StepRecord], device: DeviceKey) -> String {
    let figures: Vec<_> = records.iter().filter_map(|r| r.devices.get(&device)).collect();
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return String::new();
    };
    let range = |values: Vec<u64>| {
        let (low, high) = (
            values.iter().copied().min().unwrap_or(0),
            values.iter().copied().max().unwrap_or(0),
        );
        if low == high {
            bytes(low)
        } else {
            format!("{} to {}", bytes(low), bytes(high))
        }
    };
    format!(
        "    ... steps {} to {}: peak {}, at end {}\n",
        first.first,
        last.last,
        range(figures.iter().map(|f| f.allocated_peak).collect()),
        range(figures.iter().map(|f| f.allocated_end).collect())
    )
}
