//! The table `cudatrace report` opens with: for each process and device,
//! where the driver-used bytes went, at exit (what was live then) and at the
//! footprint's peak, in text and in HTML, with the same rows (its JSON is
//! `outputs::json::footprint_object`). Each column
//! says which reading its driver-used figure stands on.

use crate::wording::bytes;
use crate::wording::category_name;
use crate::wording::{limit_text, note_text};
use cudatrace_analysis::Category;
use cudatrace_analysis::{Breakdown, DeviceFootprint, ProcessIndex, ReferenceSource, TensorStats};

/// Owners shown by name; the rest are summed into one row.
const OWNERS_SHOWN: usize = 8;

/// One row of the table: a name, and bytes at exit and at the peak.
struct Row {
    name: String,
    at_exit: Option<i64>,
    at_peak: Option<i64>,
}

fn owner_bytes(breakdown: Option<&Breakdown>, owner: &str) -> Option<i64> {
    breakdown.map(|b| {
        b.owners
            .iter()
            .find(|(name, _)| name == owner)
            .map_or(0, |(_, bytes)| *bytes as i64)
    })
}

fn context_name(footprint: &DeviceFootprint) -> String {
    let mut seen = std::collections::BTreeMap::new();
    for &(which, value) in &footprint.limits {
        seen.insert(which, value);
    }
    if seen.is_empty() {
        return "context".into();
    }
    let limits: Vec<String> = seen.iter().map(|(&which, &value)| limit_text(which, value)).collect();
    format!("context ({})", limits.join(", "))
}

fn rows(footprint: &DeviceFootprint) -> Vec<Row> {
    let (exit, peak) = (footprint.at_exit.as_ref(), footprint.at_peak.as_ref());
    let owners = footprint.owners_by_size();
    let mut rows: Vec<Row> = owners
        .iter()
        .take(OWNERS_SHOWN)
        .map(|(name, _)| Row {
            name: name.clone(),
            at_exit: owner_bytes(exit, name),
            at_peak: owner_bytes(peak, name),
        })
        .collect();
    if owners.len() > OWNERS_SHOWN {
        let rest = &owners[OWNERS_SHOWN..];
        let sum =
            |b: Option<&Breakdown>| b.map(|_| rest.iter().map(|(name, _)| owner_bytes(b, name).unwrap_or(0)).sum());
        rows.push(Row {
            name: format!("{} other owners", rest.len()),
            at_exit: sum(exit),
            at_peak: sum(peak),
        });
    }
    for category in Category::ALL {
        rows.push(Row {
            name: match category {
                Category::Context => context_name(footprint),
                other => category_name(other).to_string(),
            },
            at_exit: exit.map(|b| b.category(category)),
            at_peak: peak.map(|b| b.category(category)),
        });
    }
    rows
}

fn signed_bytes(value: i64) -> String {
    if value < 0 {
        format!("-{}", bytes(value.unsigned_abs()))
    } else {
        bytes(value as u64)
    }
}

fn cell(value: Option<i64>, of: Option<&Breakdown>) -> String {
    match (value, of) {
        (Some(value), Some(b)) if b.reference.bytes > 0 => format!(
            "{:>11} {:>5.1}%",
            signed_bytes(value),
            value as f64 * 100.0 / b.reference.bytes as f64
        ),
        (Some(value), _) => format!("{:>11}       ", signed_bytes(value)),
        (None, _) => format!("{:>11}       ", "-"),
    }
}

/// `device 0 (NVIDIA H100, GPU-…)`, leaving out what is not known.
pub fn device_name(device: u8, info: Option<&cudatrace_events::measures::DeviceInfo>) -> String {
    let known: Vec<String> = info
        .into_iter()
        .flat_map(|info| [info.name.trim().to_string(), info.uuid_text()])
        .filter(|part| !part.is_empty() && !part.trim_start_matches("GPU-").chars().all(|c| c == '0' || c == '-'))
        .collect();
    if known.is_empty() {
        format!("device {device}")
    } else {
        format!("device {device} ({})", known.join(", "))
    }
}

fn device_title(process: &ProcessIndex, footprint: &DeviceFootprint) -> String {
    format!(
        "pid {} on {}",
        process.start.pid,
        device_name(footprint.device, footprint.info.as_ref())
    )
}

/// Seconds since the trace's start: `12.345 s`.
pub fn seconds(time_ns: u64, origin_ns: u64) -> String {
    format!("{:.3} s", time_ns.saturating_sub(origin_ns) as f64 / 1e9)
}

/// What a column's driver-used figure stands on, in words.
fn reading_text(what: &str, breakdown: &Breakdown, origin_ns: u64) -> String {
    let reading = breakdown.reading;
    let source = match reading.source {
        ReferenceSource::Nvml => "NVML's reading",
        ReferenceSource::DeviceBound => "the device's used memory as read",
    };
    let moment = seconds(breakdown.reference.time_ns, origin_ns);
    let delta = breakdown.reference.bytes as i64 - reading.bytes as i64;
    // ", plus 64.0 MiB measured since", or nothing when nothing changed.
    let change = |tail: &str| {
        if delta == 0 {
            String::new()
        } else {
            let sign = if delta > 0 { "plus" } else { "less" };
            format!(", {sign} {} measured {tail}", bytes(delta.unsigned_abs()))
        }
    };
    if reading.time_ns == breakdown.reference.time_ns {
        format!("{what} {moment}: driver-used is {source} then")
    } else if reading.time_ns > breakdown.reference.time_ns {
        // The next reading, and what was measured to change between the
        // moment and it (freed after the moment: added back).
        format!(
            "{what} {moment}: driver-used is {source} after it, at {}, {}{}",
            seconds(reading.time_ns, origin_ns),
            bytes(reading.bytes),
            change("to change in between")
        )
    } else {
        format!(
            "{what} {moment}: driver-used is {source} at {}, {}{}",
            seconds(reading.time_ns, origin_ns),
            bytes(reading.bytes),
            change("since")
        )
    }
}

fn reference_name(breakdown: Option<&Breakdown>) -> &'static str {
    match breakdown.map(|b| b.reference.source) {
        Some(cudatrace_analysis::ReferenceSource::Nvml) => "driver-used (NVML, this process)",
        Some(cudatrace_analysis::ReferenceSource::DeviceBound) => "driver-used (whole device: a bound)",
        None => "driver-used",
    }
}

/// The reference row, then the owners' and the categories' rows.
fn all_rows(footprint: &DeviceFootprint) -> Vec<Row> {
    let (exit, peak) = (footprint.at_exit.as_ref(), footprint.at_peak.as_ref());
    let reference = |b: Option<&Breakdown>| b.map(|b| b.reference.bytes as i64);
    let mut lines = vec![Row {
        name: reference_name(exit.or(peak)).into(),
        at_exit: reference(exit),
        at_peak: reference(peak),
    }];
    lines.extend(rows(footprint));
    lines
}

/// The lines under the rows: how much is explained, which reading each
/// column stands on, and PyTorch's figures where `tensors` were recorded.
fn summary_lines(footprint: &DeviceFootprint, origin_ns: u64, tensors: Option<&TensorStats>) -> Vec<String> {
    let (exit, peak) = (footprint.at_exit.as_ref(), footprint.at_peak.as_ref());
    // A share of nothing is no figure: with nothing in use (every
    // allocation freed before exit) there was nothing to explain.
    let explained = |b: Option<&Breakdown>, nothing: &str| match b {
        None => "-".to_string(),
        Some(b) if b.reference.bytes == 0 && b.explained() == 0 => nothing.to_string(),
        Some(b) => format!("{:.1}%", b.explained_percent()),
    };
    let mut lines = vec![format!(
        "explained: {} at exit, {} at peak",
        explained(exit, "nothing was left to explain"),
        explained(peak, "nothing to explain")
    )];
    if let Some(exit) = exit {
        lines.push(reading_text("at exit,", exit, origin_ns));
    }
    if let Some(peak) = peak {
        lines.push(reading_text("at peak,", peak, origin_ns));
    }
    if let Some(tensors) = tensors {
        lines.push(format!(
            "PyTorch's tensors: {} allocated at exit; allocated peak {} at {} ({} reserved then)",
            bytes(tensors.now.allocated),
            bytes(tensors.allocated_peak.allocated),
            seconds(tensors.allocated_peak.time_ns, origin_ns),
            bytes(tensors.allocated_peak.reserved)
        ));
    }
    lines
}

/// The table for one process and device, in text; times in seconds since
/// `origin_ns`, and PyTorch's figures on the device where `tensors` were
/// recorded.
pub fn text(
    process: &ProcessIndex,
    footprint: &DeviceFootprint,
    origin_ns: u64,
    tensors: Option<&TensorStats>,
) -> String {
    let (exit, peak) = (footprint.at_exit.as_ref(), footprint.at_peak.as_ref());
    let lines = all_rows(footprint);
    let width = lines
        .iter()
        .map(|row| row.name.chars().count())
        .max()
        .unwrap_or(0)
        .min(72);
    let mut out = format!(
        "where the memory went, {}\n  {:<width$} {:>18}  {:>18}\n",
        device_title(process, footprint),
        "",
        "live at exit",
        "at peak"
    );
    for row in lines {
        out += &format!(
            "  {:<width$} {}  {}\n",
            row.name,
            cell(row.at_exit, exit),
            cell(row.at_peak, peak)
        );
    }
    for line in summary_lines(footprint, origin_ns, tensors) {
        out += &format!("  {line}\n");
    }
    for note in &footprint.notes {
        out += &format!("  note: {}\n", note_text(note));
    }
    out
}

/// The same table as HTML rows (bytes and share per column), with its
/// summary lines below it; `escape` makes text safe for HTML. The notes
/// are left to the caller.
pub fn html(
    footprint: &DeviceFootprint,
    origin_ns: u64,
    tensors: Option<&TensorStats>,
    escape: fn(&str) -> String,
) -> String {
    let (exit, peak) = (footprint.at_exit.as_ref(), footprint.at_peak.as_ref());
    let cells = |value: Option<i64>, of: Option<&Breakdown>| match (value, of) {
        (Some(value), Some(b)) if b.reference.bytes > 0 => format!(
            "<td class=\"num\">{}</td><td class=\"num\">{:.1}%</td>",
            signed_bytes(value),
            value as f64 * 100.0 / b.reference.bytes as f64
        ),
        (Some(value), _) => format!("<td class=\"num\">{}</td><td></td>", signed_bytes(value)),
        (None, _) => "<td class=\"num\">-</td><td></td>".to_string(),
    };
    let mut out = String::from(
        "<table class=\"footprint\"><tr><th></th><th colspan=\"2\">live at exit</th><th colspan=\"2\">at peak</th></tr>\n",
    );
    for row in all_rows(footprint) {
        out += &format!(
            "<tr><td>{}</td>{}{}</tr>\n",
            escape(&row.name),
            cells(row.at_exit, exit),
            cells(row.at_peak, peak)
        );
    }
    out += "</table>\n";
    for line in summary_lines(footprint, origin_ns, tensors) {
        out += &format!("<p class=\"note\">{}</p>\n", escape(&line));
    }
    out
}
