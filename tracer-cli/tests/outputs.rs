//! `cudatrace snapshot`, `perfetto` and `html` on traces of the fake driver:
//! exact content, the viewer's own rules, and agreement with `report`.

mod common;

use common::viewer::{check_replay, unpickle};
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `cudatrace ARGS --force` (the tests convert one trace again and
/// again to the same outputs); returns stdout's lines, asserting success.
fn convert(args: &[&str]) -> Vec<String> {
    let out = cudatrace(args).arg("--force").output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The snapshot, read by the viewer's rules and by Python's pickle, which must agree.
fn read_snapshot(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap();
    let (snapshot, largest_batch) = unpickle(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(largest_batch <= 1000, "batches of {largest_batch}");
    let python = Command::new("python3")
        .arg("-c")
        .arg("import json, pickle, sys; print(json.dumps(pickle.load(open(sys.argv[1], 'rb'))))")
        .arg(path)
        .output()
        .unwrap();
    assert!(python.status.success(), "{}", String::from_utf8_lossy(&python.stderr));
    let from_python: Value = serde_json::from_slice(&python.stdout).unwrap();
    assert_eq!(from_python, snapshot);
    snapshot
}

fn actions(snapshot: &Value, device: usize) -> Vec<(String, i64)> {
    snapshot["device_traces"][device]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap().to_string(), e["size"].as_i64().unwrap()))
        .collect()
}

fn pairs(list: &[(&str, i64)]) -> Vec<(String, i64)> {
    list.iter().map(|&(a, s)| (a.to_string(), s)).collect()
}

#[test]
fn vmm_mappings_become_expandable_segment_maps() {
    let (trace, report) = traced_with_report("snapshot-vmm", "vmm", &[]);
    let pid = report["processes"][0]["pid"].as_u64().unwrap();
    let stem = trace.with_extension("");
    let written = convert(&["snapshot", trace.to_str().unwrap()]);
    let path = PathBuf::from(format!("{}.{pid}.pickle", stem.display()));
    assert_eq!(written, vec![path.display().to_string()]);
    let snapshot = read_snapshot(&path);
    let two_mib = 2 << 20;
    assert_eq!(snapshot["device_traces"][0], json!([]));
    assert_eq!(
        actions(&snapshot, 1),
        pairs(&[
            ("segment_map", two_mib),
            ("alloc", two_mib),
            ("segment_map", two_mib),
            ("alloc", two_mib),
            ("free_requested", two_mib),
            ("free_completed", two_mib),
            ("segment_unmap", two_mib),
            ("free_requested", two_mib),
            ("free_completed", two_mib),
            ("segment_unmap", two_mib),
        ])
    );
    let trace1 = snapshot["device_traces"][1].as_array().unwrap();
    assert_eq!(
        trace1[2]["addr"].as_i64().unwrap(),
        trace1[0]["addr"].as_i64().unwrap() + two_mib
    );
    assert_eq!(trace1[0]["frames"][0]["name"], "vmm_create");
    assert_eq!(snapshot["segments"], json!([]));
    assert_eq!(
        snapshot["allocator_settings"]["cudatrace_notes"][1],
        "10 entries in the trace entries"
    );
    check_replay(&snapshot, 1, false).unwrap();
}

#[test]
fn live_allocations_become_the_final_segments_and_every_view_can_replay_them() {
    let (trace, report) = traced_with_report("snapshot-runtime", "runtime", &[]);
    let process = &report["processes"][0];
    let pid = process["pid"].as_u64().unwrap();
    let out = trace.with_file_name("mine.pickle");
    convert(&["snapshot", trace.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let path = trace.with_file_name(format!("mine.{pid}.pickle"));
    let snapshot = read_snapshot(&path);
    for device in process["devices"].as_array().unwrap() {
        let ordinal = device["device"].as_u64().unwrap() as usize;
        let live: Vec<(u64, u64)> = device["live_at_exit"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["kind"] != "array")
            .map(|l| (l["address"].as_u64().unwrap(), l["size"].as_u64().unwrap()))
            .collect();
        let segments: Vec<(u64, u64)> = snapshot["segments"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["device"] == ordinal)
            .map(|s| (s["address"].as_u64().unwrap(), s["total_size"].as_u64().unwrap()))
            .collect();
        assert_eq!(segments, live, "device {ordinal}");
        check_replay(&snapshot, ordinal, false).unwrap();
    }
    let segment = &snapshot["segments"][0];
    assert_eq!(segment["blocks"].as_array().unwrap().len(), 1);
    assert_eq!(segment["blocks"][0]["size"], segment["total_size"]);
    assert_eq!(segment["blocks"][0]["state"], "active_allocated");
    assert_eq!(segment["segment_pool_id"], json!([0, 0]));
    assert_eq!(segment["is_expandable"], false);
    assert_eq!(
        actions(&snapshot, 1),
        pairs(&[
            ("segment_alloc", 4096),
            ("alloc", 4096),
            ("free_requested", 4096),
            ("free_completed", 4096),
            ("segment_free", 4096)
        ])
    );
    let notes = &snapshot["allocator_settings"]["cudatrace_notes"];
    assert_eq!(notes[2], "left out: 3 allocations of pinned host memory (16.0 KiB)");
    assert_eq!(
        notes[3],
        "left out: 2 allocations of CUDA arrays (keyed by handle, not address) (2.1 KiB)"
    );

    // The newest five entries, in whole events: alloc pairs and free triples.
    convert(&[
        "snapshot",
        trace.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--max-events",
        "5",
    ]);
    let newest = read_snapshot(&path);
    // Each device keeps its newest five entries, in whole events: GPU 0's
    // last two frees are six entries, so only the last one is kept; GPU 1
    // has five in all.
    assert_eq!(
        actions(&newest, 0),
        pairs(&[
            ("free_requested", 16384),
            ("free_completed", 16384),
            ("segment_free", 16384)
        ])
    );
    assert_eq!(actions(&newest, 1), actions(&snapshot, 1));
    assert_eq!(newest["segments"], snapshot["segments"]);
    assert_eq!(
        newest["allocator_settings"]["cudatrace_notes"][4],
        "left out: the oldest 25 entries, past each device's newest 5 (--max-events all keeps every one)"
    );
    check_replay(&newest, 0, true).unwrap();
    check_replay(&newest, 1, true).unwrap();
}

#[test]
fn from_and_to_cut_the_entries_and_keep_the_segments_of_their_moment() {
    let (trace, report) = traced_with_report("snapshot-window", "runtime", &[]);
    let pid = report["processes"][0]["pid"].as_u64().unwrap();
    let path = PathBuf::from(format!("{}.{pid}.pickle", trace.with_extension("").display()));
    let full = {
        convert(&["snapshot", trace.to_str().unwrap()]);
        read_snapshot(&path)
    };
    // Everything happened in the run's first hour: nothing after it, all of it before.
    convert(&["snapshot", trace.to_str().unwrap(), "--from", "3600"]);
    let late = read_snapshot(&path);
    assert_eq!(late["device_traces"], json!([[], []]));
    assert_eq!(late["segments"], full["segments"]);
    assert_eq!(
        late["allocator_settings"]["cudatrace_notes"][4],
        "left out: 33 entries before --from"
    );
    check_replay(&late, 0, true).unwrap();
    convert(&["snapshot", trace.to_str().unwrap(), "--to", "0"]);
    let early = read_snapshot(&path);
    assert_eq!(early["device_traces"], json!([]));
    assert_eq!(early["segments"], json!([]));
    let bad = cudatrace(&["snapshot", trace.to_str().unwrap(), "--from", "soon"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`soon` is not a number of seconds"));
}

#[test]
fn what_held_the_device_at_an_out_of_memory_failure_is_reported_and_drawn() {
    let (trace, report) = traced_with_report("held-at-oom", "oom", &[("FAKE_CUDA_CAPACITY", "1048576")]);
    let held = &report["processes"][0]["devices"][0]["ooms"][0]["held"];
    assert_eq!(held["live_bytes"], 524_288, "{held}");
    assert_eq!(held["torch"], Value::Null);
    assert_eq!(held["live_by_call_site"]["more"], 0);
    let sites = held["live_by_call_site"]["largest"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "{held}");
    assert_eq!(
        (&sites[0]["bytes"], &sites[0]["allocations"]),
        (&json!(524_288), &json!(1))
    );
    assert_eq!(sites[0]["stack"][0]["function"], "scenario_oom");
    let text =
        String::from_utf8_lossy(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap().stdout).into_owned();
    assert!(
        text.contains("      held then: 512.0 KiB of device memory in this process\n      call sites live then:\n        512.0 KiB in 1 allocation: scenario_oom (scenarios.c:419)\n"),
        "{text}"
    );
    let page = trace.with_extension("held.html");
    convert(&["html", trace.to_str().unwrap(), "-o", page.to_str().unwrap()]);
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(
        page.contains("<th>held then</th>"),
        "the failures' table has the column"
    );
    assert!(
        page.contains("<td>cudaMalloc</td><td>512.0 KiB</td>"),
        "the bytes held then"
    );
    assert!(page.contains("<h3>Memory live at the first out-of-memory failure</h3>\n<table class=\"sites\">"));
    let folded = convert(&[
        "flamegraph",
        trace.to_str().unwrap(),
        "--at",
        "oom",
        "--folded",
        "-o",
        "-",
    ]);
    assert_eq!(folded.len(), 1, "{folded:?}");
    assert!(
        folded[0].ends_with(";scenario_oom%20(scenarios.c:419) 524288"),
        "{folded:?}"
    );
    let bad = [
        (
            "oom:2",
            format!(
                "cudatrace: {} has 1 out-of-memory failure; --at oom:2 names none",
                trace.display()
            ),
        ),
        ("oom:0", "expected peak, exit, oom or oom:N (N from 1)".to_string()),
    ];
    // At the peak (the 512 KiB, before the failure), the snapshot ends there.
    let stem = trace.with_extension("at-peak");
    let at_peak = cudatrace(&[
        "snapshot",
        trace.to_str().unwrap(),
        "--at",
        "peak",
        "-o",
        stem.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(at_peak.status.success(), "{}", String::from_utf8_lossy(&at_peak.stderr));
    assert!(String::from_utf8_lossy(&at_peak.stderr).contains(", 512.0 KiB at "));
    let pickle = String::from_utf8_lossy(&at_peak.stdout)
        .lines()
        .next()
        .unwrap()
        .to_string();
    let snapshot = read_snapshot(Path::new(&pickle));
    assert_eq!(
        actions(&snapshot, 0),
        pairs(&[("segment_alloc", 524288), ("alloc", 524288)])
    );
    let windowed = cudatrace(&["snapshot", trace.to_str().unwrap(), "--at", "oom", "--to", "5"])
        .output()
        .unwrap();
    assert_eq!(windowed.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&windowed.stderr),
        "cudatrace: --at oom ends the snapshot at the failure: give no --to, and a --from before the failure\n"
    );
    for (at, said) in bad {
        let out = cudatrace(&["flamegraph", trace.to_str().unwrap(), "--at", at, "-o", "-"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{at}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&said), "{at}: {stderr}");
    }
}

#[test]
fn out_of_memory_entries_carry_the_free_bytes() {
    let (trace, report) = traced_with_report("snapshot-oom", "oom", &[("FAKE_CUDA_CAPACITY", "1048576")]);
    let pid = report["processes"][0]["pid"].as_u64().unwrap();
    convert(&["snapshot", trace.to_str().unwrap(), "--pid", &pid.to_string()]);
    let snapshot = read_snapshot(&PathBuf::from(format!(
        "{}.{pid}.pickle",
        trace.with_extension("").display()
    )));
    let entries = snapshot["device_traces"][0].as_array().unwrap();
    assert_eq!(
        actions(&snapshot, 0),
        pairs(&[("segment_alloc", 524288), ("alloc", 524288), ("oom", 1 << 20)])
    );
    assert_eq!(entries[2]["device_free"], 1048576 - 524288);
    assert_eq!(entries[2].get("addr"), None);
    check_replay(&snapshot, 0, false).unwrap();
    let missing = cudatrace(&["snapshot", trace.to_str().unwrap(), "--pid", "1"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim_end(),
        format!("cudatrace: {} has no process 1", trace.display())
    );
}

#[test]
fn perfetto_json_has_a_process_per_image_slices_for_allocations_and_the_reports_counters() {
    let (trace, report) = traced_with_report("perfetto-tree", "tree", &[]);
    let out = trace.with_file_name("tree.json");
    assert_eq!(
        convert(&[
            "perfetto",
            trace.to_str().unwrap(),
            "--format",
            "json",
            "-o",
            out.to_str().unwrap()
        ]),
        vec![out.display().to_string()]
    );
    let json: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let processes = report["processes"].as_array().unwrap();
    let names: Vec<&Value> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| &e["args"]["name"])
        .collect();
    assert_eq!(names.len(), processes.len());
    for process in processes {
        let pid = process["pid"].as_u64().unwrap() | (process["image"].as_u64().unwrap() << 22);
        let mine: Vec<&Value> = events.iter().filter(|e| e["pid"] == pid).collect();
        let argv = process["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(mine
            .iter()
            .any(|e| e["name"] == "process_name" && e["args"]["name"] == argv.as_str()));
        let allocations: u64 = process["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["allocations"].as_u64().unwrap())
            .sum();
        let pinned = process["host_pinned"]["allocations"].as_u64().unwrap();
        let begins = mine.iter().filter(|e| e["ph"] == "b").count() as u64;
        let ends = mine.iter().filter(|e| e["ph"] == "e").count() as u64;
        assert_eq!(
            (begins, ends),
            (allocations + pinned, allocations + pinned),
            "pid {pid}"
        );
        for device in process["devices"].as_array().unwrap() {
            let name = format!("GPU {} live bytes", device["device"]);
            let last = mine.iter().rev().find(|e| e["ph"] == "C" && e["name"] == name.as_str());
            let expected = device["live_bytes_at_exit"].as_u64().unwrap();
            match last {
                Some(counter) => assert_eq!(counter["args"]["bytes"], expected),
                None => assert_eq!(device["allocations"], 0),
            }
        }
    }
}

/// Distinct call stacks of the device-memory allocations on `device`.
fn allocating_stacks(trace: &Path, device: u8) -> usize {
    let file = std::io::BufReader::new(std::fs::File::open(trace).unwrap());
    let mut stacks = std::collections::HashSet::new();
    for record in cudatrace_trace::TraceReader::new(file).unwrap() {
        if let cudatrace_trace::Record::Events { events, .. } = record.unwrap() {
            for e in events {
                if e.op == cudatrace_events::Op::Alloc && e.device == Some(device) && e.kind.counts_as_device_memory() {
                    stacks.insert(e.stack);
                }
            }
        }
    }
    stacks.len()
}

#[test]
fn the_html_page_loads_without_errors_and_charts_the_top_call_sites() {
    let (trace, report) = traced_with_report("html-runtime", "runtime", &[]);
    let page = trace.with_extension("html");
    assert_eq!(
        convert(&["html", trace.to_str().unwrap()]),
        vec![page.display().to_string()]
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("http://")
            || html
                .matches("http://")
                .all(|_| html.contains("xmlns=\"http://www.w3.org/2000/svg\""))
    );
    assert!(!html.contains("https://"), "the page must need no network");
    // One series per call site at the peak (at most 8), plus one for all
    // other call sites if any allocation came from one.
    let devices = report["processes"][0]["devices"].as_array().unwrap();
    let expected: Vec<usize> = devices
        .iter()
        .map(|d| {
            let at_peak = d["peak_by_call_site"].as_array().unwrap().len().min(8);
            let ever = allocating_stacks(&trace, d["device"].as_u64().unwrap() as u8);
            at_peak + usize::from(ever > at_peak)
        })
        .collect();
    let drawn: Vec<usize> = html
        .split("<div class=\"chart\" data-expected-series=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(drawn, expected);
    let browser = chromium();
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-screenshots");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("runtime.png");
    let url = format!("file://{}", page.display());
    let headless = |extra: &[&str]| {
        Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1200,2400",
            ])
            .args(extra)
            .arg(&url)
            .output()
            .unwrap()
    };
    let dom = headless(&["--dump-dom", "--virtual-time-budget=2000"]);
    assert!(dom.status.success());
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    let log = String::from_utf8_lossy(&dom.stderr);
    let console_errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(console_errors.is_empty(), "{console_errors:?}");
    assert!(
        dom_text.contains("data-ready=\"1\""),
        "the page's script did not finish"
    );
    // (expected, drawn) series of each chart of a class, as the script saw them.
    let charts = |class: &str| -> Vec<(usize, usize)> {
        dom_text
            .split(&format!("<div class=\"{class}\" data-expected-series=\""))
            .skip(1)
            .map(|rest| {
                let number = |text: &str| -> usize { text.split('"').next().unwrap().parse().unwrap() };
                (number(rest), number(rest.split("data-series-count=\"").nth(1).unwrap()))
            })
            .collect()
    };
    let counted: Vec<usize> = charts("chart").iter().map(|&(_, drawn)| drawn).collect();
    assert_eq!(counted, expected);
    // The charts of owners and categories draw what the page expects too.
    let owners = charts("chart owners");
    assert_eq!(owners.len(), 1, "one device with a footprint");
    assert!(
        owners.iter().all(|&(expected, drawn)| expected == drawn && drawn > 0),
        "{owners:?}"
    );
    let screenshot = headless(&[&format!("--screenshot={}", shot.display())]);
    assert!(
        screenshot.status.success(),
        "{}",
        String::from_utf8_lossy(&screenshot.stderr)
    );
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "a screenshot of the page at {}",
        shot.display()
    );
}

#[test]
fn the_report_opens_with_the_first_ten_failures_and_counts_the_rest() {
    // Twelve asks of 2 GiB on the fake 1 GiB card, each failing.
    let dir = scratch_dir("ooms-listed-first");
    let script = dir.join("ooms.py");
    std::fs::write(
        &script,
        "import ctypes\n\
         cudart = ctypes.CDLL('libcudart.so.13')\n\
         cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]\n\
         for _ in range(12):\n\
         \x20   assert cudart.cudaMalloc(ctypes.byref(ctypes.c_void_p()), 2 << 30) != 0\n",
    )
    .unwrap();
    let (mut command, trace) = run_program("ooms-listed-first", Path::new("python3"), &[]);
    let out = command.arg(&script).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text =
        String::from_utf8_lossy(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap().stdout).into_owned();
    let listed: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "out of memory:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(listed.len(), 11, "{text}");
    for line in &listed[..10] {
        assert!(
            line.ends_with(
                ": OUT OF MEMORY: cudaMalloc asked for 2.0 GiB with 1.0 GiB free of 1.0 GiB, at ooms.py:5 <module>"
            ),
            "{line}"
        );
    }
    assert_eq!(
        listed[10],
        "  ... and 2 more failures (each process's section below details its first; `report --all-ooms` lists each)"
    );
}
