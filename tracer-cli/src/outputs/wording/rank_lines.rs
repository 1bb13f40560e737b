//! Every rank in one view, in words: the table `report` opens with when a
//! trace holds several ranks or devices, and the sentence that names the
//! rank that stands out.

use super::numbers::{bytes, duration};
use crate::analysis::{RankRow, RankTable};
use cudatrace_events::ProcessPlace;

/// What a process is called in the table: its rank where it has one,
/// else its pid.
pub fn process_name(place: &ProcessPlace, pid: u32) -> String {
    match place.rank {
        Some(rank) => format!("rank {rank}"),
        None => format!("pid {pid}"),
    }
}

/// A process's host and rank for a heading: ` on HOST, rank R (local L of W)`.
pub fn place_text(place: &ProcessPlace) -> String {
    let mut text = String::new();
    if !place.host.is_empty() {
        text += &format!(" on {}", place.host);
    }
    if let Some(rank) = place.rank {
        text += &format!(", rank {rank}");
        match (place.local_rank, place.world_size) {
            (Some(local), Some(world)) => text += &format!(" (local rank {local}, world size {world})"),
            (Some(local), None) => text += &format!(" (local rank {local})"),
            (None, Some(world)) => text += &format!(" (world size {world})"),
            (None, None) => {}
        }
    }
    text
}

/// The row's peak, its time since the trace's start, and the outlier's sentence.
fn outlier_text(table: &RankTable, start_ns: u64) -> String {
    let Some(outlier) = &table.outlier else {
        let highest = table.rows.iter().map(|r| r.peak_bytes).max().unwrap_or(0);
        let lowest = table.rows.iter().map(|r| r.peak_bytes).min().unwrap_or(0);
        return format!(
            "no rank stands out: the peaks lie within {} of each other",
            bytes(highest - lowest)
        );
    };
    let row = &table.rows[outlier.row];
    let median = &table.rows[outlier.median_row];
    let when = match outlier.step {
        Some((first, last)) if first == last => format!("at step {first}"),
        Some((first, last)) => format!("in steps {first} to {last}"),
        None => format!("at {}", duration(row.peak_time_ns.saturating_sub(start_ns))),
    };
    let mut text = format!(
        "{} peaks {} ({:.0}%) above the median rank ({}), {when}",
        row_name(table, row),
        bytes(outlier.above_median),
        outlier.percent,
        row_name(table, median)
    );
    if let Some((site, more)) = &outlier.site {
        text += &format!("; the difference is at {site} ({} more)", bytes(*more));
    }
    text
}

/// A row's name: its process's, with the device where a process has several rows.
fn row_name(table: &RankTable, row: &RankRow) -> String {
    let name = process_name(&row.place, row.pid);
    let rows_of_process = table.rows.iter().filter(|r| r.process == row.process).count();
    if rows_of_process > 1 {
        format!("{name} device {}", row.device)
    } else {
        name
    }
}

/// The table and the outlier's sentence, as the report prints them.
pub fn table_text(table: &RankTable, start_ns: u64) -> String {
    let hosts = {
        let mut hosts: Vec<&str> = table.rows.iter().map(|r| r.place.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        hosts.len()
    };
    let header = [
        "host",
        "rank",
        "pid",
        "device",
        "peak",
        "at",
        "allocated peak",
        "reserved peak",
        "live at exit",
        "OOMs",
        "explained",
    ];
    let optional = |value: Option<u64>| value.map_or("-".to_string(), bytes);
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for row in &table.rows {
        cells.push(vec![
            row.place.host.clone(),
            row.place.rank.map_or("-".to_string(), |r| r.to_string()),
            row.pid.to_string(),
            row.device.to_string(),
            format!(
                "{}{}",
                bytes(row.peak_bytes),
                if row.peak_is_footprint { "" } else { "*" }
            ),
            duration(row.peak_time_ns.saturating_sub(start_ns)),
            optional(row.allocated_peak),
            optional(row.reserved_peak),
            bytes(row.live_at_exit),
            row.ooms.to_string(),
            row.explained_percent.map_or("-".to_string(), |p| format!("{p:.1}%")),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| cells.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!(
        "\nevery rank: {} on {}, one row per process and device\n",
        super::numbers::count(table.rows.len() as u64, "row", "rows"),
        super::numbers::count(hosts as u64, "host", "hosts")
    );
    for row in &cells {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, &width))| {
                // Names to the left, figures to the right.
                if c == 0 {
                    format!("{cell:<width$}")
                } else {
                    format!("{cell:>width$}")
                }
            })
            .collect();
        out += &format!("  {}\n", line.join("  ").trim_end());
    }
    if table.rows.iter().any(|r| !r.peak_is_footprint) {
        out += "  * the peak of allocations: the device was not read, so the footprint is not known\n";
    }
    out += &format!("  {}\n", outlier_text(table, start_ns));
    out
}
