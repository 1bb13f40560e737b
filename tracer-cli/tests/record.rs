//! Recording, end to end: `cudatrace run` (and plain `LD_PRELOAD`) over the
//! fake driver, checked through `cudatrace report --json`.
#![recursion_limit = "256"]

mod common;

use common::*;
use cudatrace_events::layout::{CHUNK_BYTES, CHUNK_RECORDS, HEADER_SIZE};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The rank table's rows of the `runtime` scenario: (device, peak, peak is
/// the footprint's, live at exit).
/// Device 0 was read by the process itself (a footprint); device 1 never.
const ROWS_EXPECTED: [(u64, u64, bool, u64); 2] = [(0, 3 << 20, true, 2_115_584), (1, 4096, false, 0)];

#[test]
fn a_single_process_run_reports_exactly_what_it_did() {
    let wall_clock_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before = wall_clock_ns();
    let (output, trace, cudatrace_pid) = run_scenario_with_pid("single", "runtime", &[]);
    let after = wall_clock_ns();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = stdout(&output);
    let pid: u32 = field(&text, "pid", 0).parse().unwrap();
    let live_blocks: Vec<u64> = (0..4).map(|i| hex(field(&text, "live", i))).collect();
    let (mut report, report_output) = report_json(&trace);
    assert!(report_output.status.success());
    // One process on two devices: the table of every rank has a row for
    // each, by the peaks of its allocations (no NVML here); its times are
    // the test's clock's, left out.
    let ranks = report.as_object_mut().unwrap().remove("ranks").unwrap();
    let rows: Vec<(u64, u64, bool, u64)> = ranks["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["device"].as_u64().unwrap(),
                r["peak_bytes"].as_u64().unwrap(),
                r["peak_is_footprint"].as_bool().unwrap(),
                r["live_at_exit_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows, ROWS_EXPECTED);
    assert_eq!(
        (
            &ranks["outlier"]["row"],
            &ranks["outlier"]["median_row"],
            &ranks["outlier"]["above_median_bytes"]
        ),
        (&json!(0), &json!(1), &json!((3 << 20) - 4096))
    );
    // Times are checked against the test's clock, then left out of the exact comparison.
    let times = report["processes"][0].as_object_mut().unwrap();
    let started = times.remove("start_time_ns").unwrap().as_u64().unwrap();
    let exited = times.remove("exit_time_ns").unwrap().as_u64().unwrap();
    assert!(
        before <= started && started <= exited && exited <= after,
        "{before} {started} {exited} {after}"
    );
    let program = fake_cuda::program("scenarios").display().to_string();
    let mut live_at_exit = vec![
        live(live_blocks[0], 2 << 20, "cudaMalloc", "device"),
        live(live_blocks[1], 4096, "cudaMallocManaged", "managed"),
        live(live_blocks[2], 10240, "cudaMallocPitch", "pitch"),
        live(live_blocks[3], 4096, "cudaMalloc3D", "pitch"),
    ];
    live_at_exit.sort_by_key(|l| l["address"].as_u64());
    let expected = json!({
        "format_version": 13,
        "lost_events": 0,
        "dropped_events": 0,
        "complete": true,
        "recording_paused": [],
        "folded": null,
        "damage": null,
        "skipped_damage": [],
        "unrecorded_processes": [],
        "forked_without_spool": [],
        "refused_spools": [],
        "damaged_spools": [],
        // No memory limit: no verdict.
        "memory_limit": [],
        "processes": [{
            "pid": pid,
            "ppid": cudatrace_pid,
            "image": 0,
            "argv": [program, "runtime"],
            "host": std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim(),
            "rank": null,
            "local_rank": null,
            "world_size": null,
            "exit_status": 0,
            // It exited: it exec'd nothing, and its own status is the process's.
            "exec_into": null,
            "process_exit_status": null,
            "folded_events": 0,
            "still_running": false,
            "events": 24,
            "lost_events": 0,
            "dropped_events": 0,
            "drop_reason": null,
            "unfinished_records": 0,
            "damaged_records": 0,
            "unknown_frees": 0,
            "reused_without_free": 0,
            // It never unloaded the driver.
            "freed_with_driver": {"allocations": 0, "bytes": 0},
            // No loop repeats its allocations: no steps, no growth measured.
            "steps": null,
            "low_points": null,
            "growing": null,
            "devices": [
                {"device": 0, "allocations": 10, "frees": 6, "bytes_allocated": 3_280_960, "peak_bytes": 3 << 20,
                 "live_bytes_at_exit": 2_115_584, "live_at_exit": live_at_exit,
                 "live_at_exit_total": 4, "live_at_exit_left_out": 0, "ooms": [],
                 "ooms_total": 0, "ooms_left_out": 0, "ooms_by_call_site": []},
                {"device": 1, "allocations": 1, "frees": 1, "bytes_allocated": 4096, "peak_bytes": 4096,
                 "live_bytes_at_exit": 0, "live_at_exit": [],
                 "live_at_exit_total": 0, "live_at_exit_left_out": 0, "ooms": [],
                 "ooms_total": 0, "ooms_left_out": 0, "ooms_by_call_site": []}
            ],
            "host_pinned": {"allocations": 3, "frees": 3, "peak_bytes": 12288, "live_bytes_at_exit": 0},
            // No PyTorch in the process: no tensors, and nothing said of them.
            "tensors": {"status": null, "stopped_midway": false, "actions": 0, "devices": []}
        }]
    });
    assert_eq!(report, expected);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cudatrace: wrote {} (1 process, 24 events,", trace.display())),
        "{stderr}"
    );
    // The spool folder of the run is gone.
    let spool_parent = trace
        .parent()
        .unwrap()
        .join(cudatrace_events::naming::user_folder_name(effective_uid()));
    assert_eq!(std::fs::read_dir(spool_parent).unwrap().count(), 0);
}

fn assert_tree(report: &Value, text: &str, parent_status: Option<i32>) {
    let parent = blocks(text, "parent")[0];
    let a = blocks(text, "child-a")[0];
    let b = blocks(text, "child-b")[0];
    let c = blocks(text, "exec-child")[0];
    assert_eq!(report["processes"].as_array().unwrap().len(), 4, "{report}");
    let expectations = [
        (
            parent,
            json!(parent_status),
            vec![live(parent.1, 1000, "cudaMalloc", "device")],
            1,
            0,
        ),
        (a, json!(0), vec![live(a.1, 2000, "cudaMalloc", "device")], 1, 0),
        (b, json!(5), vec![], 1, 1),
        (c, json!(0), vec![live(c.1, 4000, "cudaMalloc", "device")], 1, 0),
    ];
    for ((pid, _, size), status, live_list, allocations, frees) in expectations {
        let p = process(report, pid);
        assert_eq!(p["exit_status"], status, "pid {pid}");
        assert_eq!(p["devices"][0]["allocations"], allocations);
        assert_eq!(p["devices"][0]["frees"], frees);
        assert_eq!(p["devices"][0]["peak_bytes"], size);
        assert_eq!(p["devices"][0]["live_at_exit"], Value::Array(live_list), "pid {pid}");
        if pid != parent.0 {
            assert_eq!(p["ppid"], parent.0);
        }
    }
    assert_eq!(process(report, c.0)["argv"][1], "exec-child");
}

#[test]
fn a_process_tree_of_forks_and_an_exec_is_one_trace() {
    let (output, trace) = run_scenario("tree", "tree", &[]);
    assert_eq!(output.status.code(), Some(0));
    let (report, _) = report_json(&trace);
    assert_tree(&report, &stdout(&output), Some(0));
}

#[test]
fn a_child_killed_with_sigkill_keeps_every_allocation() {
    let (output, trace) = run_scenario("killed", "killed-child", &[]);
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    assert_eq!(field(&text, "child-signal", 0), "9");
    let victim = blocks(&text, "victim");
    assert_eq!(victim.len(), 3);
    let (report, _) = report_json(&trace);
    let p = process(&report, victim[0].0);
    let expected: Vec<Value> = victim
        .iter()
        .map(|&(_, address, size)| live(address, size, "cudaMalloc", "device"))
        .collect();
    let mut expected = expected;
    expected.sort_by_key(|l| l["address"].as_u64());
    assert_eq!(p["devices"][0]["live_at_exit"], Value::Array(expected));
    assert_eq!(p["devices"][0]["live_bytes_at_exit"], 6 << 20);
    // Its parent reaped it, so its status cannot be observed.
    assert_eq!(p["exit_status"], Value::Null);
    assert_eq!(p["still_running"], false);
}

#[test]
fn the_command_s_exit_status_is_cudatrace_s_and_is_in_the_trace() {
    for (scenario, code, blocks_expected) in [("exit3", 3, 1), ("self-term", 143, 1), ("self-kill", 137, 2)] {
        let (output, trace) = run_scenario(scenario, scenario, &[]);
        assert_eq!(output.status.code(), Some(code), "{scenario}");
        let (report, _) = report_json(&trace);
        let p = &report["processes"][0];
        assert_eq!(p["exit_status"], code, "{scenario}");
        let printed = blocks(&stdout(&output), "block");
        assert_eq!(printed.len(), blocks_expected);
        assert_eq!(
            p["devices"][0]["live_at_exit"].as_array().unwrap().len(),
            blocks_expected,
            "{scenario}"
        );
    }
}

#[test]
fn a_signal_sent_to_cudatrace_reaches_the_command_and_the_trace_is_finished() {
    let (mut command, trace) = run_command("signal", "wait", &[]);
    let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
    let _out = wait_for_line(&mut child, "ready");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    let (report, _) = report_json(&trace);
    assert_eq!(report["complete"], true);
    assert_eq!(report["processes"][0]["exit_status"], 143);
    assert_eq!(report["processes"][0]["devices"][0]["live_bytes_at_exit"], 4096);
}

#[test]
fn plain_ld_preload_writes_a_trace_for_the_tree_root() {
    let dir = scratch_dir("plain");
    let trace = dir.join("plain.trace");
    let output = plain_preload_scenario("tree", &trace, &dir);
    assert!(output.status.success());
    // The collector runs on in the background until the tree is gone.
    let report = finished_trace(&trace);
    // The root is not the collector's child: its status comes from its own exit().
    assert_tree(&report, &stdout(&output), Some(0));
    let spool_parent = dir.join(cudatrace_events::naming::user_folder_name(effective_uid()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir(&spool_parent).unwrap().count() > 0 {
        assert!(Instant::now() < deadline, "spools were not removed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `*.trace` files in `dir`, by name.
fn traces_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".trace"))
        .collect();
    names.sort();
    names
}

#[test]
fn plain_ld_preload_names_the_trace_after_the_program_a_wrapper_starts() {
    let dir = scratch_dir("plain-wrapper");
    let program = fake_cuda::program("scenarios");
    // As pyenv's `python3`: a script run through `env`, that execs the real
    // program (every image keeps the pid); and one that starts it as a
    // child, from another folder.
    let execs = dir.join("execs");
    let forks = dir.join("forks");
    let scripts = [
        (
            &execs,
            format!("#!/usr/bin/env sh\nexec '{}' \"$@\"\n", program.display()),
        ),
        (
            &forks,
            format!("#!/bin/sh\ncd .. && '{}' \"$@\"\nexit $?\n", program.display()),
        ),
    ];
    for (script, text) in scripts {
        std::fs::write(script, text).unwrap();
        std::fs::set_permissions(script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    for (script, execs) in [(&execs, true), (&forks, false)] {
        let work = dir.join(format!("work-{}", script.file_name().unwrap().to_str().unwrap()));
        std::fs::create_dir(&work).unwrap();
        let child = Command::new(script)
            .arg("runtime")
            .current_dir(&work)
            .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
            .env("LD_PRELOAD", tracer_library())
            .env_remove("CUDATRACE_DIR")
            .env_remove("CUDATRACE_OUT")
            .env("CUDATRACE_CLI", cli())
            .env("TMPDIR", &dir)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let root = child.id();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        // The collector writes the trace in the root's working folder (not
        // the one the program moved to), named once the first event comes.
        let deadline = Instant::now() + Duration::from_secs(30);
        let name = loop {
            if let [name] = traces_in(&work).as_slice() {
                break name.clone();
            }
            assert!(Instant::now() < deadline, "no trace in {}", work.display());
            std::thread::sleep(Duration::from_millis(50));
        };
        let report = finished_trace(&work.join(&name));
        let pid = report["processes"][0]["pid"].as_u64().unwrap();
        assert_eq!(report["processes"].as_array().unwrap().len(), 1, "{report}");
        if execs {
            assert_eq!(pid, u64::from(root), "an exec keeps the pid");
        } else {
            assert_ne!(pid, u64::from(root), "a child of the wrapper");
        }
        assert_eq!(name, format!("cudatrace-scenarios-{pid}.trace"));
        assert_eq!(traces_in(&dir), Vec::<String>::new());
    }
}

#[test]
fn a_damaged_trace_reports_what_came_before_the_damage() {
    let (output, trace) = run_scenario("damaged", "runtime", &[]);
    assert!(output.status.success());
    let (full, _) = report_json(&trace);
    let bytes = std::fs::read(&trace).unwrap();
    // Cut inside the footer: everything but the footer is intact.
    let cut = trace.with_extension("cut");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let (partial, out) = report_json(&cut);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(partial["processes"], full["processes"]);
    assert_eq!(partial["complete"], false);
    let footer_at = find_frame(&bytes, b'F');
    let footer_body = bytes.len() - footer_at - 5;
    assert_eq!(
        partial["damage"],
        format!(
            "at byte {footer_at}: truncated record: {} of {footer_body} bytes",
            footer_body - 3
        )
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("is damaged at byte"), "{stderr}");
    // A flipped byte in the event block: the frame after it verifies, so the
    // block is skipped and reading goes on; its 24 events count as lost.
    let mut flipped = bytes.clone();
    let events_at = find_frame(&bytes, b'e');
    flipped[events_at + 8] ^= 0xff;
    std::fs::write(&cut, &flipped).unwrap();
    let (partial, out) = report_json(&cut);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(partial["damage"], Value::Null);
    assert_eq!(
        partial["skipped_damage"],
        json!([format!("at byte {events_at}: checksum mismatch in a 'e' record")])
    );
    assert_eq!(partial["complete"], true);
    // The collector may have written the run in more than one block.
    let (records_in_block, memory_events_in_block) = first_block(&trace);
    assert!(memory_events_in_block <= 24 && records_in_block > memory_events_in_block);
    assert_eq!(partial["processes"][0]["events"], 24 - memory_events_in_block);
    assert_eq!(partial["processes"][0]["exit_status"], 0);
    assert_eq!(partial["processes"][0]["lost_events"], records_in_block);
    assert_eq!(partial["lost_events"], records_in_block);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "cudatrace: {} has 1 damaged frame, skipped (the first at byte {events_at}: checksum mismatch in a 'e' record); the events they held are counted as lost",
            cut.display()
        )
    );
}

/// Offset of the first frame with `tag`, walking the frames.
fn find_frame(bytes: &[u8], tag: u8) -> usize {
    let mut at = 8;
    while bytes[at] != tag {
        let length = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        at += 5 + length + 4;
    }
    at
}

#[test]
fn bad_input_gets_one_line_and_a_non_zero_exit() {
    let dir = scratch_dir("bad-input");
    let garbage = dir.join("garbage.trace");
    std::fs::write(&garbage, b"this is not a trace").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["report".into(), garbage.display().to_string()],
            "not a cudatrace trace (bad magic)",
        ),
        (
            vec!["report".into(), dir.join("missing").display().to_string()],
            "cannot open",
        ),
        (
            vec!["report".into(), "--frobnicate".into()],
            "unexpected argument '--frobnicate' found (see --help)",
        ),
        (
            vec!["run".into()],
            "the following required arguments were not provided: <CMD>... (see --help)",
        ),
        (
            vec![
                "run".into(),
                "--preload".into(),
                "/nonexistent.so".into(),
                "--".into(),
                "true".into(),
            ],
            "/nonexistent.so not found",
        ),
        (
            vec!["collect".into(), dir.join("nope").display().to_string()],
            "cannot read",
        ),
        (vec!["launch".into()], "unrecognized subcommand 'launch' (see --help)"),
        (
            vec!["reprot".into()],
            "unrecognized subcommand 'reprot'; some similar subcommands exist: 'export', 'report' (see --help)",
        ),
        (
            vec!["report".into(), "--jsn".into(), "t.trace".into()],
            "unexpected argument '--jsn' found; a similar argument exists: '--json' (see --help)",
        ),
    ];
    for (args, message) in cases {
        let output = Command::new(cli()).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("cudatrace: ") && stderr.contains(message),
            "{args:?}: {stderr}"
        );
    }
    let output = cudatrace_run()
        .args(["--", "/no/such/program"])
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    // As a shell says it: 127 for a command not found.
    assert_eq!(output.status.code(), Some(127));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "cudatrace: cannot run /no/such/program: No such file or directory (os error 2)\n"
    );
}

#[test]
fn spools_of_another_user_are_refused() {
    // SAFETY: no preconditions.
    if effective_uid() != 0 {
        eprintln!("skipped: only root can create a spool owned by another user");
        return;
    }
    let traced = run_traced("refuse-source", program("scenarios", &["runtime"]));
    let dir = scratch_dir("refuse");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let ours = dir.join("cudatrace-1000-0.spool");
    let theirs = dir.join("cudatrace-1001-0.spool");
    std::fs::copy(&traced.spool_paths[0], &ours).unwrap();
    std::fs::copy(&traced.spool_paths[0], &theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let trace = dir.join("out.trace");
    let output = cudatrace(&["collect", "-o", trace.to_str().unwrap(), dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"].as_array().unwrap().len(), 1);
    assert_eq!(report["processes"][0]["events"], 24);
    assert_eq!(
        report["refused_spools"],
        json!([{"path": theirs.display().to_string(), "uid": 65534, "reason": "owned by another user"}])
    );
    // The refused spool is kept for inspection.
    assert!(theirs.exists());
    // A folder of another user is refused outright.
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let output = cudatrace(&["collect", dir.to_str().unwrap()]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("owned by uid 65534"), "{stderr}");
}

#[test]
fn thirty_two_threads_average_under_24_bytes_an_event() {
    let (output, trace) = run_scenario("compact", "threads", &[]);
    assert!(output.status.success());
    let (report, _) = report_json(&trace);
    let events = report["processes"][0]["events"].as_u64().unwrap();
    assert_eq!(events, 320_000);
    assert_eq!(report["processes"][0]["devices"][0]["allocations"], 160_000);
    assert_eq!(report["processes"][0]["devices"][0]["frees"], 160_000);
    assert_eq!(
        report["processes"][0]["devices"][0]["peak_bytes"].as_u64().unwrap() % 4096,
        0
    );
    let bytes = std::fs::metadata(&trace).unwrap().len();
    assert!(bytes * 100 / events <= 2400, "{bytes} bytes for {events} events");
}

#[test]
fn keep_spools_keeps_every_record() {
    let (mut command, trace) = run_command("keep", "threads", &["--keep-spools"]);
    let spool_base = scratch_dir("keep-spools");
    let output = command.env("TMPDIR", &spool_base).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let spools = run_spools(&spool_base);
    assert_eq!(spools.len(), 1);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&spools[0]).unwrap();
    let kept = cudatrace_events::SpoolReader::read_path(&spools[0]).unwrap();
    assert_eq!(kept.header.released_records, 0);
    let memory_events = kept.events.iter().filter(|e| e.op.is_memory_event()).count();
    assert_eq!(
        (
            memory_events,
            kept.events.len() as u64,
            kept.unwritten_records,
            kept.damaged_records
        ),
        (320_000, kept.header.reserved_seqs, 0, 0)
    );
    // 320,000 events and the stack records: whole chunks, all still on disk.
    let chunks = kept.header.reserved_seqs.div_ceil(CHUNK_RECORDS as u64);
    assert_eq!(meta.len(), (HEADER_SIZE + chunks as usize * CHUNK_BYTES) as u64);
    assert!(
        meta.blocks() * 512 >= chunks * CHUNK_BYTES as u64,
        "{} bytes allocated",
        meta.blocks() * 512
    );
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"][0]["events"], 320_000);
}

/// Records (memory events and stack records) in the first event block of a trace.
/// Records, and memory events among them, in the trace's first event block.
fn first_block(trace: &std::path::Path) -> (u64, u64) {
    let file = std::io::BufReader::new(std::fs::File::open(trace).unwrap());
    cudatrace_trace::TraceReader::new(file)
        .unwrap()
        .find_map(|record| match record.unwrap() {
            cudatrace_trace::Record::Events { events, .. } => Some((
                events.len() as u64,
                events.iter().filter(|e| e.op.is_memory_event()).count() as u64,
            )),
            _ => None,
        })
        .unwrap()
}
