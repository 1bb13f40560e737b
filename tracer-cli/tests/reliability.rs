//! No event is lost, and the traced program never pays for cudatrace's
//! failures: live reading under load, full disks, file size limits, a killed
//! collector, damaged spools. Every count is checked exactly against what
//! the program itself did.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Device bytes for the fake driver: enough for every loop.
const ROOMY: &str = "1099511627776";

/// (allocations, frees, live bytes) from the loop scenario's own line.
fn loop_log(stdout: &str) -> (u64, u64, u64) {
    let number = |i| field(stdout, "loop", i).parse::<u64>().unwrap();
    (number(1), number(3), number(5))
}

/// The counts a report must show for a loop that lost nothing.
fn exact(stdout: &str, exit_status: i32) -> Value {
    let (allocations, frees, live) = loop_log(stdout);
    json!({
        "complete": true,
        "lost_events": 0,
        "events": allocations + frees,
        "allocations": allocations,
        "frees": frees,
        "live_bytes_at_exit": live,
        "exit_status": exit_status,
    })
}

/// `cudatrace run [options] -o DIR/run.trace -- PROGRAM...` in a fresh folder.
fn run_program(label: &str, options: &[&str], program: &[&str]) -> (Command, PathBuf, PathBuf) {
    let dir = scratch_dir(label);
    let trace = dir.join("run.trace");
    let mut command = cudatrace_run();
    command.arg("-o").arg(&trace).args(options).arg("--").args(program);
    command.env("TMPDIR", &dir).env("FAKE_CUDA_CAPACITY", ROOMY);
    (command, trace, dir)
}

fn scenarios() -> String {
    fake_cuda::program("scenarios").display().to_string()
}

#[test]
fn a_tight_allocation_loop_read_live_loses_nothing_run_after_run() {
    for round in 0..5 {
        let (mut command, trace, dir) = run_program(
            &format!("loop-{round}"),
            &[],
            &[&scenarios(), "loop", "100000", "1", "wait"],
        );
        let mut run = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut out = wait_for_line(&mut run, "ready");
        // The program waits, its 150,000 records written: the collector reads
        // them while it lives, and gives back the nine whole chunks once they
        // are safely in the trace.
        let spool = run_spools(&dir).pop().unwrap();
        assert!(
            wait_for_header(&spool, |h| h.released_records == 9 * 16384),
            "round {round}"
        );
        drop(run.stdin.take());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let status = run.wait().unwrap();
        assert_eq!(status.code(), Some(0), "round {round}");
        let (report, _) = report_json(&trace);
        let expected = json!({"complete": true, "lost_events": 0, "events": 150_000, "allocations": 100_000,
                              "frees": 50_000, "live_bytes_at_exit": 819_200_000, "exit_status": 0});
        assert_eq!(counts(&report), expected, "round {round}");
        assert_eq!(report["processes"][0]["unfinished_records"], 0);
    }
}

#[test]
fn many_threads_read_live_lose_nothing() {
    for round in 0..3 {
        let (mut command, trace, _) =
            run_program(&format!("threads-{round}"), &[], &[&scenarios(), "loop", "25000", "8"]);
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(loop_log(&text).0, 200_000);
        let (report, _) = report_json(&trace);
        assert_eq!(counts(&report), exact(&text, 0), "round {round}");
    }
}

#[test]
fn a_full_spool_disk_drops_events_counted_with_their_reason_and_the_program_runs_on() {
    let (mut command, trace, dir) = run_program("full-spools", &["--keep-spools"], &[&scenarios(), "loop", "100000"]);
    let spools = dir.join("spools");
    std::fs::create_dir(&spools).unwrap();
    // Rate-limited device readings come at times the counts below cannot know.
    command.env("CUDATRACE_DIR", &spools).env("CUDATRACE_SAMPLES", "0");
    let output = on_small_disk(&spools, "2m", &command).output().unwrap();
    // The program ran to its end and exited as it would untraced.
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(loop_log(&text), (100_000, 50_000, 819_200_000));
    // Header and first chunk fit in 2 MiB; the second chunk does not. Kept
    // spools give nothing back, so every record after the first chunk is
    // dropped. The stack records all come early, in the first chunk.
    let (report, _) = report_json(&trace);
    let p = &report["processes"][0];
    assert_eq!(report["complete"], true);
    let stack_records = stack_records_in(&trace);
    assert_eq!(p["events"], 16_384 - stack_records);
    assert_eq!(p["lost_events"], 150_000 - (16_384 - stack_records));
    assert_eq!(p["dropped_events"], 150_000 - (16_384 - stack_records));
    assert_eq!(p["drop_reason"], "ENOSPC: No space left on device");
    assert_eq!(
        (&p["unfinished_records"], &p["damaged_records"]),
        (&json!(0), &json!(0))
    );
    assert_eq!(report["lost_events"], 150_000 - (16_384 - stack_records));
    let lines: Vec<String> = stderr(&output).lines().map(str::to_owned).collect();
    let run_dir = format!("{}/run-", spools.display());
    let said = |start: &str, end: &str| {
        lines
            .iter()
            .filter(|l| l.starts_with(start) && l.ends_with(end))
            .count()
    };
    assert_eq!(
        said(
            &format!(
                "cudatrace: {} events could not be recorded: no room for spools in {run_dir}",
                150_000 - (16_384 - stack_records)
            ),
            "(ENOSPC: No space left on device)"
        ),
        1,
        "{lines:?}"
    );
    let pid = p["pid"].as_u64().unwrap();
    assert_eq!(
        said(
            &format!("cudatrace: pid {pid} cannot store events in {run_dir}"),
            "(ENOSPC: No space left on device); they are being lost"
        ),
        1,
        "{lines:?}"
    );
    let text_report = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    let lost = 150_000 - (16_384 - stack_records);
    assert!(
        String::from_utf8_lossy(&text_report.stdout).contains(&format!(
            "LOST {lost} events: {lost} could not be stored (ENOSPC: No space left on device)"
        )),
        "{}",
        String::from_utf8_lossy(&text_report.stdout)
    );
}

#[test]
fn recording_resumes_once_the_collector_gives_spool_space_back() {
    // 40,000 pairs on a 2 MiB disk, which holds one chunk: the rest fit only
    // as the collector gives chunks back. The program waits for that after
    // each drop, so the outcome does not depend on how busy the machine is.
    let dir = scratch_dir("full-spools-live");
    let spools = dir.join("spools");
    std::fs::create_dir(&spools).unwrap();
    let (mut command, trace, _) = run_program("full-spools-live-run", &[], &[&scenarios(), "space-back", "40000"]);
    // Rate-limited device readings come at times the counts below cannot know.
    command.env("CUDATRACE_DIR", &spools).env("CUDATRACE_SAMPLES", "0");
    let output = on_small_disk(&spools, "2m", &command).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let value = |key: &str| -> u64 { field(&text, key.trim_end(), 0).parse().unwrap() };
    let (allocations, frees, waits) = (value("allocations "), value("frees "), value("waits "));
    assert_eq!((allocations, frees), (40_001, 40_001));
    let (report, _) = report_json(&trace);
    assert_eq!(report["complete"], true);
    let p = &report["processes"][0];
    let (events, lost, dropped) = (
        p["events"].as_u64().unwrap(),
        p["lost_events"].as_u64().unwrap(),
        p["dropped_events"].as_u64().unwrap(),
    );
    // Every event is in the trace or counted as dropped, with its reason...
    assert_eq!(events + lost, allocations + frees);
    assert_eq!(lost, dropped);
    assert!(waits >= 3, "the disk filled only {waits} times");
    assert_eq!(p["drop_reason"], "ENOSPC: No space left on device");
    // ... and recording went on after each drop: at most the rest of a
    // batch of 500 pairs is dropped each time the disk fills.
    assert!(
        dropped <= waits * 1_000,
        "{dropped} dropped in {waits} fills of the disk"
    );
}

#[test]
fn a_full_tmpfs_never_faults_the_collector_reading_its_spools() {
    // More chunks than the disk can hold, none kept: chunks of dropped
    // records must not leave holes a reader faults on.
    let (mut command, trace, dir) = run_program("full-tmpfs", &[], &[&scenarios(), "loop", "300000", "2"]);
    let spools = dir.join("spools");
    std::fs::create_dir(&spools).unwrap();
    // Rate-limited device readings come at times the counts below cannot know.
    command.env("CUDATRACE_DIR", &spools).env("CUDATRACE_SAMPLES", "0");
    let output = on_small_disk(&spools, "2m", &command).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let (allocations, frees, _) = loop_log(&text);
    let (report, _) = report_json(&trace);
    assert_eq!(report["complete"], true);
    let p = &report["processes"][0];
    let (events, lost) = (p["events"].as_u64().unwrap(), p["lost_events"].as_u64().unwrap());
    assert_eq!(events + lost, allocations + frees);
    assert_eq!(p["dropped_events"].as_u64().unwrap(), lost);
}

#[test]
fn a_file_size_limit_drops_events_and_never_raises_sigxfsz_in_the_program() {
    // 1.5 MiB: the header and one chunk fit, so the spool is a ring of one
    // place: each chunk waits for the collector to empty the place of the
    // one before, and the records meanwhile are dropped.
    let (mut command, trace, _) = run_program(
        "fsize",
        &[],
        &[
            "prlimit",
            "--fsize=1572864:1572864",
            &scenarios(),
            "loop",
            "100000",
            "1",
            "7",
        ],
    );
    command.env("CUDATRACE_SAMPLES", "0");
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(loop_log(&text), (100_000, 50_000, 819_200_000));
    let (report, _) = report_json(&trace);
    let p = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["events"] != 0)
        .unwrap();
    let stack_records = stack_records_in(&trace);
    let (events, lost) = (p["events"].as_u64().unwrap(), p["lost_events"].as_u64().unwrap());
    // Every event is in the trace or counted as dropped, with the reason;
    // recording went on past the first chunk as places were emptied (how
    // far depends on how fast the collector is).
    assert_eq!(events + lost, 150_000);
    assert_eq!(p["dropped_events"], lost);
    assert!(lost > 0, "a ring of one place must drop while it is emptied");
    assert!(events >= 16_384 - stack_records, "{events}");
    assert_eq!(p["drop_reason"], "EFBIG: File too large");
    assert_eq!(p["exit_status"], 7);
}

#[test]
fn a_full_trace_disk_keeps_the_spools_and_collect_recovers_every_event() {
    let (small, spools, recovered) = small_disk_folders("full-trace");
    // Inside one namespace: the run, whose trace fills a 256 KiB disk, then
    // the recovery, which reads what that trace holds and the kept spools.
    let script = r#"
        cudatrace=$1 preload=$2 small=$3 spools=$4 recovered=$5; shift 5
        "$cudatrace" run --preload "$preload" -o "$small/run.trace" -- "$@"
        echo "run-exit $?"
        "$cudatrace" collect -o "$recovered" "$spools"/run-*
        echo "collect-exit $?"
    "#;
    let mut command = Command::new("sh");
    command
        .args(["-c", script, "sh"])
        .arg(cli())
        .arg(tracer_library())
        .args([&small, &spools, &recovered])
        .args([&scenarios(), "loop", "100000", "1", "3"])
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("FAKE_CUDA_CAPACITY", ROOMY)
        .env("CUDATRACE_DIR", &spools);
    let output = on_small_disk(&small, "256k", &command).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let err = stderr(&output);
    // cudatrace failed, and said so, but exited with the command's status.
    assert_eq!(field(&text, "run-exit", 0), "3", "{err}");
    assert_eq!(field(&text, "collect-exit", 0), "0", "{err}");
    let trace = small.join("run.trace");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.contains(
            &format!(
                "cudatrace: cannot write the trace {}: the disk holding {} is full (ENOSPC: No space left on device)",
                trace.display(),
                small.display()
            )
            .as_str()
        ),
        "{err}"
    );
    let kept = lines
        .iter()
        .find(|l| l.starts_with(&format!("cudatrace: the spools are kept in {}/run-", spools.display())))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        kept.ends_with(&format!(
            "finishes {} (the command exited with status 3)",
            trace.display()
        )),
        "{kept}"
    );
    let (report, _) = report_json(&recovered);
    assert_eq!(counts(&report), exact(&text, 3));
    assert_eq!(report["processes"].as_array().unwrap().len(), 1);
}

#[test]
fn collect_after_the_collector_is_killed_returns_every_event() {
    let (mut command, trace, dir) =
        run_program("killed-collector", &[], &[&scenarios(), "loop", "100000", "1", "wait"]);
    let started = start_with_spools_in(&mut command, &dir.join("spools"));
    let run_dir = started.run_dir.clone();
    // Wait until the collector has given spool chunks back: their events are
    // then only in its trace.
    assert!(wait_for_header(&started.spool, |h| h.released_records > 0));
    // The program runs on after the kill, to its end.
    started.kill_collector_and_let_the_program_end();
    let output = cudatrace(&["collect", run_dir.to_str().unwrap()]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // By default the trace the collector was writing is completed in place.
    assert!(
        stderr(&output).starts_with(&format!(
            "cudatrace: wrote {} (1 process, 150000 events,",
            trace.display()
        )),
        "{}",
        stderr(&output)
    );
    let (report, _) = report_json(&trace);
    assert_eq!(
        counts(&report),
        json!({"complete": true, "lost_events": 0, "events": 150_000, "allocations": 100_000,
               "frees": 50_000, "live_bytes_at_exit": 819_200_000, "exit_status": 0})
    );
    // Everything is in the trace now: the spools are gone, the folder stays.
    assert!(spool_files(&run_dir).is_empty());
    assert!(run_dir.is_dir());
}

/// Writes `bytes` at `offset` of `path`.
fn overwrite(path: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, offset).unwrap();
}

#[test]
fn collect_marks_damaged_spools_and_the_report_shows_it() {
    let dir = scratch_dir("damaged-spools");
    // Spools only (no collector): a parent and its forked child.
    let run = {
        let mut command = program("scenarios", &["fork"]);
        command.env("LD_PRELOAD", tracer_library()).env("CUDATRACE_DIR", &dir);
        command.output().unwrap()
    };
    assert!(run.status.success());
    let text = String::from_utf8_lossy(&run.stdout).into_owned();
    let parent_pid: u64 = field(&text, "parent", 0).parse().unwrap();
    let child_pid: u64 = field(&text, "child", 0).parse().unwrap();
    let spools = spool_files(&dir);
    let by_pid = |pid: u64| {
        spools
            .iter()
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with(&format!("cudatrace-{pid}-"))
            })
            .unwrap()
            .clone()
    };
    // The parent's first memory event loses a byte of its size; the child's header its magic.
    let first_event = cudatrace_events::SpoolReader::read_path(&by_pid(parent_pid))
        .unwrap()
        .events
        .iter()
        .find(|e| e.op.is_memory_event())
        .unwrap()
        .seq;
    let record_size = cudatrace_events::layout::RECORD_SIZE as u64;
    overwrite(&by_pid(parent_pid), 4096 + first_event * record_size + 24, &[0xee]);
    overwrite(&by_pid(child_pid), 0, b"XXXXXXXX");
    let trace = dir.join("out.trace");
    let output = cudatrace(&["collect", "-o", trace.to_str().unwrap(), dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json(&trace);
    assert_eq!(
        report["damaged_spools"],
        json!([{"pid": child_pid, "image": 0, "path": by_pid(child_pid).display().to_string(),
                "reason": "not a cudatrace spool file (bad magic)"}])
    );
    let parent = &report["processes"][0];
    assert_eq!(parent["pid"], parent_pid);
    assert_eq!(
        (&parent["events"], &parent["damaged_records"], &parent["lost_events"]),
        (&json!(1), &json!(1), &json!(1))
    );
    assert_eq!(report["lost_events"], 1);
    let text_report = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    let shown = String::from_utf8_lossy(&text_report.stdout);
    assert!(shown.contains("LOST 1 event: 1 was damaged in the spool"), "{shown}");
    assert!(
        shown.contains(&format!(
            "pid {child_pid} (image 0): spool {} could not be read: not a cudatrace spool file (bad magic)",
            by_pid(child_pid).display()
        )),
        "{shown}"
    );
    // Damaged spools are kept for a look.
    assert_eq!(spool_files(&dir).len(), 2);
    assert!(
        stderr(&output).contains("1 spool file could not be read"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_vmm_handle_released_while_mapped_is_freed_at_its_last_unmap() {
    let (output, trace) = run_scenario("vmm-release", "vmm-release-mapped", &[]);
    assert!(output.status.success());
    let live_handle = hex(field(&String::from_utf8_lossy(&output.stdout), "live-handle", 0));
    let (report, _) = report_json(&trace);
    let device = &report["processes"][0]["devices"][0];
    // Two created, one gone at its unmap; the other is still mapped at exit.
    assert_eq!((&device["allocations"], &device["frees"]), (&json!(2), &json!(1)));
    assert_eq!(
        device["live_at_exit"],
        json!([{"address": live_handle, "size": 2 << 20, "api": "cuMemCreate", "kind": "vmm-physical"}])
    );
    assert_eq!(device["live_bytes_at_exit"], 2 << 20);
}

#[test]
fn allocations_on_an_unknown_device_are_counted_apart_from_device_0() {
    let (mut command, trace, _) = run_program("unknown-device", &[], &[&scenarios(), "loop", "10"]);
    let output = command.env("FAKE_CUDA_NO_CONTEXT", "1").output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let (report, _) = report_json(&trace);
    let devices = report["processes"][0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["device"], Value::Null);
    assert_eq!(
        (&devices[0]["allocations"], &devices[0]["frees"]),
        (&json!(10), &json!(5))
    );
    assert_eq!(devices[0]["live_at_exit"].as_array().unwrap().len(), 5);
    let text = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("  unknown device: 10 allocations, 5 frees,"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
}

#[test]
fn collect_while_a_process_runs_keeps_its_spool_for_a_later_collect() {
    let dir = scratch_dir("collect-running");
    let mut command = program("scenarios", &["loop", "1000", "1", "wait"]);
    let mut running = command
        .env("LD_PRELOAD", tracer_library())
        .env("CUDATRACE_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let _out = wait_for_line(&mut running, "ready");
    let trace = dir.join("early.trace");
    let output = cudatrace(&["collect", "-o", trace.to_str().unwrap(), dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(&format!(
            "cudatrace: 1 traced process is still running; their spools are kept in {}: collect again once they are done",
            dir.display()
        )),
        "{}",
        stderr(&output)
    );
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"][0]["still_running"], true);
    assert_eq!(report["processes"][0]["events"], 1500);
    assert_eq!(spool_files(&dir).len(), 1);
    drop(running.stdin.take());
    assert!(running.wait().unwrap().success());
    let output = cudatrace(&[
        "collect",
        "--force",
        "-o",
        trace.to_str().unwrap(),
        dir.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json(&trace);
    assert_eq!(
        counts(&report),
        json!({"complete": true, "lost_events": 0, "events": 1500, "allocations": 1000, "frees": 500,
               "live_bytes_at_exit": 8_192_000, "exit_status": 0})
    );
    assert!(spool_files(&dir).is_empty());
}

#[test]
fn collect_refuses_a_folder_whose_collector_is_still_writing() {
    let (mut command, trace, dir) = run_program("live-collector", &[], &[&scenarios(), "wait"]);
    let spools = dir.join("spools");
    std::fs::create_dir(&spools).unwrap();
    let mut run = command
        .env("CUDATRACE_DIR", &spools)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let _out = wait_for_line(&mut run, "ready");
    let run_dir = std::fs::read_dir(&spools).unwrap().next().unwrap().unwrap().path();
    // The program may be ready before its collector has named its trace.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !run_dir.join("trace.path").exists() {
        assert!(Instant::now() < deadline, "the collector never named its trace");
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = cudatrace(&["collect", run_dir.to_str().unwrap()]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: {} is still being written by a running cudatrace, which collects {}; let it finish first\n",
            trace.display(),
            run_dir.display()
        )
    );
    assert_eq!(spool_files(&run_dir).len(), 1);
    // SAFETY: signalling our own child; cudatrace passes SIGTERM on.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    assert_eq!(run.wait().unwrap().code(), Some(143));
    let (report, _) = report_json(&trace);
    assert_eq!(report["complete"], true);
    assert_eq!(report["processes"][0]["events"], 1);
}

/// Stack nodes and blobs in a trace.
fn stack_records_in(trace: &std::path::Path) -> u64 {
    let file = std::io::BufReader::new(std::fs::File::open(trace).unwrap());
    cudatrace_trace::TraceReader::new(file)
        .unwrap()
        .map(|record| match record.unwrap() {
            cudatrace_trace::Record::Events { events, .. } => {
                events.iter().filter(|e| !e.op.is_memory_event()).count() as u64
            }
            _ => 0,
        })
        .sum()
}

/// Free bytes of the disk holding `path`.
fn free_bytes(path: &Path) -> u64 {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs is plain data, valid all zero.
    let mut disk: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    let status = unsafe { libc::statvfs(c_path.as_ptr(), &mut disk) };
    assert_eq!(status, 0);
    disk.f_bavail * disk.f_frsize
}

#[test]
fn the_collector_makes_chunk_places_ready_ahead_of_a_live_writer_and_gives_back_those_never_used() {
    use cudatrace_events::layout::{CHUNK_BYTES, HEADER_SIZE};
    let chunks = |n: u64| HEADER_SIZE as u64 + n * CHUNK_BYTES as u64;
    // 12,000 allocations and 6,000 frees, and the stack records: the writer
    // fills chunk 0 and writes into chunk 1, then waits.
    let (mut command, trace, dir) = run_program(
        "preparer",
        &["--keep-spools"],
        &[&scenarios(), "loop", "12000", "1", "wait"],
    );
    // The preparer leaves the disk's last 256 MiB alone. Other tests write
    // beside this one, so a disk near that line may go either way.
    let free = free_bytes(&dir);
    let room = free >= chunk_preparer_spare() + 6 * CHUNK_BYTES as u64 + (64 << 20);
    let no_room = free < chunk_preparer_spare() + CHUNK_BYTES as u64;
    let mut run = command
        .env("CUDATRACE_SAMPLES", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = wait_for_line(&mut run, "ready");
    let spool = run_spools(&dir).pop().unwrap();
    assert!(wait_for_header(&spool, |h| h.reserved_seqs > 16_384 && h.reserved_seqs < 2 * 16_384));
    // The places of the four chunks past the one being written (2 to 5) are
    // made ready by the collector: the writer itself has grown the file to
    // chunk 1 only. On a disk without room to spare, none are.
    let ahead = if no_room { chunks(2) } else { chunks(6) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&spool).unwrap().len() < ahead && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let length_while_writing = std::fs::metadata(&spool).unwrap().len();
    drop(run.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(0));
    if room || no_room {
        assert_eq!(length_while_writing, ahead, "{free} bytes free");
    } else {
        assert!(
            (chunks(2)..=chunks(6)).contains(&length_while_writing),
            "{length_while_writing}"
        );
    }
    // After the last read, the spool (kept) is cut back to the chunks its
    // writer used, and every record reached the trace.
    assert_eq!(std::fs::metadata(&spool).unwrap().len(), chunks(2));
    let (report, _) = report_json(&trace);
    let expected = json!({"complete": true, "lost_events": 0, "events": 18_000, "allocations": 12_000,
                          "frees": 6_000, "live_bytes_at_exit": 98_304_000, "exit_status": 0});
    assert_eq!(counts(&report), expected);
}

/// The disk space the collector's preparer leaves free (its `SPARE_BYTES`,
/// in `tracer-cli/src/collector/chunk_preparer.rs`).
fn chunk_preparer_spare() -> u64 {
    256 << 20
}
