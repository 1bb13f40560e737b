//! Every rank in one view, in words: the table `report` opens with when a
//! trace holds several ranks or devices, and the sentence that names the
//! rank that stands out.

use super::numbers::{bytes, duration};
use cudatrace_analysis::{RankRow, RankTable, OUTLIER_BYTES, OUTLIER_PERCENT};
use cudatrace_events::ProcessPlace;

/// What a process is called in the table: its rank where it has one,
/// else its pid.
pub fn process_name(place: &ProcessPlace, pid: u32) -> String {
    match place.rank {
        Some(rank) => format!("rank {rank}"),
        None => format!("pid {pid}"),
    }
}

/// A process's host and rank for a heading: ` on HOST, rank R (local
/// rank L, world size W)`; the host only where the trace has several
/// (its header names the one host otherwise).
pub fn place_text(place: &ProcessPlace, several_hosts: bool) -> String {
    let mut parts = Vec::new();
    if several_hosts && !place.host.is_empty() {
        parts.push(format!("on {}", place.host));
    }
    if let Some(rank) = place.rank {
        let detail = match (place.local_rank, place.world_size) {
            (Some(local), Some(world)) => format!(" (local rank {local}, world size {world})"),
            (Some(local), None) => format!(" (local rank {local})"),
            (None, Some(world)) => format!(" (world size {world})"),
            (None, None) => String::new(),
        };
        parts.push(format!("rank {rank}{detail}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" {}", parts.join(", "))
    }
}

/// The sentence that names the rank that stands out (or says none does).
pub fn outlier_text(table: &RankTable, start_ns: u64) -> String {
    let Some(outlier) = &table.outlier else {
        let highest = table.rows.iter().map(|r| r.peak_bytes).max().unwrap_or(0);
        let lowest = table.rows.iter().map(|r| r.peak_bytes).min().unwrap_or(0);
        return format!(
            "no rank peaks {OUTLIER_PERCENT}% and {} above the median rank; the peaks lie between {} and {}",
            bytes(OUTLIER_BYTES),
            bytes(lowest),
            bytes(highest)
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

/// A row's name: its process's (a pid, with its host where the table has
/// several: pids are a host's; a rank is the job's), and the device where
/// a process has several rows.
fn row_name(table: &RankTable, row: &RankRow) -> String {
    let mut name = process_name(&row.place, row.pid);
    if row.place.rank.is_none() && table.rows.iter().any(|r| r.place.host != row.place.host) {
        name += &format!(" on {}", row.place.host);
    }
    let rows_of_process = table.rows.iter().filter(|r| r.process == row.process).count();
    if rows_of_process > 1 {
        name += &format!(" device {}", row.device);
    }
    name
}

/// The table's column names.
pub const COLUMNS: [&str; 11] = [
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

/// Each row's cells, in the order of [`COLUMNS`]; a peak of allocations
/// only (the device was not read) is marked `*`.
pub fn row_cells(table: &RankTable, start_ns: u64) -> Vec<Vec<String>> {
    let optional = |value: Option<u64>| value.map_or("-".to_string(), bytes);
    table
        .rows
        .iter()
        .map(|row| {
            vec![
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
            ]
        })
        .collect()
}

/// What the table's `*` means, where a row has one.
pub fn allocations_peak_note(table: &RankTable) -> Option<&'static str> {
    table
        .rows
        .iter()
        .any(|r| !r.peak_is_footprint)
        .then_some("* the peak of allocations: the device was not read, so the footprint is not known")
}

/// The table's title: rows and hosts.
pub fn title(table: &RankTable) -> String {
    let mut hosts: Vec<&str> = table.rows.iter().map(|r| r.place.host.as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    format!(
        "every rank: {} on {}, one row per process and device",
        super::numbers::count(table.rows.len() as u64, "row", "rows"),
        super::numbers::count(hosts.len() as u64, "host", "hosts")
    )
}

/// The table and the outlier's sentence, as the report prints them.
pub fn table_text(table: &RankTable, start_ns: u64) -> String {
    let mut cells: Vec<Vec<String>> = vec![COLUMNS.iter().map(|s| s.to_string()).collect()];
    cells.extend(row_cells(table, start_ns));
    let widths: Vec<usize> = (0..COLUMNS.len())
        .map(|c| cells.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!("\n{}\n", title(table));
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
    if let Some(note) = allocations_peak_note(table) {
        out += &format!("  {note}\n");
    }
    out += &format!("  {}\n", outlier_text(table, start_ns));
    out
}
