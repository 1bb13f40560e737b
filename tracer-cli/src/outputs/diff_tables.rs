//! `cudatrace diff`'s output: for two runs, bytes at the peak and at exit
//! by call site, by PyTorch tensor call site and by owner, largest growth
//! first; as text or as JSON.

use crate::wording::bytes;
use cudatrace_analysis::{compare, Growth, RunFigures};
use std::path::Path;

/// Rows of a table shown in text, unless every row is asked for.
const ROWS_SHOWN: usize = 20;

/// `+1.0 MiB`, `-512 B`, or `0 B`.
fn signed(value: i64) -> String {
    match value {
        0 => "0 B".to_string(),
        v if v > 0 => format!("+{}", bytes(v as u64)),
        v => format!("-{}", bytes(v.unsigned_abs())),
    }
}

/// The three tables of the comparison, each with its heading.
pub fn tables(a: &RunFigures, b: &RunFigures, all: bool) -> [(&'static str, &'static str, Vec<Growth>); 3] {
    [
        (
            "device memory by call site",
            "call_sites",
            compare(&a.call_sites, &b.call_sites, all),
        ),
        (
            "PyTorch's tensors by call site",
            "tensor_call_sites",
            compare(&a.tensor_call_sites, &b.tensor_call_sites, all),
        ),
        (
            "driver-used memory by owner and category",
            "owners",
            compare(&a.owners, &b.owners, all),
        ),
    ]
}

/// The comparison in text.
pub fn text(paths: [&Path; 2], a: &RunFigures, b: &RunFigures, all: bool) -> String {
    let mut out = format!(
        "cudatrace diff: A = {}, B = {}\n  device memory in all: peak {} → {} ({}), live at exit {} → {} ({})\n",
        paths[0].display(),
        paths[1].display(),
        bytes(a.total.peak),
        bytes(b.total.peak),
        signed(b.total.peak as i64 - a.total.peak as i64),
        bytes(a.total.exit),
        bytes(b.total.exit),
        signed(b.total.exit as i64 - a.total.exit as i64),
    );
    let tables = tables(a, b, all);
    if tables.iter().all(|(_, _, rows)| rows.is_empty()) {
        return out + "\nno call site or owner changed\n";
    }
    for (heading, _, rows) in tables {
        if rows.is_empty() {
            continue;
        }
        // Where either run has steps: each site's change a step in each.
        let by_step = rows
            .iter()
            .any(|row| row.a.per_step.is_some() || row.b.per_step.is_some());
        let step_heading = if by_step {
            format!("   {:>11} {:>11}", "a step A", "a step B")
        } else {
            String::new()
        };
        out += &format!(
            "\n{heading}, largest growth first:\n  {:>11} {:>11} {:>11}   {:>11} {:>11} {:>11}{step_heading}\n",
            "peak A", "peak B", "growth", "exit A", "exit B", "growth"
        );
        let shown = if all { rows.len() } else { ROWS_SHOWN };
        let per_step = |value: Option<i64>| value.map_or_else(|| "-".to_string(), signed);
        for row in rows.iter().take(shown) {
            let steps = if by_step {
                format!("   {:>11} {:>11}", per_step(row.a.per_step), per_step(row.b.per_step))
            } else {
                String::new()
            };
            out += &format!(
                "  {:>11} {:>11} {:>11}   {:>11} {:>11} {:>11}{steps}  {}\n",
                bytes(row.a.peak),
                bytes(row.b.peak),
                signed(row.peak_growth()),
                bytes(row.a.exit),
                bytes(row.b.exit),
                signed(row.exit_growth()),
                row.name
            );
        }
        if rows.len() > shown {
            out += &format!("  ... and {} more (--all shows them)\n", rows.len() - shown);
        }
    }
    out
}
