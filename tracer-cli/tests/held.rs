//! Behaviours an audit checked and found holding, kept from regressing: many
//! processes and threads, concurrent runs, signals, unusual paths and
//! arguments, a read-only spool folder, `errno`, crafted spool headers and
//! forked children past the header's slots. The programs are `held`'s
//! scenarios (`tests/fake-cuda/c/held.c`). A test marked `#[ignore =
//! "fault: ..."]` states what the product should do and does not yet.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::BufRead;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

fn held() -> PathBuf {
    fake_cuda::program("held")
}

/// `cudatrace run -o DIR/run.trace OPTIONS -- held ARGS`, spooling under a
/// fresh DIR; returns the command, the trace and DIR.
fn run_held(label: &str, options: &[&str], args: &[&str]) -> (Command, PathBuf, PathBuf) {
    let dir = scratch_dir(label);
    let trace = dir.join("run.trace");
    let mut command = cudatrace_run();
    command
        .arg("-o")
        .arg(&trace)
        .args(options)
        .arg("--")
        .arg(held())
        .args(args)
        .env("TMPDIR", &dir);
    (command, trace, dir)
}

/// `held ARGS` with the tracer preloaded and spools only, into `spools`.
fn spools_only(args: &[&str], spools: &Path) -> Output {
    program("held", args)
        .env("LD_PRELOAD", tracer_library())
        .env("CUDATRACE_DIR", spools)
        .output()
        .unwrap()
}

/// Reads `child`'s stdout until a line starting with `word`; the lines read
/// (that one included) and the reader, for the rest.
fn lines_until(child: &mut Child, word: &str) -> (Vec<String>, std::io::BufReader<ChildStdout>) {
    let mut reader = std::io::BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "no line '{word}' in {lines:?}"
        );
        let line = line.trim_end_matches('\n').to_string();
        let found = line.starts_with(word);
        lines.push(line);
        if found {
            return (lines, reader);
        }
    }
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: signalling a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
}

/// No core file from a SIGQUIT, whatever the machine's limit.
fn without_core_files(command: &mut Command) -> &mut Command {
    // SAFETY: setrlimit is async-signal-safe, and the limit is plain data.
    unsafe {
        command.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        })
    }
}

/// A scenario's output, each line's second word (always a pid in these
/// programs' lines, or nothing) replaced by `PID`.
fn without_pids(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .map(|line| {
            let mut words: Vec<&str> = line.split(' ').collect();
            if words.len() > 1 {
                words[1] = "PID";
            }
            words.join(" ")
        })
        .collect();
    lines.sort();
    lines
}

/// The only process of a report.
fn only_process(report: &Value) -> &Value {
    let processes = report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1, "{report}");
    &processes[0]
}

// ---- 1. Many short-lived processes --------------------------------------

#[test]
fn a_thousand_short_lived_processes_under_one_run_are_all_in_a_complete_trace() {
    // `held spawn 1000` fork+execs `held tiny 4097` ... `held tiny 5096`
    // one after the other: each keeps one allocation of its own size.
    let (mut command, trace, dir) = run_held("thousand", &[], &["spawn", "1000"]);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert_eq!(text.lines().filter(|l| l.starts_with("pid ")).count(), 1001);
    assert!(text.ends_with("spawned 1000\n"), "{text}");
    let (report, _) = report_json(&trace);
    assert_eq!(report["complete"], true);
    assert_eq!(report["lost_events"], 0);
    assert_eq!(report["unrecorded_processes"], json!([]));
    assert_eq!(report["forked_without_spool"], json!([]));
    assert_eq!(report["damaged_spools"], json!([]));
    let processes = report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1000);
    let mut sizes = BTreeSet::new();
    let mut pids = BTreeSet::new();
    for p in processes {
        let size = p["devices"][0]["live_bytes_at_exit"].as_u64().unwrap();
        assert_eq!(
            (&p["events"], &p["lost_events"], &p["exit_status"], &p["image"]),
            (&json!(1), &json!(0), &json!(0), &json!(0)),
            "{p}"
        );
        assert_eq!(
            p["argv"],
            json!([held().to_str().unwrap(), "tiny", size.to_string()]),
            "{p}"
        );
        assert_eq!(p["devices"][0]["allocations"], 1);
        sizes.insert(size);
        pids.insert(p["pid"].as_u64().unwrap());
    }
    assert_eq!(sizes, (4097..=5096).collect::<BTreeSet<u64>>());
    assert_eq!(pids.len(), 1000);
    // Every spool went into the trace: nothing is left behind.
    let user_folder = dir.join(cudatrace_events::naming::user_folder_name(effective_uid()));
    let left: Vec<_> = std::fs::read_dir(&user_folder).unwrap().collect();
    assert_eq!(left.len(), 0, "{left:?}");
}

// ---- 2. Many threads ------------------------------------------------------

#[test]
fn twenty_thousand_threads_with_one_allocation_each_are_all_recorded() {
    // 500 threads at a time, each allocating 4096 bytes that it keeps.
    let (mut command, trace, _) = run_held("threads", &[], &["threads", "20000", "500"]);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stdout(&output).ends_with("threads 20000\n"), "{}", stdout(&output));
    let (report, _) = report_json(&trace);
    assert_eq!(
        counts(&report),
        json!({"complete": true, "lost_events": 0, "events": 20_000, "allocations": 20_000, "frees": 0,
               "live_bytes_at_exit": 20_000 * 4096, "exit_status": 0})
    );
    let p = only_process(&report);
    assert_eq!(
        (&p["unfinished_records"], &p["damaged_records"], &p["unknown_frees"]),
        (&json!(0), &json!(0), &json!(0))
    );
    // The report lists 10,000 of them and counts the rest; the trace's
    // events give every allocation its own address.
    let device = &p["devices"][0];
    assert_eq!(
        (&device["live_at_exit_total"], &device["live_at_exit_left_out"]),
        (&json!(20_000), &json!(10_000))
    );
    let live = device["live_at_exit"].as_array().unwrap();
    assert_eq!(live.len(), 10_000);
    assert!(live.iter().all(|b| b["size"] == 4096 && b["api"] == "cudaMalloc"));
    let dump = cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap();
    assert!(dump.status.success(), "{}", stderr(&dump));
    let addresses: BTreeSet<u64> = stdout(&dump)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["op"] == "alloc")
        .map(|event| event["address"].as_u64().unwrap())
        .collect();
    assert_eq!(addresses.len(), 20_000);
}

// ---- 3. Concurrent runs sharing a spool folder ---------------------------

#[test]
fn four_concurrent_runs_sharing_one_spool_folder_each_trace_only_their_own_process() {
    let base = scratch_dir("shared-spools");
    let spools = base.join("spools");
    std::fs::create_dir(&spools).unwrap();
    let mut runs = Vec::new();
    for (n, iterations) in ["1000", "2000", "3000", "4000"].into_iter().enumerate() {
        let trace = base.join(format!("run-{n}.trace"));
        let child = cudatrace_run()
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(fake_cuda::program("scenarios"))
            .args(["loop", iterations, "1", "wait"])
            .env("CUDATRACE_DIR", &spools)
            .env("TMPDIR", &base)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        runs.push((child, trace));
    }
    // All four have recorded and wait, at the same time.
    let mut programs = Vec::new();
    for (child, _) in &mut runs {
        let (lines, rest) = lines_until(child, "ready");
        let pid: u64 = field(&lines.join("\n"), "pid", 0).parse().unwrap();
        let (allocations, frees, live): (u64, u64, u64) = {
            let text = lines.join("\n");
            let number = |i| field(&text, "loop", i).parse::<u64>().unwrap();
            (number(1), number(3), number(5))
        };
        programs.push((pid, allocations, frees, live, rest));
    }
    assert_eq!(std::fs::read_dir(&spools).unwrap().count(), 4, "one run folder each");
    for ((child, trace), (pid, allocations, frees, live, _rest)) in runs.iter_mut().zip(&programs) {
        drop(child.stdin.take());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{}", trace.display());
        let (report, _) = report_json(trace);
        assert_eq!(only_process(&report)["pid"], *pid, "{}", trace.display());
        assert_eq!(
            counts(&report),
            json!({"complete": true, "lost_events": 0, "events": allocations + frees, "allocations": allocations,
                   "frees": frees, "live_bytes_at_exit": live, "exit_status": 0}),
            "{}",
            trace.display()
        );
    }
    let allocations: Vec<u64> = programs.iter().map(|p| p.1).collect();
    assert_eq!(allocations, [1000, 2000, 3000, 4000]);
    // Each run took its own folder away.
    assert_eq!(std::fs::read_dir(&spools).unwrap().count(), 0);
}

// ---- 4. A signal handler on a small alternate stack ----------------------

/// (op, api, kind, size) of a spool's memory events.
fn shapes(spool: &cudatrace_events::Spool) -> Vec<String> {
    spool
        .events
        .iter()
        .map(|e| format!("{} {} {} {}", e.op, e.api, e.kind, e.size))
        .collect()
}

/// The deepest byte of the 8 KiB alternate stack that `held altstack`'s
/// handlers touched, from its `altstack used N of 8192` line.
fn altstack_used(stdout: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|line| line.starts_with("altstack used "))
        .unwrap_or_else(|| panic!("no altstack line in {stdout}"));
    line.split(' ').nth(2).unwrap().parse().unwrap()
}

#[test]
fn a_signal_handler_on_an_8_kib_sigaltstack_allocates_and_frees_and_is_recorded() {
    // Three SIGUSR1s, each handled on an 8 KiB alternate stack with a guard
    // page below it: 8 KiB of pinned memory and a 2 KiB array, allocated
    // and freed. `first`: the handler makes the process's first CUDA call
    // (the spool, the driver's symbols and the stack's bounds are found
    // there); `warm`: 256 pinned bytes come and go before. The goal is at
    // most 4 KiB more of the alternate stack traced than untraced, at every
    // `--stacks`; the handlers used 3.4 KiB more (the C library reading
    // the main thread's stack bounds from /proc, the loader finding the
    // driver's symbols), and the library's unoptimised build overflowed it.
    // They now use under 2 KiB more.
    let one_handler = [
        "alloc cuMemHostAlloc host-pinned 8192",
        "free cuMemFreeHost host-pinned 8192",
        "alloc cuArrayCreate_v2 array 2048",
        "free cuArrayDestroy array 2048",
    ];
    for (mode, warm_events) in [("first", 0), ("warm", 2)] {
        let untraced = program("held", &["altstack", "3", mode]).output().unwrap();
        assert_eq!(untraced.status.code(), Some(0), "{mode}: {}", stderr(&untraced));
        let untraced_used = altstack_used(&stdout(&untraced));
        for stacks in ["none", "all"] {
            let (mut command, _, _) = run_held(
                &format!("altstack-{mode}-{stacks}"),
                &["--stacks", stacks],
                &["altstack", "3", mode],
            );
            let output = command.output().unwrap();
            assert_eq!(output.status.code(), Some(0), "{mode} {stacks}: {}", stderr(&output));
            let used = altstack_used(&stdout(&output));
            assert!(
                used <= untraced_used + 2048,
                "{mode} {stacks}: {used} bytes of the alternate stack used traced, {untraced_used} untraced"
            );
        }
        let (mut command, trace, _) = run_held(&format!("altstack-{mode}"), &[], &["altstack", "3", mode]);
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{mode}: {}", stderr(&output));
        assert!(
            stdout(&output).ends_with("handled 3 failed 0\n"),
            "{mode}: {}",
            stdout(&output)
        );
        let (report, _) = report_json(&trace);
        let p = only_process(&report);
        assert_eq!(report["complete"], true, "{mode}");
        assert_eq!(
            (&p["events"], &p["lost_events"], &p["exit_status"]),
            (&json!(12 + warm_events), &json!(0), &json!(0)),
            "{mode}"
        );
        let pinned = 3 + warm_events / 2;
        assert_eq!(
            p["host_pinned"],
            json!({"allocations": pinned, "frees": pinned, "live_bytes_at_exit": 0, "peak_bytes": 8192}),
            "{mode}"
        );
        let d = &p["devices"][0];
        assert_eq!(
            (&d["device"], &d["allocations"], &d["frees"], &d["live_bytes_at_exit"]),
            (&json!(0), &json!(3), &json!(3), &json!(0)),
            "{mode}"
        );
        // Plain LD_PRELOAD, spools only: the same events, in order.
        let plain = run_traced(
            &format!("altstack-plain-{mode}"),
            program("held", &["altstack", "3", mode]),
        );
        assert_eq!(plain.output.status.code(), Some(0), "{mode}: {}", stderr(&plain.output));
        assert!(
            plain.stdout.ends_with("handled 3 failed 0\n"),
            "{mode}: {}",
            plain.stdout
        );
        assert_eq!(plain.spools.len(), 1);
        let mut expected: Vec<String> = Vec::new();
        if mode == "warm" {
            expected.push("alloc cuMemHostAlloc host-pinned 256".into());
            expected.push("free cuMemFreeHost host-pinned 256".into());
        }
        for _ in 0..3 {
            expected.extend(one_handler.iter().map(|s| s.to_string()));
        }
        assert_eq!(shapes(&plain.spools[0]), expected, "{mode}");
        assert_eq!(plain.spools[0].unwritten_records, 0, "{mode}");
    }
}

// ---- 5. Signals sent to `cudatrace run` ----------------------------------

/// `cudatrace run -- scenarios wait`, started and ready: it has allocated
/// 4096 bytes and sleeps (for up to 30 s).
fn waiting_run(label: &str, own_group: bool) -> (Child, PathBuf, std::io::BufReader<ChildStdout>) {
    let (mut command, trace) = run_command(label, "wait", &[]);
    if own_group {
        command.process_group(0);
    }
    let mut child = without_core_files(&mut command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, rest) = lines_until(&mut child, "ready");
    (child, trace, rest)
}

/// What a run killed by a signal must leave: its exit code, and a finished
/// trace of the one allocation, with the same exit status.
fn assert_finished_after_signal(child: Child, trace: &Path, code: i32, label: &str) {
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(code), "{label}: {}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.contains(&format!("\ncudatrace: wrote {} (1 process, 1 event, ", trace.display())),
        "{label}: {said}"
    );
    assert!(!said.contains("panicked"), "{label}: {said}");
    let (report, _) = report_json(trace);
    assert_eq!(
        counts(&report),
        json!({"complete": true, "lost_events": 0, "events": 1, "allocations": 1, "frees": 0,
               "live_bytes_at_exit": 4096, "exit_status": code}),
        "{label}"
    );
}

#[test]
fn sigint_sighup_and_sigquit_sent_to_run_reach_the_command_and_the_trace_is_finished() {
    // SIGTERM has its own test (record.rs).
    for (name, number) in [("int", libc::SIGINT), ("hup", libc::SIGHUP), ("quit", libc::SIGQUIT)] {
        let (child, trace, _out) = waiting_run(&format!("signal-{name}"), false);
        signal(child.id(), number);
        assert_finished_after_signal(child, &trace, 128 + number, name);
    }
}

#[test]
fn two_sigints_sent_to_run_both_reach_the_command() {
    // The command counts SIGINTs and dies of the second.
    let (mut command, trace, _) = run_held("sigint-twice", &[], &["sigint-twice"]);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (_, mut out) = lines_until(&mut child, "ready");
    signal(child.id(), libc::SIGINT);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "sigint 1\n");
    signal(child.id(), libc::SIGINT);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest, "sigint 2\n");
    assert_finished_after_signal(child, &trace, 130, "sigint-twice");
    // Two at once, to a command that dies of the first: the second finds
    // the command gone (or is merged with the first), and the trace is
    // finished all the same.
    let (child, trace, _out) = waiting_run("sigint-burst", false);
    signal(child.id(), libc::SIGINT);
    signal(child.id(), libc::SIGINT);
    assert_finished_after_signal(child, &trace, 130, "sigint-burst");
}

#[test]
fn ctrl_c_to_the_whole_process_group_once_or_twice_still_finishes_the_trace() {
    // As a terminal's Ctrl-C: the signal goes to cudatrace and the command
    // at once (and any helper of cudatrace's in the group).
    for presses in [1, 2] {
        let (child, trace, _out) = waiting_run(&format!("ctrl-c-{presses}"), true);
        for _ in 0..presses {
            // SAFETY: signalling the process group this test started.
            assert_eq!(unsafe { libc::killpg(child.id() as i32, libc::SIGINT) }, 0);
        }
        assert_finished_after_signal(child, &trace, 130, &format!("{presses} Ctrl-C"));
    }
}

// ---- 6. execveat chains ---------------------------------------------------

/// `held execveat-a`: A (1000 bytes) execveat()s B (2000) through the C
/// library's function, B execveat()s C (3000) through the system call on a
/// descriptor; C exits 5. Returns the run's report.
fn execveat_chain(label: &str) -> Value {
    let (mut command, trace, _) = run_held(label, &[], &["execveat-a"]);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    let (report, _) = report_json(&trace);
    report
}

#[test]
fn each_image_of_an_execveat_chain_is_in_the_trace() {
    for round in 0..3 {
        let report = execveat_chain(&format!("execveat-{round}"));
        assert_eq!(report["complete"], true, "round {round}");
        assert_eq!(report["lost_events"], 0, "round {round}");
        let processes = report["processes"].as_array().unwrap();
        let images: Vec<Value> = processes
            .iter()
            .map(|p| {
                json!([
                    p["image"],
                    p["argv"][1],
                    p["events"],
                    p["devices"][0]["live_bytes_at_exit"]
                ])
            })
            .collect();
        assert_eq!(
            images,
            [
                json!([0, "execveat-a", 1, 1000]),
                json!([1, "execveat-b", 1, 2000]),
                json!([2, "execveat-c", 1, 3000])
            ],
            "round {round}"
        );
        let pids: BTreeSet<u64> = processes.iter().map(|p| p["pid"].as_u64().unwrap()).collect();
        assert_eq!(pids.len(), 1, "one pid, three images: {report}");
        assert_eq!(processes[2]["exit_status"], 5, "round {round}");
    }
}

/// As `in_an_exec_chain_only_the_last_image_exits_the_others_exec_d`
/// (adversarial.rs) for execl: A and B replaced themselves and did not
/// exit. Neither `execveat` (the C library's calls the system call
/// directly) nor the raw system call goes through a hook: A was sometimes
/// given its successor's exit status. Each new image now marks the spool of
/// the one it replaced as it loads, with what it is (`/proc/self/exe`).
#[test]
fn in_an_execveat_chain_only_the_last_image_exits() {
    let held = json!(std::fs::canonicalize(held()).unwrap().to_str().unwrap());
    for round in 0..5 {
        let report = execveat_chain(&format!("execveat-status-{round}"));
        let ends: Vec<Value> = report["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| json!([p["exit_status"], p["exec_into"], p["process_exit_status"]]))
            .collect();
        assert_eq!(
            ends,
            [
                json!([null, held, null]),
                json!([null, held, null]),
                json!([5, null, null])
            ],
            "round {round}"
        );
    }
}

// ---- 7. Unusual TMPDIR and arguments --------------------------------------

/// Runs `held args ARGS` with TMPDIR `tmpdir` (made here); its report.
fn run_args(label: &str, tmpdir: &Path, args: &[&OsStr], options: &[&str]) -> (Output, Value) {
    std::fs::create_dir_all(tmpdir).unwrap();
    let trace = scratch_dir(label).join("run.trace");
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .args(options)
        .arg("--")
        .arg(held())
        .arg("args")
        .args(args)
        .env("TMPDIR", tmpdir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{label}: {}", stderr(&output));
    let (report, _) = report_json(&trace);
    (output, report)
}

#[test]
fn odd_tmpdirs_and_odd_arguments_are_traced_and_the_report_shows_the_arguments() {
    let base = scratch_dir("odd-tmpdir");
    // A name of 250 letters, 14 deep: a TMPDIR of over 3,500 bytes.
    let long = (0..14).fold(base.join("long"), |path, _| path.join("d".repeat(250)));
    assert!(long.as_os_str().len() > 3500);
    let tmpdirs = [base.join("a b\nc;'x"), long];
    let args: Vec<&OsStr> = vec![
        OsStr::new("x\ny"),
        OsStr::from_bytes(b"\xff\xfe"),
        OsStr::new("tab\tq"),
        OsStr::new(" lead"),
        OsStr::new("--help"),
    ];
    for (n, tmpdir) in tmpdirs.iter().enumerate() {
        let (output, report) = run_args(&format!("odd-args-{n}"), tmpdir, &args, &[]);
        assert!(stdout(&output).ends_with("argc 7\n"), "{}", stdout(&output));
        assert_eq!(report["complete"], true);
        assert_eq!(report["lost_events"], 0);
        let p = only_process(&report);
        assert_eq!((&p["events"], &p["exit_status"]), (&json!(2), &json!(0)));
        // Bytes that are not UTF-8 read as U+FFFD, one for each.
        assert_eq!(
            p["argv"],
            json!([
                held().to_str().unwrap(),
                "args",
                "x\ny",
                "\u{fffd}\u{fffd}",
                "tab\tq",
                " lead",
                "--help"
            ]),
            "TMPDIR {}",
            tmpdir.display()
        );
        // The run's folder is gone with its spools.
        let user_folder = tmpdir.join(cudatrace_events::naming::user_folder_name(effective_uid()));
        assert_eq!(std::fs::read_dir(&user_folder).unwrap().count(), 0);
    }
}

#[test]
fn empty_arguments_are_kept_in_the_report_s_argv() {
    let tmpdir = scratch_dir("empty-args");
    let args: Vec<&OsStr> = vec![OsStr::new(""), OsStr::new("x"), OsStr::new(""), OsStr::new("")];
    let (output, report) = run_args("empty-args-run", &tmpdir, &args, &[]);
    assert!(stdout(&output).ends_with("argc 6\n"), "{}", stdout(&output));
    assert_eq!(
        only_process(&report)["argv"],
        json!([held().to_str().unwrap(), "args", "", "x", "", ""])
    );
}

#[test]
fn keep_spools_names_the_real_folder_under_a_tmpdir_that_is_not_utf8() {
    let base = scratch_dir("non-utf8-tmpdir");
    let mut name = base.into_os_string();
    name.push(OsStr::from_bytes(b"/t\xffmp"));
    let tmpdir = PathBuf::from(name);
    let (output, _) = run_args("non-utf8-tmpdir-run", &tmpdir, &[], &["--keep-spools"]);
    let said = stderr(&output);
    let line = said
        .lines()
        .find(|l| l.starts_with("cudatrace: kept the spools in "))
        .unwrap_or_else(|| panic!("{said}"));
    let command = line.split('`').nth(1).unwrap_or_else(|| panic!("{line}"));
    // Pasted into a shell, the command dumps the kept spools.
    let pasted = Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("PATH", format!("{}:/usr/bin:/bin", cli().parent().unwrap().display()))
        .output()
        .unwrap();
    assert_eq!(pasted.status.code(), Some(0), "{command}: {}", stderr(&pasted));
    assert!(stdout(&pasted).contains("\"spool_end\""));
}

// ---- 8. A read-only spool folder -----------------------------------------

/// `command`, in a mount namespace of its own where `dir` is read-only;
/// `then` (words) run after the mount, before the command: `env
/// LD_PRELOAD=...` makes the traced tree start after the mount.
fn with_read_only(dir: &Path, then: &[&str], command: &Command) -> Command {
    let mut prefix = vec![
        "unshare",
        "-rm",
        "sh",
        "-c",
        r#"mount -o bind,ro "$1" "$1" && shift && exec "$@""#,
        "sh",
        dir.to_str().unwrap(),
    ];
    prefix.extend_from_slice(then);
    wrapped(&prefix, command)
}

/// `LD_PRELOAD=<this build's library>`, for `env`.
fn preload_setting() -> String {
    format!("LD_PRELOAD={}", tracer_library().display())
}

#[test]
fn a_read_only_cudatrace_dir_leaves_the_program_unchanged_and_is_said_in_one_line() {
    let dir = scratch_dir("read-only-dir");
    let spools = dir.join("spools");
    std::fs::create_dir(&spools).unwrap();
    // Under run: the command runs untraced, its output and status as
    // without cudatrace; one line says why; no trace.
    let untraced = program("scenarios", &["exit3"]).output().unwrap();
    assert_eq!(untraced.status.code(), Some(3));
    let trace = dir.join("run.trace");
    let mut run = cudatrace_run();
    run.arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(fake_cuda::program("scenarios"))
        .arg("exit3")
        .env("CUDATRACE_DIR", &spools);
    let output = with_read_only(&spools, &[], &run).output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(without_pids(&stdout(&output)), without_pids(&stdout(&untraced)));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: nothing is recorded: cannot create a spool folder in {}: Read-only file system (os error 30)\n",
            spools.display()
        )
    );
    assert!(!trace.exists());
    // Plain LD_PRELOAD: the tree's root says it once for its four processes.
    let untraced = program("scenarios", &["tree"]).output().unwrap();
    let mut tree = program("scenarios", &["tree"]);
    tree.env("CUDATRACE_DIR", &spools);
    let output = with_read_only(&spools, &["env", &preload_setting()], &tree)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(without_pids(&stdout(&output)), without_pids(&stdout(&untraced)));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: nothing is recorded: CUDATRACE_DIR={}: Read-only file system (os error 30)\n",
            spools.display()
        )
    );
    assert_eq!(std::fs::read_dir(&spools).unwrap().count(), 0);
}

/// A read-only TMPDIR was said as "No such file or directory" (the look
/// after the failed creation), not as the creation's own error.
#[test]
fn a_read_only_tmpdir_is_said_with_its_real_error() {
    let dir = scratch_dir("read-only-tmpdir");
    let tmpdir = dir.join("tmp");
    std::fs::create_dir(&tmpdir).unwrap();
    let user_folder = tmpdir.join(cudatrace_events::naming::user_folder_name(effective_uid()));
    let mut run = cudatrace_run();
    run.arg("-o")
        .arg(dir.join("run.trace"))
        .arg("--")
        .arg(fake_cuda::program("scenarios"))
        .arg("exit3")
        .env("TMPDIR", &tmpdir);
    let output = with_read_only(&tmpdir, &[], &run).output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: nothing is recorded: cannot create {}: Read-only file system (os error 30)\n",
            user_folder.display()
        )
    );
    // Plain LD_PRELOAD.
    let mut tree = program("scenarios", &["tree"]);
    tree.env("TMPDIR", &tmpdir).env("CUDATRACE_OUT", dir.join("tree.trace"));
    let output = with_read_only(&tmpdir, &["env", &preload_setting()], &tree)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: nothing is recorded: cannot keep spools in {0}: cannot create {0}: Read-only file system (os error 30)\n",
            user_folder.display()
        )
    );
}

// ---- 9. errno across failing calls ---------------------------------------

/// What `held errno` prints after its pid, traced or not.
const ERRNO_LINES: &str = "\
cuMemAlloc_v2 result 2 errno kept
cudaMalloc result 2 errno kept
cuMemAllocPitch_v2 result 2 errno kept
cuMemAllocManaged result 2 errno kept
cuMemAllocAsync result 2 errno kept
cuMemAllocFromPoolAsync result 2 errno kept
cuMemHostAlloc result 2 errno kept
cuMemCreate result 2 errno kept
cuArrayCreate_v2 result 1 errno kept
cuMemFree_v2 result 1 errno kept
cuMemFreeAsync result 1 errno kept
cuMemFreeHost result 1 errno kept
cuMemHostUnregister result 1 errno kept
cuMemRelease result 1 errno kept
cuMemUnmap result 1 errno kept
cuIpcCloseMemHandle result 1 errno kept
cuIpcOpenMemHandle_v2 result 1 errno kept
errno kept 17 of 17
";

fn after_pid_line(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("pid "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn errno_is_kept_across_seventeen_kinds_of_failing_cuda_call() {
    // Each call is made with errno set to a value of its own, and fails:
    // out of memory (1 TiB asked), or an invalid argument. The first is the
    // process's first CUDA call, which makes its spool.
    let untraced = program("held", &["errno"]).output().unwrap();
    assert_eq!(after_pid_line(&stdout(&untraced)), ERRNO_LINES);
    let (mut command, trace, _) = run_held("errno", &[], &["errno"]);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(after_pid_line(&stdout(&output)), ERRNO_LINES);
    let dir = scratch_dir("errno-plain");
    let plain = spools_only(&["errno"], &dir);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    assert_eq!(after_pid_line(&stdout(&plain)), ERRNO_LINES);
    // The out-of-memory failures are in the trace, on their devices; with
    // the failed unmap, whose record was made before the call, 9 events.
    let (report, _) = report_json(&trace);
    assert_eq!(report["complete"], true);
    let p = only_process(&report);
    assert_eq!((&p["events"], &p["lost_events"]), (&json!(9), &json!(0)));
    let ooms: Vec<Value> = p["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let apis: Vec<&Value> = d["ooms"].as_array().unwrap().iter().map(|o| &o["api"]).collect();
            assert!(d["ooms"]
                .as_array()
                .unwrap()
                .iter()
                .all(|o| o["requested_bytes"] == 1u64 << 40));
            json!([d["device"], apis])
        })
        .collect();
    assert_eq!(
        ooms,
        [
            json!([
                0,
                [
                    "cuMemAlloc_v2",
                    "cudaMalloc",
                    "cuMemAllocPitch_v2",
                    "cuMemAllocManaged",
                    "cuMemAllocAsync",
                    "cuMemAllocFromPoolAsync",
                    "cuMemCreate"
                ]
            ]),
            json!([null, ["cuMemHostAlloc"]])
        ]
    );
}

// ---- 10. Crafted spool headers -------------------------------------------

/// A spool of `held args` (an allocation and its free), alone in a folder.
fn base_spool(label: &str) -> PathBuf {
    let dir = scratch_dir(label);
    let output = spools_only(&["args"], &dir);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let spools = spool_files(&dir);
    assert_eq!(spools.len(), 1);
    spools[0].clone()
}

/// A copy of `spool` in a folder of its own, with `bytes` written at `offset`.
fn crafted(spool: &Path, label: &str, offset: u64, bytes: &[u8]) -> PathBuf {
    use std::os::unix::fs::FileExt;
    let copy = scratch_dir(label).join(spool.file_name().unwrap());
    std::fs::copy(spool, &copy).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&copy).unwrap();
    file.write_all_at(bytes, offset).unwrap();
    copy
}

/// `cudatrace collect -o FOLDER.trace FOLDER` of a crafted spool's folder:
/// its stderr and the report of what it wrote.
fn collect_crafted(spool: &Path) -> (String, Value) {
    let folder = spool.parent().unwrap();
    let trace = folder.with_extension("trace");
    let output = cudatrace(&[
        "collect",
        "--keep-spools",
        "-o",
        trace.to_str().unwrap(),
        folder.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    for command in ["report", "html", "perfetto"] {
        let out = cudatrace(&[command, trace.to_str().unwrap()])
            .current_dir(folder)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{command}: {}", stderr(&out));
    }
    let (report, _) = report_json(&trace);
    (stderr(&output), report)
}

#[test]
fn crafted_spool_headers_get_one_line_from_dump_and_a_damaged_spool_entry_from_collect() {
    let base = base_spool("crafted-base");
    let header = cudatrace_events::SpoolFile::open(&base, false).unwrap().header();
    let (pid, reserved) = (header.process.pid, header.reserved_seqs);
    // Refused: the fields that say how to read the rest.
    for (label, offset, value) in [
        ("version", 8, 99u32),
        ("record-size", 12, 64),
        ("header-size", 16, 8192),
        ("chunk-records", 20, 0),
        ("chunk-records-huge", 20, u32::MAX),
    ] {
        let spool = crafted(&base, &format!("crafted-{label}"), offset, &value.to_le_bytes());
        let dump = cudatrace(&["dump", spool.to_str().unwrap()]).output().unwrap();
        assert_eq!(dump.status.code(), Some(2), "{label}: {}", stderr(&dump));
        assert!(dump.stdout.is_empty(), "{label}");
        let said = stderr(&dump);
        let prefix = format!("cudatrace: {}: ", spool.display());
        assert!(
            said.starts_with(&prefix) && said.lines().count() == 1,
            "{label}: {said}"
        );
        if label == "version" {
            assert_eq!(
                said,
                format!("{prefix}spool format version 99 is not supported (this build reads 7)\n"),
                "{label}"
            );
        }
        let (collected, report) = collect_crafted(&spool);
        assert!(
            collected.ends_with("cudatrace: 1 spool file could not be read (see `cudatrace report`)\n"),
            "{label}: {collected}"
        );
        assert_eq!(report["processes"], json!([]), "{label}");
        let reason = said.trim_end().strip_prefix(&prefix).unwrap();
        assert_eq!(
            report["damaged_spools"],
            json!([{"pid": pid, "image": 0, "path": spool.display().to_string(), "reason": reason}]),
            "{label}"
        );
        assert!(!collected.contains("panicked"), "{label}");
    }
    // Read: counts no process could have written. Every command copes,
    // and the report says what the header claims.
    let cases: [(&str, u64, Vec<u8>); 7] = [
        ("seqs-max", 96, u64::MAX.to_le_bytes().to_vec()),
        ("released-max", 92, u32::MAX.to_le_bytes().to_vec()),
        ("ring-zero", 112, 0u32.to_le_bytes().to_vec()),
        ("ring-max", 112, u32::MAX.to_le_bytes().to_vec()),
        ("punched-max", 116, u32::MAX.to_le_bytes().to_vec()),
        ("cmdline-max", 88, u32::MAX.to_le_bytes().to_vec()),
        ("children-lost-max", 120, u32::MAX.to_le_bytes().to_vec()),
    ];
    for (label, offset, bytes) in cases {
        let spool = crafted(&base, &format!("crafted-{label}"), offset, &bytes);
        let dump = cudatrace(&["dump", spool.to_str().unwrap()]).output().unwrap();
        assert_eq!(dump.status.code(), Some(0), "{label}: {}", stderr(&dump));
        for line in stdout(&dump).lines() {
            serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{label}: {e}: {line}"));
        }
        let (collected, report) = collect_crafted(&spool);
        assert!(!collected.contains("panicked"), "{label}: {collected}");
        assert_eq!(report["damaged_spools"], json!([]), "{label}");
        let p = only_process(&report);
        let (events, lost) = match label {
            // Every number handed out and never written is lost.
            "seqs-max" => (2, u64::MAX - reserved),
            // Every record reads as given back already.
            "released-max" => (0, reserved),
            _ => (2, 0),
        };
        assert_eq!(
            (&p["events"], &p["lost_events"]),
            (&json!(events), &json!(lost)),
            "{label}"
        );
        assert_eq!(report["lost_events"], lost, "{label}");
        assert_eq!(p["argv"], json!([held().to_str().unwrap(), "args"]), "{label}");
        let unrecorded: Vec<(&Value, &Value)> = report["unrecorded_processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| (&u["ppid"], &u["reason"]))
            .collect();
        if label == "children-lost-max" {
            let counted = json!(
                "4294967295 more forked children could not record; their parent's spool header had no room to name them"
            );
            assert_eq!(unrecorded, [(&json!(pid), &counted)], "{label}");
        } else {
            assert_eq!(unrecorded, [], "{label}");
        }
    }
}

#[test]
fn a_spool_of_another_record_size_is_refused_for_its_record_size() {
    let base = base_spool("record-size-base");
    let spool = crafted(&base, "record-size", 12, &64u32.to_le_bytes());
    let dump = cudatrace(&["dump", spool.to_str().unwrap()]).output().unwrap();
    assert_eq!(dump.status.code(), Some(2));
    let said = stderr(&dump);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.trim_end()
            .ends_with(": spool header gives a record size of 64, not this version's 72 (crafted or damaged?)"),
        "{said}"
    );
}

// ---- 11. Forked children past the header's 16 slots ----------------------

/// `held fork-fail 20`, spools only: the parent records, then forks 20
/// children one at a time that setuid(65534) and allocate. None can
/// create its spool in the folder (root's, not writable by 65534); with
/// no `cudatrace run`, each says so in a slot of its parent's spool
/// header, and the four that find the 16 slots taken are counted there.
/// Returns the parent's pid, the children's, the spool folder and the
/// collected trace.
fn children_past_the_slots(label: &str) -> (u64, Vec<u64>, PathBuf, PathBuf) {
    assert_eq!(effective_uid(), 0, "this test changes user: run it as root, as CI does");
    let dir = scratch_dir(label);
    let output = spools_only(&["fork-fail", "20"], &dir);
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    let text = stdout(&output);
    let parent: u64 = field(&text, "pid", 0).parse().unwrap();
    let children: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("failed-child ")?.parse().ok())
        .collect();
    assert_eq!(children.len(), 20);
    let trace = dir.with_extension("trace");
    let collected = cudatrace(&[
        "collect",
        "--keep-spools",
        "-o",
        trace.to_str().unwrap(),
        dir.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(collected.status.code(), Some(0), "{}", stderr(&collected));
    (parent, children, dir, trace)
}

#[test]
fn forked_children_past_the_sixteen_slots_are_counted_and_the_report_says_so() {
    let (parent, children, dir, trace) = children_past_the_slots("children-past-slots");
    // The parent's header: 16 slots taken, in fork order; 4 counted at 120.
    let spools = spool_files(&dir);
    assert_eq!(spools.len(), 1, "only the parent has a spool");
    let header = cudatrace_events::SpoolFile::open(&spools[0], false).unwrap().header();
    assert_eq!(header.child_failures_lost, 4);
    let in_slots: Vec<u64> = header.child_failures.iter().map(|(_, f)| u64::from(f.pid)).collect();
    assert_eq!(in_slots, children[..16]);
    let mut word = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::open(&spools[0]).unwrap(), &mut word, 120).unwrap();
    assert_eq!(u32::from_le_bytes(word), 4);
    // The report: the sixteen by name, and the four more counted.
    let (report, _) = report_json(&trace);
    let p = only_process(&report);
    assert_eq!((&p["pid"], &p["events"]), (&json!(parent), &json!(2)));
    let reason = format!("cannot create its spool in {}", dir.display());
    let named: Vec<Value> = children[..16]
        .iter()
        .map(|&child| {
            json!({"pid": child, "ppid": parent, "uid": 65534, "errno": libc::EACCES, "name": "held",
                   "reason": reason})
        })
        .collect();
    let unrecorded = report["unrecorded_processes"].as_array().unwrap();
    assert_eq!(unrecorded.len(), 17, "{report}");
    let without_time = |process: &Value| {
        let mut process = process.clone();
        process.as_object_mut().unwrap().remove("time_ns");
        process
    };
    assert_eq!(unrecorded[..16].iter().map(without_time).collect::<Vec<_>>(), named);
    let counted = "4 more forked children could not record; their parent's spool header had no room to name them";
    assert_eq!(
        (&unrecorded[16]["reason"], &unrecorded[16]["ppid"]),
        (&json!(counted), &json!(parent))
    );
    let text = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    let lines: Vec<String> = stdout(&text)
        .lines()
        .filter(|l| l.contains(counted))
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 1, "{}", stdout(&text));
    for child in &children[..16] {
        assert!(
            stdout(&text).contains(&format!(
                "\n  pid {child} (held, parent {parent}, uid 65534): {reason} (EACCES: "
            )),
            "{}",
            stdout(&text)
        );
    }
}

#[test]
fn the_report_counts_every_child_that_could_not_record() {
    let (_, _, _, trace) = children_past_the_slots("children-past-slots-count");
    let text = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    assert!(
        stdout(&text).contains("\n20 processes could not record; the trace has none of their events:\n"),
        "{}",
        stdout(&text)
    );
}

/// A forked child that could not record claims a slot of its parent's
/// header (by its pid), fills it and publishes it last. One killed between
/// the claim and the publication leaves a slot that is never read; the
/// trace still names it, as a forked child that left no spool (its parent
/// noted the fork). The other children are named as they said.
#[test]
fn a_child_killed_between_claiming_a_failure_slot_and_publishing_it_is_still_named() {
    assert_eq!(effective_uid(), 0, "this test changes user: run it as root, as CI does");
    let dir = scratch_dir("killed-mid-claim");
    let output = spools_only(&["fork-fail", "3"], &dir);
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    let text = stdout(&output);
    let parent: u64 = text
        .lines()
        .next()
        .unwrap()
        .strip_prefix("pid ")
        .unwrap()
        .parse()
        .unwrap();
    let children: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("failed-child ")?.parse().ok())
        .collect();
    assert_eq!(children.len(), 3);
    // The second child's slot as a kill after its claim leaves it: its pid
    // there, the rest unpublished.
    let spool = &spool_files(&dir)[0];
    let slot = 128 + std::mem::size_of::<cudatrace_events::layout::ChildFailure>() as u64;
    let published = slot + std::mem::offset_of!(cudatrace_events::layout::ChildFailure, published) as u64;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(spool).unwrap();
    let mut word = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut word, slot).unwrap();
    assert_eq!(u64::from(u32::from_le_bytes(word)), children[1]);
    std::os::unix::fs::FileExt::write_all_at(&file, &0u32.to_le_bytes(), published).unwrap();
    drop(file);
    let trace = dir.with_extension("trace");
    let collected = cudatrace(&["collect", "-o", trace.to_str().unwrap(), dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(collected.status.code(), Some(0), "{}", stderr(&collected));
    let (report, _) = report_json(&trace);
    let unrecorded: Vec<(&Value, &Value)> = report["unrecorded_processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (&p["pid"], &p["ppid"]))
        .collect();
    let (first, third, parent) = (json!(children[0]), json!(children[2]), json!(parent));
    assert_eq!(unrecorded, [(&first, &parent), (&third, &parent)], "{report}");
    let silent: Vec<(&Value, &Value)> = report["forked_without_spool"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (&p["pid"], &p["ppid"]))
        .collect();
    assert_eq!(silent, [(&json!(children[1]), &parent)], "{report}");
}
