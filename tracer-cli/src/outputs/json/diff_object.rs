//! `cudatrace diff --json`: the comparison of two runs as one object.

use crate::outputs::diff_tables::tables;
use cudatrace_analysis::{Growth, RunFigures};
use serde_json::{json, Value};
use std::path::Path;

/// The comparison as JSON: every row, whatever `all` says of text.
pub fn diff_json(paths: [&Path; 2], a: &RunFigures, b: &RunFigures, all: bool) -> Value {
    let row = |row: &Growth| {
        json!({
            "name": row.name,
            "peak_bytes": {"a": row.a.peak, "b": row.b.peak, "growth": row.peak_growth()},
            "exit_bytes": {"a": row.a.exit, "b": row.b.exit, "growth": row.exit_growth()},
            "per_step_bytes": {"a": row.a.per_step, "b": row.b.per_step},
        })
    };
    let mut out = json!({
        "a": paths[0].display().to_string(),
        "b": paths[1].display().to_string(),
        "total": {
            "peak_bytes": {"a": a.total.peak, "b": b.total.peak, "growth": b.total.peak as i64 - a.total.peak as i64},
            "exit_bytes": {"a": a.total.exit, "b": b.total.exit, "growth": b.total.exit as i64 - a.total.exit as i64},
        },
    });
    for (_, key, rows) in tables(a, b, all) {
        out[key] = rows.iter().map(row).collect();
    }
    out
}
