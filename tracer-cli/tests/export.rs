//! `cudatrace export`: two traces of the fake PyTorch (two runs, so two
//! pids and two sets of stack node ids and load addresses) exported
//! together, then read back with DuckDB's Python package: every count and
//! sum against `cudatrace report --json` of the same traces, one id for a
//! call site both traces share, and the three queries of docs/usage.md,
//! as written there. Then bad input, `--force`, and a damaged trace.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `torch_like SCENARIO` of the fake PyTorch 2.11 under `cudatrace run`.
fn torch_trace(label: &str, scenario: &str) -> PathBuf {
    let (mut command, trace) = run_program(label, &fake_cuda::program("torch_like"), &[]);
    let output = command
        .arg(fake_cuda::torch_library("211"))
        .arg(scenario)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    trace
}

/// `scenarios leak 1` under `cudatrace run OPTIONS`.
fn leak_trace(label: &str, options: &[&str]) -> PathBuf {
    let (mut command, trace) = run_command(label, "leak", options);
    let output = command.arg("1").output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    trace
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `cudatrace export TRACES -o DIR EXTRA`.
fn export(traces: &[&Path], dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["export"];
    args.extend(traces.iter().map(|t| text(t)));
    args.extend(["-o", text(dir)]);
    args.extend(extra);
    cudatrace(&args).output().unwrap()
}

/// Runs each of `queries` with DuckDB's Python package in `dir`: each
/// query's rows, each row a list of values.
fn duckdb(dir: &Path, queries: &[&str]) -> Vec<Vec<Vec<Value>>> {
    const PROGRAM: &str = r#"
import json, sys
try:
    import duckdb
except ImportError:
    sys.exit("DuckDB's Python package is missing: tests/run installs it (python3 -m pip install duckdb)")
queries = json.load(sys.stdin)
print(json.dumps([[list(row) for row in duckdb.sql(q).fetchall()] for q in queries]))
"#;
    let mut child = Command::new("python3")
        .args(["-c", PROGRAM])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs the queries");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json!(queries).to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The ```sql blocks of docs/usage.md's section on `cudatrace export`.
fn documented_queries() -> Vec<String> {
    let usage = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/usage.md")).unwrap();
    let section = usage
        .split("\n## ")
        .find(|s| s.starts_with("Many ranks in SQL: `cudatrace export`"))
        .expect("docs/usage.md has a section on export");
    section
        .split("```sql\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_string())
        .collect()
}

/// 64-bit FNV-1a, written again here: the call site id's documented hash.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The first `header` and every `process` record of `cudatrace dump TRACE`.
fn dumped(trace: &Path) -> (Value, Vec<Value>) {
    let dump = cudatrace(&["dump", text(trace)]).output().unwrap();
    assert!(dump.status.success(), "{}", stderr(&dump));
    let records: Vec<Value> = stdout(&dump)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let header = records.iter().find_map(|r| r.get("header")).unwrap().clone();
    let processes = records.iter().filter_map(|r| r.get("process")).cloned().collect();
    (header, processes)
}

/// Rows keyed by their first `key` values, the rest as the value.
fn keyed(rows: &[Vec<Value>], key: usize) -> BTreeMap<String, Vec<Value>> {
    rows.iter()
        .map(|row| (json!(row[..key]).to_string(), row[key..].to_vec()))
        .collect()
}

const DRIVER: &str = "SELECT trace, device,
        count(*) FILTER (action = 'alloc'), count(*) FILTER (action = 'free'),
        coalesce(sum(size) FILTER (action = 'alloc'), 0),
        coalesce(sum(size) FILTER (action = 'alloc'), 0) - coalesce(sum(size) FILTER (action = 'free'), 0)
    FROM 'events.parquet' WHERE action IN ('alloc', 'free') AND kind <> 'host-pinned' GROUP BY ALL";

const TENSORS: &str = "SELECT trace, device,
        count(*) FILTER (action = 'tensor_alloc'), count(*) FILTER (action = 'tensor_free'),
        coalesce(sum(size) FILTER (action = 'tensor_alloc'), 0)
            - coalesce(sum(size) FILTER (action = 'tensor_free'), 0)
    FROM 'events.parquet' WHERE action LIKE 'tensor_%' GROUP BY ALL";

const CALL_SITES: &str = "SELECT call_site_id, key, headline, owner, len(frames), frames[1]
    FROM 'call_sites.parquet' ORDER BY call_site_id";

const EVENT_SITES: &str = "SELECT count(DISTINCT call_site_id), count(*) FILTER (call_site_id IS NULL),
        count(*) FILTER (call_site_id NOT IN (SELECT call_site_id FROM 'call_sites.parquet'))
    FROM 'events.parquet'";

const SHARED: &str = "SELECT call_site_id, count(DISTINCT trace), count(DISTINCT pid)
    FROM 'events.parquet' GROUP BY ALL HAVING count(DISTINCT trace) > 1";

const PROCESSES: &str = "SELECT trace, pid, host, rank, process, count(DISTINCT wall_time_ns - time_ns),
        min(wall_time_ns - time_ns), count(*)
    FROM 'events.parquet' GROUP BY ALL";

#[test]
fn the_export_adds_up_to_the_report_and_a_call_site_has_one_id_in_every_trace() {
    let a = torch_trace("export-a", "all");
    let b = torch_trace("export-b", "two_devices");
    let dir = scratch_dir("export").join("fleet");
    let out = export(&[&a, &b], &dir, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "{}\n{}\n",
            dir.join("events.parquet").display(),
            dir.join("call_sites.parquet").display()
        )
    );

    // What the report says of each trace, by trace and device.
    let mut driver = BTreeMap::new();
    let mut tensors = BTreeMap::new();
    let mut peaks = Vec::new();
    let mut ooms = Vec::new();
    let mut processes = BTreeMap::new();
    let mut rows = 0;
    let mut held_at_exit = 0;
    for trace in [&a, &b] {
        let (report, _) = report_json(trace);
        let (header, starts) = dumped(trace);
        let host = &header["host"];
        for (p, start) in report["processes"].as_array().unwrap().iter().zip(&starts) {
            let pid = &p["pid"];
            assert_eq!(pid, &start["pid"]);
            for d in p["devices"].as_array().unwrap() {
                let key = json!([text(trace), d["device"]]).to_string();
                driver.insert(
                    key,
                    vec![
                        d["allocations"].clone(),
                        d["frees"].clone(),
                        d["bytes_allocated"].clone(),
                        d["live_bytes_at_exit"].clone(),
                    ],
                );
                rows += d["allocations"].as_u64().unwrap() + d["frees"].as_u64().unwrap();
                held_at_exit += d["live_bytes_at_exit"].as_u64().unwrap();
                peaks.push(json!([host, null, text(trace), pid, d["device"], d["peak_bytes"]]));
                let asked: Vec<u64> = d["ooms"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o["requested_bytes"].as_u64().unwrap())
                    .collect();
                if let Some(largest) = asked.iter().max() {
                    ooms.push(json!([host, null, text(trace), pid, d["device"], asked.len(), largest]));
                    rows += asked.len() as u64;
                }
            }
            for t in p["tensors"]["devices"].as_array().unwrap() {
                let key = json!([text(trace), t["device"]]).to_string();
                tensors.insert(
                    key,
                    vec![
                        t["allocations"].clone(),
                        t["frees"].clone(),
                        t["allocated_bytes_at_exit"].clone(),
                    ],
                );
                rows += t["allocations"].as_u64().unwrap() + t["frees"].as_u64().unwrap();
            }
            let anchor = start["start_realtime_ns"].as_i64().unwrap() - start["start_monotonic_ns"].as_i64().unwrap();
            processes.insert(
                json!([text(trace), pid]).to_string(),
                (host.clone(), start["process"].clone(), anchor),
            );
        }
    }
    // The fake's figures (tensors.rs checks them against what it did), so
    // that agreeing with the report is not agreeing on nothing.
    assert_eq!(driver[&json!([text(&a), 0]).to_string()][..2], [json!(12), json!(8)]);
    assert_eq!(tensors[&json!([text(&a), 0]).to_string()][..2], [json!(28), json!(23)]);
    assert_eq!(tensors.len(), 3, "{tensors:?}");
    assert_eq!(ooms.len(), 1);
    assert_eq!(rows, 82);

    let [driver_rows, tensor_rows, sites, event_sites, shared, process_rows] = <[_; 6]>::try_from(duckdb(
        &dir,
        &[DRIVER, TENSORS, CALL_SITES, EVENT_SITES, SHARED, PROCESSES],
    ))
    .unwrap();
    assert_eq!(keyed(&driver_rows, 2), driver);
    assert_eq!(keyed(&tensor_rows, 2), tensors);
    assert_eq!(
        stderr(&out),
        format!(
            "cudatrace: {rows} events and {} call sites from 2 traces; query them with DuckDB, Polars or Spark (docs/usage.md has examples)\n",
            sites.len()
        )
    );

    // Each process: its host and no rank, and one clock anchor, its own.
    assert_eq!(process_rows.len(), 2);
    for row in &process_rows {
        let (host, process, anchor) = &processes[&json!(row[..2]).to_string()];
        assert_eq!(
            row[2..7],
            [host.clone(), Value::Null, process.clone(), json!(1), json!(anchor)]
        );
    }

    // The call sites: the fake's four lines, each id the hash of its key,
    // and every row's site among them.
    let headlines: Vec<&str> = sites.iter().map(|s| s[2].as_str().unwrap()).collect();
    let mut names: Vec<&str> = headlines.iter().map(|h| h.split(" (").next().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["expandable_tensor", "oom", "pool_tensor", "tensor"],
        "{sites:#?}"
    );
    for site in &sites {
        assert_eq!(site[0].as_u64(), Some(fnv1a(site[1].as_str().unwrap())), "{site:?}");
        assert!(site[1].as_str().unwrap().contains("torch_like.cpp:"), "{site:?}");
        assert_eq!(site[3], "torch_like");
        assert!(site[4].as_u64() > Some(1), "{site:?}");
        // The example stack starts at the caller of PyTorch's allocator.
        let innermost = site[5].as_str().unwrap();
        assert!(
            innermost.starts_with(site[2].as_str().unwrap().split(" (").next().unwrap()),
            "{site:?}"
        );
    }
    assert_eq!(event_sites, [vec![json!(4), json!(0), json!(0)]]);
    // The line both programs make tensors at: one id, in both traces and
    // both pids.
    let tensor_site = sites.iter().find(|s| headlines_start(s, "tensor (")).unwrap();
    assert_eq!(shared, [vec![tensor_site[0].clone(), json!(2), json!(2)]]);

    // The three queries of docs/usage.md, as written there.
    let queries = documented_queries();
    assert_eq!(queries.len(), 3);
    let queries: Vec<&str> = queries.iter().map(String::as_str).collect();
    let [peak_rows, held_rows, oom_rows] = <[_; 3]>::try_from(duckdb(&dir, &queries)).unwrap();
    // Each process's peak per device: the report's.
    peaks.sort_by_key(|p| (std::cmp::Reverse(p[5].as_u64()), p[2].to_string(), p[4].to_string()));
    assert_eq!(json!(peak_rows), json!(peaks));
    assert_eq!(peak_rows[0][5], 92_274_688);
    // What each call site held at the end: in all, what the processes held
    // at exit; the tensor line in both traces.
    let held: u64 = held_rows.iter().map(|r| r[3].as_u64().unwrap()).sum();
    assert_eq!(held, held_at_exit);
    let described: Vec<(String, u64, u64, u64)> = held_rows
        .iter()
        .map(|r| {
            let name = r[1].as_str().unwrap().split(" (").next().unwrap().to_string();
            (
                name,
                r[2].as_u64().unwrap(),
                r[3].as_u64().unwrap(),
                r[4].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            ("tensor".to_string(), 2, 46_137_344, 23_068_672),
            ("pool_tensor".to_string(), 1, 20_971_520, 20_971_520),
            ("expandable_tensor".to_string(), 1, 2_097_152, 2_097_152),
        ]
    );
    assert_eq!(held_rows[0][0], tensor_site[0]);
    // Out-of-memory failures by rank: the report's.
    assert_eq!(json!(oom_rows), json!(ooms));
    assert_eq!(oom_rows[0][5..], [json!(1), json!(2_147_483_648u64)]);
}

fn headlines_start(site: &[Value], prefix: &str) -> bool {
    site[2].as_str().is_some_and(|h| h.starts_with(prefix))
}

#[test]
fn bad_input_is_one_line_and_a_failure_and_leaves_nothing_behind() {
    let trace = leak_trace("export-bad", &[]);
    let scratch = scratch_dir("export-bad-out");
    // A trace that is not there: refused before anything is made.
    let dir = scratch.join("never");
    let out = export(&[&trace, Path::new("/nonexistent/rank1.trace")], &dir, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "cudatrace: cannot open /nonexistent/rank1.trace: No such file or directory (os error 2)\n"
    );
    assert!(out.stdout.is_empty());
    assert!(!dir.exists());
    // A folder given as a trace.
    let out = export(&[&scratch], &dir, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "cudatrace: {} is a folder, not a regular file: cudatrace reads its input more than once (save it to a file first)\n",
            scratch.display()
        )
    );
    // A file that is not a trace, after one that is: said as `report` says
    // it, and nothing is left behind: not even the folder (nor the one
    // above it) that the command made.
    let not_a_trace = scratch.join("notes.txt");
    std::fs::write(&not_a_trace, "not a trace at all\n").unwrap();
    let deeper = dir.join("fleet");
    for traces in [vec![trace.as_path(), &not_a_trace], vec![&not_a_trace]] {
        let out = export(&traces, &deeper, &[]);
        assert_eq!(out.status.code(), Some(2));
        let report = cudatrace(&["report", text(&not_a_trace)]).output().unwrap();
        assert_eq!(report.status.code(), Some(2));
        assert_eq!(stderr(&out), stderr(&report));
        assert_eq!(stderr(&out).lines().count(), 1);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    // A folder that was there stays, empty.
    std::fs::create_dir(&dir).unwrap();
    let out = export(&[&trace, &not_a_trace], &dir, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    // A link to nothing: said in one line, nothing made.
    let link = scratch.join("dangling");
    std::os::unix::fs::symlink("nowhere/fleet", &link).unwrap();
    let out = export(&[&trace], &link, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "cudatrace: cannot export into {}: it is a symbolic link to nowhere/fleet, which does not exist\n",
            link.display()
        )
    );
    assert!(!scratch.join("nowhere").exists());
    // A link to a folder is followed.
    let link = scratch.join("to-folder");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let out = export(&[&trace], &link, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(dir.join("events.parquet").is_file());
    // DIR is a file.
    let file = scratch.join("fleet");
    std::fs::write(&file, "mine").unwrap();
    let out = export(&[&trace], &file, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!("cudatrace: cannot export into {}: it is not a folder\n", file.display())
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

#[test]
fn existing_files_are_replaced_only_with_force() {
    let trace = leak_trace("export-force", &[]);
    let dir = scratch_dir("export-force-out");
    let first = export(&[&trace], &dir, &[]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let events = dir.join("events.parquet");
    let written = std::fs::read(&events).unwrap();
    let again = export(&[&trace], &dir, &[]);
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(
        stderr(&again),
        format!("cudatrace: {} exists; pass --force to replace it\n", events.display())
    );
    assert_eq!(std::fs::read(&events).unwrap(), written);
    // Only the call sites' file there: refused all the same, and no
    // events.parquet made.
    std::fs::remove_file(&events).unwrap();
    let again = export(&[&trace], &dir, &[]);
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(
        stderr(&again),
        format!(
            "cudatrace: {} exists; pass --force to replace it\n",
            dir.join("call_sites.parquet").display()
        )
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let forced = export(&[&trace], &dir, &["--force"]);
    assert_eq!(forced.status.code(), Some(0), "{}", stderr(&forced));
    assert_eq!(std::fs::read(&events).unwrap(), written);
}

#[test]
fn a_damaged_trace_is_exported_as_far_as_it_reads_and_says_what_it_lacks() {
    let trace = leak_trace("export-damaged", &[]);
    let bytes = std::fs::read(&trace).unwrap();
    // Cut inside the footer: every event is there, the trace is damaged.
    let cut = trace.with_extension("cut");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let (report, said) = report_json(&cut);
    assert_eq!(said.status.code(), Some(1));
    let device = &report["processes"][0]["devices"][0];
    let dir = scratch_dir("export-damaged-out");
    let out = export(&[&cut], &dir, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines: Vec<String> = stderr(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], stderr(&said).trim_end());
    assert!(lines[0].contains("is damaged at byte"), "{lines:?}");
    let [counts, sites] = <[_; 2]>::try_from(duckdb(
        &dir,
        &[
            "SELECT count(*) FILTER (action = 'alloc'), count(*) FILTER (action = 'free'),
                count(DISTINCT call_site_id), count(*) FILTER (call_site_id IS NULL), list(DISTINCT owner)
             FROM 'events.parquet'",
            "SELECT list(headline ORDER BY headline) FROM 'call_sites.parquet'",
        ],
    ))
    .unwrap();
    assert_eq!(
        counts,
        [vec![
            device["allocations"].clone(),
            device["frees"].clone(),
            json!(3),
            json!(0),
            json!(["scenarios"])
        ]]
    );
    assert_eq!((&device["allocations"], &device["frees"]), (&json!(3), &json!(2)));
    let headlines: Vec<&str> = sites[0][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().split(' ').next().unwrap())
        .collect();
    assert_eq!(headlines, ["leak_one", "scenario_leak", "scratch"]);
    assert_eq!(
        lines[1],
        "cudatrace: 5 events and 3 call sites from 1 trace; query them with DuckDB, Polars or Spark (docs/usage.md has examples)"
    );
    // Cut inside the block of events: no row, no call site, both files
    // still whole for a reader.
    let cut_at = frame_at(&bytes, b'e') + 12;
    std::fs::write(&cut, &bytes[..cut_at]).unwrap();
    let (report, said) = report_json(&cut);
    assert_eq!(report["processes"][0]["devices"], json!([]));
    let out = export(&[&cut], &dir, &["--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "{}cudatrace: 0 events and 0 call sites from 1 trace; query them with DuckDB, Polars or Spark (docs/usage.md has examples)\n",
            stderr(&said)
        )
    );
    let counts = duckdb(
        &dir,
        &[
            "SELECT count(*) FROM 'events.parquet'",
            "SELECT count(*) FROM 'call_sites.parquet'",
        ],
    );
    assert_eq!(counts, [[[json!(0)]], [[json!(0)]]]);
}

/// Where the first frame tagged `tag` starts in a trace's bytes.
fn frame_at(bytes: &[u8], tag: u8) -> usize {
    let mut at = 8;
    while bytes[at] != tag {
        let length = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        at += 5 + length + 4;
    }
    at
}

#[test]
fn each_row_carries_its_process_s_host_and_rank() {
    let run = |label: &str, host: &str, rank: &str| {
        let (mut command, trace) = run_program(label, &fake_cuda::program("torch_like"), &[]);
        let output = command
            .arg(fake_cuda::torch_library("211"))
            .arg("all")
            .env("CUDATRACE_TEST_HOST", host)
            .env("RANK", rank)
            .env("WORLD_SIZE", "2")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        trace
    };
    let (a, b) = (run("export-rank-a", "nodeA", "0"), run("export-rank-b", "nodeB", "1"));
    let merged = a.with_file_name("job.trace");
    let out = cudatrace(&["merge", text(&a), text(&b), "-o", text(&merged)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = a.with_file_name("fleet");
    let out = export(&[&merged], &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let [rows] = <[_; 1]>::try_from(duckdb(
        &dir,
        &["SELECT host, rank, count(DISTINCT pid) FROM 'events.parquet' GROUP BY ALL ORDER BY host"],
    ))
    .unwrap();
    assert_eq!(
        rows,
        vec![
            vec![json!("nodeA"), json!(0), json!(1)],
            vec![json!("nodeB"), json!(1), json!(1)]
        ]
    );
}
