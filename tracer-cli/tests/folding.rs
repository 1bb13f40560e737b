//! Bounded traces: `run --max-size` folds a trace's older detail away, and
//! every count, the peaks and the state at the end stay what the whole
//! trace says.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// `scenarios pairs 100000` under `cudatrace run OPTIONS`: 100,000
/// allocations of 8,192 bytes, each freed before the next: 200,000 events.
fn run_pairs(label: &str, options: &[&str]) -> (std::process::Output, PathBuf) {
    let scenarios = fake_cuda::program("scenarios");
    let (mut command, trace) = run_program(label, &scenarios, options);
    command.args(["pairs", "100000"]);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    (output, trace)
}

/// The counts that folding must leave as they were, and the device peak.
fn whole_run_figures(report: &Value) -> Value {
    let p = &report["processes"][0];
    let d = &p["devices"][0];
    json!({
        "complete": report["complete"],
        "lost_events": report["lost_events"],
        "allocations": d["allocations"],
        "frees": d["frees"],
        "live_bytes_at_exit": d["live_bytes_at_exit"],
        "peak_bytes": d["peak_bytes"],
        "exit_status": p["exit_status"],
    })
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn a_capped_run_stays_under_its_cap_with_every_count_whole() {
    let (_, whole) = run_pairs("fold-whole", &["--max-size", "unlimited"]);
    let (output, folded) = run_pairs("fold-capped", &["--max-size", "256KiB"]);
    assert!(
        file_size(&whole) > 1 << 20,
        "the whole trace is {} bytes",
        file_size(&whole)
    );
    assert!(
        file_size(&folded) <= 256 << 10,
        "the capped trace is {} bytes",
        file_size(&folded)
    );
    let said = stderr(&output);
    assert!(
        said.contains("records folded into summaries to keep it under its size cap"),
        "{said}"
    );
    let (whole_report, _) = report_json(&whole);
    let (report, _) = report_json(&folded);
    let expected = json!({"complete": true, "lost_events": 0, "allocations": 100_000, "frees": 100_000,
        "live_bytes_at_exit": 0, "peak_bytes": 8192, "exit_status": 0});
    assert_eq!(whole_run_figures(&whole_report), expected);
    assert_eq!(whole_run_figures(&report), expected);
    assert_eq!(whole_report["folded"], Value::Null);
    let fold = &report["folded"];
    assert!(fold["detail_from_s"].as_f64().unwrap() > 0.0, "{fold}");
    assert!(fold["detail_from_s"].as_f64() <= fold["end_s"].as_f64(), "{fold}");
    // Each event is in detail or folded, none lost and none twice.
    let in_detail = report["processes"][0]["events"].as_u64().unwrap();
    assert_eq!(fold["folded_events"].as_u64().unwrap() + in_detail, 200_000);
    // The text report and every command say which span is in detail.
    let text = cudatrace(&["report", folded.to_str().unwrap()]).output().unwrap();
    let out = String::from_utf8_lossy(&text.stdout);
    let line = out.lines().nth(1).unwrap();
    assert!(line.starts_with("detail from "), "{out}");
    assert!(line.contains(" to the end ("), "{line}");
    assert!(stderr(&text).contains(": detail from "), "{}", stderr(&text));
    let pickles = folded.with_file_name("snap");
    let snapshot = cudatrace(&["snapshot", "-o", pickles.to_str().unwrap(), folded.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(snapshot.status.code(), Some(0), "{}", stderr(&snapshot));
    assert!(
        stderr(&snapshot).starts_with(
            "cudatrace: the trace was folded to stay under its size cap: the snapshot shows its detail, from "
        ),
        "{}",
        stderr(&snapshot)
    );
}

#[test]
fn a_peak_long_before_the_end_and_the_state_after_it_stay_exact() {
    // `training` with a leak: every step's output is kept, so the peak is
    // at the end; without the leak the peak is in the first steps, which
    // a small cap folds away.
    let run = |label: &str, cap: &str| {
        let (mut command, trace) = run_program(label, &fake_cuda::program("torch_like"), &["--max-size", cap]);
        command.arg(fake_cuda::torch_library("211")).arg("training");
        let output = command.env("FAKE_TORCH_STEPS", "400").output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        trace
    };
    let (whole, folded) = (run("fold-train-whole", "unlimited"), run("fold-train-capped", "64KiB"));
    assert!(file_size(&folded) <= 64 << 10, "{} bytes", file_size(&folded));
    let (a, _) = report_json(&whole);
    let (b, _) = report_json(&folded);
    assert!(b["folded"]["folded_events"].as_u64().unwrap() > 1000, "{}", b["folded"]);
    let figures = |report: &Value| {
        let p = main_process(report);
        let tensors = &p["tensors"]["devices"][0];
        json!({
            "lost": report["lost_events"],
            "devices": p["devices"],
            "allocated_peak": tensors["allocated_peak_bytes"],
            "reserved_peak": tensors["reserved_peak_bytes"],
            "allocated_at_exit": tensors["allocated_bytes_at_exit"],
            "tensor_allocations": tensors["allocations"],
            "tensor_frees": tensors["frees"],
        })
    };
    assert_eq!(figures(&b), figures(&a));
    assert_eq!(figures(&a)["lost"], 0);
    assert!(figures(&a)["allocated_peak"].as_u64() > Some(0));
    // Three parameters, then per step: activations, an output, a gradient
    // or two (see torch_like.cpp's `training`).
    assert!(figures(&a)["tensor_allocations"].as_u64() > Some(2000));
}

#[test]
fn a_size_that_is_not_one_is_refused_in_one_line_before_anything_runs() {
    let output = cudatrace_run()
        .args(["--max-size", "lots", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let said = stderr(&output);
    assert!(
        said.eq(
            "cudatrace: invalid value 'lots' for '--max-size <SIZE>': 'lots' is not a size (a number of bytes, K, M, G or T, with iB or B, such as 2GiB, 500MB or unlimited) (see --help)\n"
        ),
        "{said}"
    );
    // A negative number is a value, not an option.
    let output = cudatrace_run()
        .args(["--max-size", "-5", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "cudatrace: invalid value '-5' for '--max-size <SIZE>': '-5' is not a size (a number of bytes, K, M, G or T, with iB or B, such as 2GiB, 500MB or unlimited) (see --help)\n"
    );
    let output = cudatrace_run()
        .args(["--", "true"])
        .env("CUDATRACE_MAX_SIZE", "1KiB")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "cudatrace: CUDATRACE_MAX_SIZE: '1KiB' is too small: a trace needs at least 64KiB\n"
    );
}

#[test]
fn collect_of_a_folded_trace_and_the_spools_left_returns_every_count() {
    let scenarios = fake_cuda::program("scenarios");
    let (mut command, trace) = run_program("fold-killed", &scenarios, &["--max-size", "256KiB"]);
    command.args(["pairs", "100000", "wait"]);
    let started = start_with_spools_in(&mut command, &trace.parent().unwrap().join("spools"));
    let run_dir = started.run_dir.clone();
    // Most chunks given back: the trace has been folded by then (it passed
    // its cap several times over).
    assert!(wait_for_header(&started.spool, |h| h.released_records >= 10 * 16384));
    started.kill_collector_and_let_the_program_end();
    let (before, _) = report_json(&trace);
    assert!(
        before["folded"]["folded_events"].as_u64() > Some(0),
        "{}",
        before["folded"]
    );
    let output = cudatrace(&["collect", run_dir.to_str().unwrap()]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json(&trace);
    assert_eq!(
        whole_run_figures(&report),
        json!({"complete": true, "lost_events": 0, "allocations": 100_000, "frees": 100_000,
               "live_bytes_at_exit": 0, "peak_bytes": 8192, "exit_status": 0})
    );
    // `collect` kept the run's cap, folding again where the spools' events
    // took the trace past it: the detail starts where it did or later.
    assert!(file_size(&trace) <= 256 << 10, "{} bytes", file_size(&trace));
    let from = |r: &Value| r["folded"]["detail_from_s"].as_f64().unwrap();
    assert!(
        from(&report) >= from(&before),
        "{} then {}",
        from(&before),
        from(&report)
    );
}

#[test]
fn state_larger_than_the_cap_is_kept_whole_and_said() {
    // `loop`: 50,000 allocations of 8 KiB live at the end, more state than
    // 256 KiB of trace can hold. Nothing is lost, and the run says so.
    let scenarios = fake_cuda::program("scenarios");
    let (mut command, trace) = run_program("fold-too-much-live", &scenarios, &["--max-size", "256KiB"]);
    let output = command.args(["loop", "100000", "1"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.contains("cudatrace: the memory live at the peaks, at the OOMs and at the end took ")
            && said.contains("more than its size cap leaves room for; the trace may be larger than asked"),
        "{said}"
    );
    let (report, _) = report_json(&trace);
    assert_eq!(
        whole_run_figures(&report),
        json!({"complete": true, "lost_events": 0, "allocations": 100_000, "frees": 50_000,
               "live_bytes_at_exit": 819_200_000, "peak_bytes": 819_208_192, "exit_status": 0})
    );
}

/// `torch_like training` of `steps` steps (leaking each step's output
/// when `leak`) under `--max-size cap`: the main process's steps, without
/// their times, and its growing call sites.
fn steps_and_growing(label: &str, steps: u32, leak: bool, cap: &str) -> (Value, Value, Value) {
    let (mut command, trace) = run_program(label, &fake_cuda::program("torch_like"), &["--max-size", cap]);
    command.arg(fake_cuda::torch_library("211")).arg("training");
    command.env("FAKE_TORCH_STEPS", steps.to_string());
    if leak {
        command.env("FAKE_TORCH_LEAK", "1");
    }
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json_with_stacks(&trace);
    let p = main_process(&report);
    let mut rows = p["steps"]["steps"].clone();
    for row in rows.as_array_mut().unwrap() {
        let row = row.as_object_mut().unwrap();
        row.remove("start_s");
        row.remove("duration_s");
    }
    (
        json!({"count": p["steps"]["count"], "rows": rows}),
        p["growing"].clone(),
        report["folded"].clone(),
    )
}

/// Whether `folded`'s step rows are `whole`'s, merged into ranges where a
/// fold had to: each range keeps the highest peak of its steps and the end
/// figures of its last.
fn rows_merge(whole: &Value, folded: &Value) -> Result<(), String> {
    let whole = whole["rows"].as_array().unwrap();
    let mut next = 1;
    for row in folded["rows"].as_array().unwrap() {
        let (first, last) = (row["first"].as_u64().unwrap(), row["last"].as_u64().unwrap());
        if first != next {
            return Err(format!("a range starts at {first}, not {next}"));
        }
        let span = &whole[first as usize - 1..last as usize];
        let mut expected = span.last().unwrap().clone();
        expected["first"] = json!(first);
        let peak = span
            .iter()
            .map(|r| r["devices"][0]["allocated_peak_bytes"].as_u64().unwrap())
            .max();
        expected["devices"][0]["allocated_peak_bytes"] = json!(peak);
        let mut row = row.clone();
        if expected["complete"] == false {
            // The last step, after the loop: where a fold went through it
            // after holding its start once, its end is measured after part
            // of the program's cleanup (docs/usage.md, "Long runs").
            for figure in ["allocated_bytes_at_end", "reserved_bytes_at_end"] {
                row["devices"][0][figure] = expected["devices"][0][figure].clone();
            }
        }
        if row != expected {
            return Err(format!("steps {first} to {last}: {row} against {expected}"));
        }
        next = last + 1;
    }
    (next == whole.len() as u64 + 1)
        .then_some(())
        .ok_or(format!("the ranges end at {}", next - 1))
}

#[test]
fn steps_and_growth_are_those_of_the_whole_run_after_folds() {
    let (whole_steps, whole_growing, _) = steps_and_growing("fold-steps-whole", 400, true, "unlimited");
    let (steps, growing, folded) = steps_and_growing("fold-steps-capped", 400, true, "64KiB");
    assert!(folded["folded_events"].as_u64() > Some(3000), "{folded}");
    assert_eq!((&whole_steps["count"], &steps["count"]), (&json!(400), &json!(400)));
    // Under 64 KiB, the steps' share (a twentieth) holds fewer rows than 400.
    assert!(steps["rows"].as_array().unwrap().len() < 400, "{steps}");
    rows_merge(&whole_steps, &steps).unwrap();
    // The leak: each step's output (1 MiB), kept by the list.
    assert_eq!(whole_growing.as_array().unwrap().len(), 1, "{whole_growing}");
    assert_eq!(whole_growing[0]["bytes_per_step"], 1 << 20);
    // Thinned to the steps' share, the series keep every other step end or
    // fewer: the same site, at the same rate, over fewer points.
    let site = |g: &Value| {
        json!([
            g[0]["call_site"],
            g[0]["bytes_per_step"],
            g[0]["measured_on"],
            g.as_array().unwrap().len()
        ])
    };
    assert_eq!(site(&growing), site(&whole_growing));
    assert!(growing[0]["last_step"].as_u64() >= Some(396), "{growing}");
    // A clean loop, long enough to fold many times: its 3000 steps.
    let (whole_steps, whole_growing, _) = steps_and_growing("fold-steps-long-whole", 3000, false, "unlimited");
    let (steps, growing, folded) = steps_and_growing("fold-steps-long-capped", 3000, false, "256KiB");
    assert!(folded["folded_events"].as_u64() > Some(30_000), "{folded}");
    assert_eq!((&whole_steps["count"], &steps["count"]), (&json!(3000), &json!(3000)));
    rows_merge(&whole_steps, &steps).unwrap();
    assert_eq!((growing, whole_growing), (json!([]), json!([])));
}

#[test]
fn collect_by_hand_folds_to_the_cap_asked_else_to_the_runs() {
    // Spools with no collector (200,000 events, some 2.6 MB of trace).
    let traced = run_traced("fold-by-hand", program("scenarios", &["pairs", "100000"]));
    assert_eq!(traced.output.status.code(), Some(0));
    let dir = traced.spool_paths[0].parent().unwrap().to_owned();
    let collect = |trace: &Path, options: &[&str]| {
        let mut args = vec!["collect", "--keep-spools", "-o", trace.to_str().unwrap()];
        args.extend_from_slice(options);
        args.push(dir.to_str().unwrap());
        let output = cudatrace(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let (report, _) = report_json(trace);
        (report, stderr(&output))
    };
    let whole_figures = json!({"complete": true, "lost_events": 0, "allocations": 100_000, "frees": 100_000,
                               "live_bytes_at_exit": 0, "peak_bytes": 8192, "exit_status": 0});
    // As asked.
    let asked = dir.join("asked.trace");
    let (report, said) = collect(&asked, &["--max-size", "256KiB"]);
    assert!(file_size(&asked) <= 256 << 10, "{} bytes", file_size(&asked));
    assert!(
        report["folded"]["folded_events"].as_u64() > Some(100_000),
        "{}",
        report["folded"]
    );
    assert_eq!(whole_run_figures(&report), whole_figures);
    assert!(
        said.contains("records folded into summaries to keep it under its size cap"),
        "{said}"
    );
    // The run's cap, which its collector left in the folder.
    std::fs::write(dir.join("trace.max-size"), "262144").unwrap();
    let runs = dir.join("runs.trace");
    let (report, _) = collect(&runs, &[]);
    assert!(file_size(&runs) <= 256 << 10, "{} bytes", file_size(&runs));
    assert_eq!(whole_run_figures(&report), whole_figures);
    // A note that is no cap (under 64 KiB) is said and left aside: the
    // default cap, 2 GiB, folds nothing here.
    std::fs::write(dir.join("trace.max-size"), "12").unwrap();
    let noted = dir.join("noted.trace");
    let (report, said) = collect(&noted, &[]);
    assert!(
        said.contains(&format!(
            "cudatrace: {} does not hold a size cap (bytes, at least 64 KiB, or unlimited); collecting with --max-size, CUDATRACE_MAX_SIZE or 2 GiB",
            dir.join("trace.max-size").display()
        )),
        "{said}"
    );
    assert_eq!(report["folded"], Value::Null);
    // Unlimited, asked, over the run's cap: every event in detail.
    let unlimited = dir.join("unlimited.trace");
    let (report, _) = collect(&unlimited, &["--max-size", "unlimited"]);
    assert!(file_size(&unlimited) > 2 << 20, "{} bytes", file_size(&unlimited));
    assert_eq!(report["folded"], Value::Null);
    assert_eq!(report["processes"][0]["events"], 200_000);
    assert_eq!(whole_run_figures(&report), whole_figures);
}

#[test]
fn a_fold_with_no_room_leaves_the_trace_whole_and_nothing_beside_it() {
    // The trace's disk holds 436 KiB, its cap is 512 KiB: the fold due at
    // 410 KiB needs some 100 KiB for its new file beside the old one and
    // finds 26 KiB, so it fails; the trace then fills the disk before
    // the next fold is due. The spools are kept, and collect, elsewhere,
    // recovers every event, all of them in detail.
    let (small, spools, recovered) = small_disk_folders("fold-no-room");
    let script = r#"
        cudatrace=$1 preload=$2 small=$3 spools=$4 recovered=$5; shift 5
        "$cudatrace" run --max-size 512KiB --preload "$preload" -o "$small/run.trace" -- "$@"
        echo "run-exit $?"
        echo "beside $(ls -A "$small" | tr '\n' ' ')"
        "$cudatrace" collect --max-size unlimited -o "$recovered" "$spools"/run-*
        echo "collect-exit $?"
    "#;
    let mut command = std::process::Command::new("sh");
    command
        .args(["-c", script, "sh"])
        .arg(cli())
        .arg(tracer_library())
        .args([&small, &spools, &recovered])
        .args([fake_cuda::program("scenarios").to_str().unwrap(), "pairs", "100000"])
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("CUDATRACE_DIR", &spools);
    let output = on_small_disk(&small, "436k", &command).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let err = stderr(&output);
    assert!(text.contains("run-exit 0\n"), "{text}\n{err}");
    // Only the trace: no fold's file was left beside it.
    assert!(text.contains("beside run.trace \n"), "{text}\n{err}");
    assert!(text.contains("collect-exit 0\n"), "{text}\n{err}");
    assert!(
        err.contains(&format!(
            "cudatrace: cannot write the trace {}: the disk holding {} is full",
            small.join("run.trace").display(),
            small.display()
        )),
        "{err}"
    );
    let (report, _) = report_json(&recovered);
    assert_eq!(
        whole_run_figures(&report),
        json!({"complete": true, "lost_events": 0, "allocations": 100_000, "frees": 100_000,
               "live_bytes_at_exit": 0, "peak_bytes": 8192, "exit_status": 0})
    );
    assert_eq!(report["processes"][0]["events"], 200_000);
}

#[test]
fn collect_folding_while_it_merges_several_processes_keeps_each_ones_figures() {
    // Three processes of two threads, each leaving a spool of some 40,000
    // events; collect merges them one after another and folds in between
    // (under 256 KiB), against the same spools collected unlimited.
    let logs = scratch_dir("fold-merge-logs");
    let traced = run_traced(
        "fold-merge",
        program("scenarios", &["soak", "3", "2", "1", logs.to_str().unwrap(), "20000"]),
    );
    assert_eq!(traced.output.status.code(), Some(0));
    assert_eq!(
        traced.spool_paths.len(),
        3,
        "three children (the parent makes no CUDA call)"
    );
    let dir = traced.spool_paths[0].parent().unwrap().to_owned();
    let collect = |name: &str, cap: &str| {
        let trace = dir.join(name);
        let output = cudatrace(&[
            "collect",
            "--keep-spools",
            "--max-size",
            cap,
            "-o",
            trace.to_str().unwrap(),
        ])
        .arg(&dir)
        .output()
        .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        (report_json(&trace).0, file_size(&trace))
    };
    let (whole, _) = collect("whole.trace", "unlimited");
    let (folded, bytes) = collect("folded.trace", "256KiB");
    assert!(bytes <= 256 << 10, "{bytes} bytes");
    assert!(
        folded["folded"]["folded_events"].as_u64() > Some(0),
        "{}",
        folded["folded"]
    );
    let figures = |report: &Value| -> Vec<Value> {
        let mut processes: Vec<Value> = report["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let d = &p["devices"][0];
                json!([
                    p["pid"],
                    p["exit_status"],
                    d["allocations"],
                    d["frees"],
                    d["peak_bytes"],
                    d["live_bytes_at_exit"]
                ])
            })
            .collect();
        processes.sort_by_key(|p| p[0].as_u64());
        processes
    };
    assert_eq!(figures(&folded), figures(&whole));
    assert_eq!(
        (folded["complete"].clone(), folded["lost_events"].clone()),
        (json!(true), json!(0))
    );
    // The three children allocated, each about 40,000 times.
    let children = figures(&whole).iter().filter(|p| p[2].as_u64() > Some(10_000)).count();
    assert_eq!(children, 3);
}

#[test]
fn a_small_cap_that_folds_often_still_measures_growth_without_steps() {
    // 2 s of a program with no loop under 128 KiB: each fold's span is a
    // fraction of a second, but the run's is 2 s, so it is measured at low
    // points, those the folds kept first.
    let logs = scratch_dir("fold-often-logs");
    let (mut command, trace) = run_program(
        "fold-often",
        &fake_cuda::program("scenarios"),
        &["--max-size", "128KiB"],
    );
    command.args(["soak", "1", "1", "2", logs.to_str().unwrap(), "20000"]);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(file_size(&trace) <= 128 << 10);
    let (report, _) = report_json(&trace);
    let child = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["devices"][0]["allocations"].as_u64() > Some(1000))
        .expect("the soak child");
    assert!(
        child["low_points"]["folded_points"].as_u64() > Some(0),
        "{}",
        child["low_points"]
    );
    assert_eq!(child["steps"], Value::Null);
}

#[test]
fn a_bad_cap_in_a_plain_preload_tree_is_said_with_the_cap_kept() {
    let dir = scratch_dir("fold-bad-env");
    let trace = dir.join("tree.trace");
    let output = std::process::Command::new(fake_cuda::program("scenarios"))
        .args(["pairs", "1000"])
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("LD_PRELOAD", tracer_library())
        .env_remove("CUDATRACE_DIR")
        .env("CUDATRACE_OUT", &trace)
        .env("CUDATRACE_CLI", cli())
        .env("CUDATRACE_MAX_SIZE", "12")
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = finished_trace(&trace);
    assert_eq!(report["processes"][0]["events"], 2000);
    assert!(
        stderr(&output).contains(
            "cudatrace: CUDATRACE_MAX_SIZE: '12' is too small: a trace needs at least 64KiB; the trace keeps the default cap, 2 GiB\n"
        ),
        "{}",
        stderr(&output)
    );
}

/// The issue's ctypes loop, straight on the driver: each step allocates
/// 100 MiB, keeps 4 KiB, allocates and frees 1 MiB three times, and frees
/// the 100 MiB. Its first allocation makes the CUDA context.
const CTYPES_LOOP: &str = r#"import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
def allocate(size):
    pointer = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)) == 0
    return pointer
kept = []
for step in range(int(sys.argv[1])):
    big = allocate(100 << 20)
    kept.append(allocate(4096))
    for _ in range(3):
        cuda.cuMemFree_v2(allocate(1 << 20))
    cuda.cuMemFree_v2(big)
"#;

/// The series named `name` of the page's owner chart: its value in each
/// bin, and at the end; null where the page draws none (it is 0 B
/// throughout).
fn owner_band(html: &str, name: &str) -> Value {
    let chart = &html[html.find("<div class=\"chart owners\"").expect("an owner chart")..];
    let data = &chart[chart.find("class=\"data\">").unwrap() + 13..chart.find("</script>").unwrap()];
    let data: Value = serde_json::from_str(&data.replace("<\\/", "</")).unwrap();
    let series = data["series"].as_array().unwrap();
    match series.iter().find(|s| s["name"] == name) {
        Some(band) => json!([band["values"], band["at_end"]]),
        None => Value::Null,
    }
}

/// Where the memory went in `trace`, as each output says it: the text
/// report's section, `--json`'s footprints, and the page's owner chart
/// (its context and unexplained bands, and its peak line).
fn where_the_memory_went(trace: &Path) -> (String, Value, Value) {
    let text = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let section = &text[text.find("where the memory went").expect("the footprint section")..];
    let section = section[..section.find("\n\n").unwrap_or(section.len())].to_string();
    let (report, _) = report_json_with_stacks(trace);
    let footprints = json!(report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["footprint"].clone())
        .collect::<Vec<_>>());
    let page = trace.with_extension("html");
    let output = cudatrace(&["html", "-o", page.to_str().unwrap(), trace.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let html = std::fs::read_to_string(&page).unwrap();
    let chart = &html[html.find("<div class=\"chart owners\"").unwrap()..];
    let peak_line: u64 = {
        let at = chart.find("data-peak-bytes=\"").unwrap() + 17;
        chart[at..at + chart[at..].find('"').unwrap()].parse().unwrap()
    };
    let page = json!({
        "context": owner_band(&html, "context"),
        "unexplained": owner_band(&html, "unexplained (driver-used less all measured)"),
        "peak_line": peak_line,
    });
    (section, footprints, page)
}

#[test]
fn a_folded_trace_explains_every_byte_as_the_whole_one_does() {
    // The same spools collected whole and under caps that fold the first
    // allocation (made with the context, freed in the first step) away.
    let dir = scratch_dir("fold-explained");
    let script = dir.join("loop.py");
    std::fs::write(&script, CTYPES_LOOP).unwrap();
    let mut python = std::process::Command::new("python3");
    python
        .arg(&script)
        .arg("3000")
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir());
    let traced = run_traced("fold-explained-spools", python);
    assert_eq!(traced.output.status.code(), Some(0), "{}", stderr(&traced.output));
    let spools = traced.spool_paths[0].parent().unwrap().to_owned();
    let collect = |name: &str, cap: &str| {
        let trace = dir.join(name);
        let output = cudatrace(&["collect", "--keep-spools", "--max-size", cap, "-o"])
            .arg(&trace)
            .arg(&spools)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        trace
    };
    let whole = where_the_memory_went(&collect("whole.trace", "unlimited"));
    // Nothing is the context's, every byte is explained.
    let at_exit = &whole.1[0][0]["at_exit"];
    assert_eq!(
        (
            &at_exit["context_bytes"],
            &at_exit["unexplained_bytes"],
            &at_exit["explained_percent"]
        ),
        (&json!(0), &json!(0), &json!(100.0)),
        "{at_exit:#}"
    );
    assert_eq!(at_exit["owners"][0]["bytes"], 3000 * 4096);
    let at_peak = &whole.1[0][0]["at_peak"];
    assert_eq!(
        (
            &at_peak["context_bytes"],
            &at_peak["unexplained_bytes"],
            &at_peak["explained_percent"]
        ),
        (&json!(0), &json!(0), &json!(100.0)),
        "{at_peak:#}"
    );
    for cap in ["128KiB", "256KiB"] {
        let trace = collect(&format!("folded-{cap}.trace"), cap);
        let (report, _) = report_json(&trace);
        assert!(
            report["folded"]["folded_events"].as_u64() > Some(10_000),
            "{cap}: {}",
            report["folded"]
        );
        let folded = where_the_memory_went(&trace);
        assert_eq!(folded.0, whole.0, "{cap}: the text report");
        assert_eq!(folded.1, whole.1, "{cap}: --json");
        assert_eq!(folded.2, whole.2, "{cap}: the page");
    }
}

/// Files named as those a killed `collect` (`.partial`) or a collector
/// killed mid-fold (`.folding`) leaves beside `trace`, with pids that may
/// be anyone's now (this test's own, and init's); one of them being
/// written, its lock held by the returned file; and files that are not
/// the trace's. Each named file holds `bytes` bytes.
fn leftovers_beside(trace: &Path, bytes: usize) -> (Vec<PathBuf>, Vec<PathBuf>, std::fs::File) {
    use std::os::fd::AsRawFd;
    let name = trace.file_name().unwrap().to_str().unwrap();
    let beside = |file: String| trace.with_file_name(file);
    let left = vec![
        beside(format!(".{name}.cudatrace-1.folding")),
        beside(format!(".{name}.cudatrace-{}.partial", std::process::id())),
        beside(format!("..{name}.cudatrace-77.partial.cudatrace-77.folding")),
    ];
    let written = beside(format!(".{name}.cudatrace-2.partial"));
    let kept = vec![
        written.clone(),
        beside(format!(".other-{name}.cudatrace-5.partial")),
        beside(format!(".{name}.cudatrace-x.partial")),
    ];
    for path in left.iter().chain(&kept) {
        std::fs::write(path, vec![7u8; bytes]).unwrap();
    }
    let writer = std::fs::File::open(&written).unwrap();
    // SAFETY: locking a descriptor of ours.
    assert_eq!(unsafe { libc::flock(writer.as_raw_fd(), libc::LOCK_EX) }, 0);
    (left, kept, writer)
}

/// The lines that say the files `left` were removed, in order.
fn removal_lines(left: &[PathBuf], bytes: &str) -> Vec<String> {
    let mut left = left.to_vec();
    left.sort();
    left.iter()
        .map(|path| {
            format!(
                "cudatrace: removed {} ({bytes}), left unfinished by a cudatrace that was stopped while writing it",
                path.display()
            )
        })
        .collect()
}

#[test]
fn files_left_by_killed_writers_are_removed_by_the_next_run_or_collect_and_said() {
    // `run`: the trace's leftovers go before it starts writing.
    let scenarios = fake_cuda::program("scenarios");
    let (mut command, trace) = run_program("fold-leftovers", &scenarios, &["--max-size", "256KiB"]);
    let (left, kept, writer) = leftovers_beside(&trace, 6 << 10);
    let output = command.args(["pairs", "1000"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let said: Vec<String> = stderr(&output)
        .lines()
        .filter(|l| l.starts_with("cudatrace: removed "))
        .map(String::from)
        .collect();
    assert_eq!(said, removal_lines(&left, "6.0 KiB"));
    assert!(left.iter().all(|path| !path.exists()), "{left:?}");
    assert!(kept.iter().all(|path| path.exists()), "{kept:?}");
    drop(writer);
    // `collect` by hand: the destination's leftovers go too, the one whose
    // writer has since gone among them.
    let traced = run_traced("fold-leftovers-collect", program("scenarios", &["pairs", "1000"]));
    let spools = traced.spool_paths[0].parent().unwrap().to_owned();
    let collected = spools.join("collected.trace");
    let (mut left, kept, writer) = leftovers_beside(&collected, 100);
    drop(writer);
    left.push(kept[0].clone());
    let output = cudatrace(&["collect", "--keep-spools", "-o", collected.to_str().unwrap()])
        .arg(&spools)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let said: Vec<String> = stderr(&output)
        .lines()
        .filter(|l| l.starts_with("cudatrace: removed "))
        .map(String::from)
        .collect();
    assert_eq!(said, removal_lines(&left, "100 B"));
    assert!(left.iter().all(|path| !path.exists()), "{left:?}");
    assert!(kept[1..].iter().all(|path| path.exists()), "{kept:?}");
    let (report, _) = report_json(&collected);
    assert_eq!(report["processes"][0]["events"], 2000);
}

/// `scenarios pairs 100000` under `--max-size cap`, its folder watched
/// while it runs: the most bytes the trace and the new file of a fold
/// beside it were seen to take at once, and the trace.
fn most_bytes_while_running(label: &str, cap: &str) -> (u64, PathBuf) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let (mut command, trace) = run_program(label, &fake_cuda::program("scenarios"), &["--max-size", cap]);
    command.args(["pairs", "100000"]);
    let folder = trace.parent().unwrap().to_owned();
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut most = 0;
            while !done.load(Ordering::Relaxed) {
                let seen: u64 = std::fs::read_dir(&folder)
                    .unwrap()
                    .filter_map(Result::ok)
                    .filter(|entry| {
                        let name = entry.file_name().to_string_lossy().into_owned();
                        name == "run.trace" || (name.starts_with(".run.trace.cudatrace-") && name.ends_with(".folding"))
                    })
                    .filter_map(|entry| entry.metadata().ok())
                    .map(|metadata| metadata.len())
                    .sum();
                most = most.max(seen);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            most
        })
    };
    let output = command.output().unwrap();
    done.store(true, Ordering::Relaxed);
    let most = watcher.join().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // The state is one allocation at most: nothing to say.
    assert!(!stderr(&output).contains("larger than asked"), "{}", stderr(&output));
    (most, trace)
}

#[test]
fn under_every_cap_the_trace_and_its_folds_file_stay_within_the_cap_and_a_tenth() {
    // Spool batches of some 250 KB, each of which once went to the trace
    // whole before the fold size was looked at.
    for (cap, bytes) in [("64KiB", 64u64 << 10), ("256KiB", 256 << 10), ("1MiB", 1 << 20)] {
        let (most, trace) = most_bytes_while_running(&format!("fold-bound-{cap}"), cap);
        assert!(most <= bytes + bytes / 10, "{cap}: {most} bytes at once");
        // The watcher saw the trace near its fold size.
        assert!(most >= bytes / 2, "{cap}: {most} bytes at most");
        assert!(file_size(&trace) <= bytes, "{cap}: {} bytes", file_size(&trace));
        let (report, _) = report_json(&trace);
        assert_eq!(
            whole_run_figures(&report),
            json!({"complete": true, "lost_events": 0, "allocations": 100_000, "frees": 100_000,
                   "live_bytes_at_exit": 0, "peak_bytes": 8192, "exit_status": 0}),
            "{cap}"
        );
    }
}
