//! `cudatrace diff` on two runs of the fake driver that leak different
//! amounts: the exact growth, by call site matched by name, and by owner.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;

const MIB: i64 = 1 << 20;

fn leak_run(label: &str, buffers: &str) -> PathBuf {
    let (mut command, trace) = run_command(label, "leak", &[]);
    let output = command.arg(buffers).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    trace
}

fn row<'a>(rows: &'a Value, name_start: &str) -> &'a Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"].as_str().unwrap().starts_with(name_start))
        .unwrap_or_else(|| panic!("no row {name_start} in {rows:#}"))
}

#[test]
fn diff_shows_the_exact_growth_between_two_runs() {
    let a = leak_run("diff-a", "3");
    let b = leak_run("diff-b", "5");
    let out = cudatrace(&["diff", "--json", a.to_str().unwrap(), b.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        diff["total"],
        json!({
            "peak_bytes": {"a": 9 * MIB, "b": 11 * MIB, "growth": 2 * MIB},
            "exit_bytes": {"a": 3 * MIB, "b": 5 * MIB, "growth": 2 * MIB},
        })
    );
    // Only what changed, largest growth first: the leaking line. The
    // working buffer and the scratch buffer are the same in both runs.
    let sites = diff["call_sites"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "{sites:#?}");
    let leak = row(&diff["call_sites"], "leak_one (scenarios.c:");
    assert_eq!(
        leak["peak_bytes"],
        json!({"a": 3 * MIB, "b": 5 * MIB, "growth": 2 * MIB})
    );
    assert_eq!(
        leak["exit_bytes"],
        json!({"a": 3 * MIB, "b": 5 * MIB, "growth": 2 * MIB})
    );
    assert_eq!(diff["tensor_call_sites"], json!([]));
    // By owner: the program's own bytes live at exit grew by the leak.
    let owner = row(&diff["owners"], "scenarios");
    assert_eq!(
        owner["exit_bytes"],
        json!({"a": 3 * MIB, "b": 5 * MIB, "growth": 2 * MIB})
    );
    // With --all, the unchanged sites are listed too.
    let all = cudatrace(&["diff", "--json", "--all", a.to_str().unwrap(), b.to_str().unwrap()])
        .output()
        .unwrap();
    let all: Value = serde_json::from_slice(&all.stdout).unwrap();
    let work = row(&all["call_sites"], "scenario_leak (scenarios.c:");
    assert_eq!(work["peak_bytes"], json!({"a": 4 * MIB, "b": 4 * MIB, "growth": 0}));
    assert_eq!(work["exit_bytes"], json!({"a": 0, "b": 0, "growth": 0}));
    let scratch = row(&all["call_sites"], "scratch (scenarios.c:");
    assert_eq!(scratch["peak_bytes"], json!({"a": 2 * MIB, "b": 2 * MIB, "growth": 0}));
    // The text says the same, growth first.
    let text = stdout(
        &cudatrace(&["diff", a.to_str().unwrap(), b.to_str().unwrap()])
            .output()
            .unwrap(),
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[1],
        "  device memory in all: peak 9.0 MiB → 11.0 MiB (+2.0 MiB), live at exit 3.0 MiB → 5.0 MiB (+2.0 MiB)"
    );
    assert_eq!(lines[3], "device memory by call site, largest growth first:");
    let first: Vec<&str> = lines[5].split_whitespace().collect();
    assert_eq!(
        first[..12],
        ["3.0", "MiB", "5.0", "MiB", "+2.0", "MiB", "3.0", "MiB", "5.0", "MiB", "+2.0", "MiB"],
        "{text}"
    );
    assert!(first[12].starts_with("leak_one"), "{text}");
}

#[test]
fn a_trace_against_itself_has_no_growth() {
    let a = leak_run("diff-same", "2");
    let out = cudatrace(&["diff", a.to_str().unwrap(), a.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.ends_with("\nno call site or owner changed\n"), "{text}");
}

#[test]
fn diff_of_a_missing_trace_is_one_line_and_a_failure() {
    let a = leak_run("diff-missing", "1");
    let out = cudatrace(&["diff", a.to_str().unwrap(), "/nonexistent/b.trace"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "cudatrace: cannot open /nonexistent/b.trace: No such file or directory (os error 2)\n"
    );
    assert!(out.stdout.is_empty());
}
