//! The command line as a user meets it: destinations refused before the
//! command starts, two writers of one trace, `collect` leaving the user's
//! files alone, a spool folder that cannot be used, closed pipes, exit
//! codes, and what `run` says of a program that never uses CUDA.

mod common;

use common::*;
use serde_json::json;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `cudatrace run -o TRACE -- touch MARKER`: whether the command ran shows in MARKER.
fn run_touching(trace: &Path, marker: &Path) -> Command {
    let mut command = cudatrace_run();
    command.arg("-o").arg(trace).arg("--").arg("touch").arg(marker);
    command
}

#[test]
fn an_output_that_cannot_be_written_is_refused_before_the_command_starts() {
    let dir = scratch_dir("refused-output");
    let marker = dir.join("ran");
    let missing = dir.join("no-such-folder").join("x.trace");
    let fifo = dir.join("f.trace");
    let fifo_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo_path.as_ptr(), 0o600) }, 0);
    let cases = [
        (
            missing.clone(),
            format!(
                "cudatrace: cannot write {}: folder {} does not exist\n",
                missing.display(),
                dir.join("no-such-folder").display()
            ),
        ),
        (
            dir.clone(),
            format!("cudatrace: cannot write {}: it is a folder\n", dir.display()),
        ),
        (
            fifo.clone(),
            format!(
                "cudatrace: cannot write {}: it is a pipe; a trace is written to a regular file\n",
                fifo.display()
            ),
        ),
        (
            "/dev/null".into(),
            "cudatrace: cannot write /dev/null: it is a device; a trace is written to a regular file\n".to_string(),
        ),
    ];
    for (trace, message) in cases {
        let output = run_touching(&trace, &marker).env("TMPDIR", &dir).output().unwrap();
        assert_eq!(output.status.code(), Some(2));
        assert_eq!(stderr(&output), message);
        assert!(!marker.exists(), "the command ran");
    }
    // A read-only folder, in a mount namespace of the test's own.
    let readonly = dir.join("readonly");
    std::fs::create_dir(&readonly).unwrap();
    let trace = readonly.join("x.trace");
    let mut command = Command::new("unshare");
    command
        .args([
            "-rm",
            "sh",
            "-c",
            r#"mount -o bind,ro "$1" "$1" && shift && exec "$@""#,
            "sh",
        ])
        .arg(&readonly)
        .arg(cli())
        .args(["run", "--preload", tracer_library().to_str().unwrap(), "-o"])
        .arg(&trace)
        .arg("--")
        .arg("touch")
        .arg(&marker)
        .env("TMPDIR", &dir);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: cannot write {}: Read-only file system (os error 30)\n",
            trace.display()
        )
    );
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn a_run_that_cannot_start_leaves_an_existing_trace_as_it_was() {
    let dir = scratch_dir("failed-start");
    let trace = dir.join("results.trace");
    std::fs::write(&trace, b"yesterday's results").unwrap();
    // Without --force a file there is never replaced: the command does not run.
    let marker = dir.join("ran");
    let refused = run_touching(&trace, &marker).env("TMPDIR", &dir).output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        stderr(&refused),
        format!("cudatrace: {} exists; pass --force to replace it\n", trace.display())
    );
    assert!(!marker.exists(), "the command ran");
    assert_eq!(std::fs::read(&trace).unwrap(), b"yesterday's results");
    // With --force, a run that cannot start still leaves it as it was.
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .arg("--force")
        .args(["--", "/no/such/program"])
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127));
    assert_eq!(std::fs::read(&trace).unwrap(), b"yesterday's results");
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .arg("--force")
        .args(["--", "true"])
        .env("TMPDIR", &dir)
        // A spool folder that cannot be made: its parent is the trace, a file.
        .env("CUDATRACE_DIR", trace.join("nowhere"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(std::fs::read(&trace).unwrap(), b"yesterday's results");
}

#[test]
fn a_second_run_to_the_same_trace_is_refused_while_the_first_writes_it() {
    let (mut first, trace) = run_command("same-output", "wait", &[]);
    let mut first = first.stdout(Stdio::piped()).spawn().unwrap();
    let _program_out = wait_for_line(&mut first, "ready");
    let marker = trace.with_file_name("second-ran");
    let second = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .args(["--force", "--", "touch"])
        .arg(&marker)
        .env("TMPDIR", trace.parent().unwrap())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2));
    assert_eq!(
        stderr(&second),
        format!(
            "cudatrace: {} is being written by another cudatrace right now; choose another -o\n",
            trace.display()
        )
    );
    assert!(!marker.exists(), "the second command ran");
    // SAFETY: signalling our own child; cudatrace passes SIGTERM on.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    assert_eq!(first.wait().unwrap().code(), Some(143));
    let (report, _) = report_json(&trace);
    assert_eq!(report["complete"], true);
    assert_eq!(report["processes"][0]["devices"][0]["live_bytes_at_exit"], 4096);
    // Once the first is done, a later run replaces its finished trace only
    // with --force.
    let refused = run_touching(&trace, &marker)
        .env("TMPDIR", trace.parent().unwrap())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(!marker.exists());
    let third = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .args(["--force", "--", "touch"])
        .arg(&marker)
        .env("TMPDIR", trace.parent().unwrap())
        .output()
        .unwrap();
    assert_eq!(third.status.code(), Some(0), "{}", stderr(&third));
    assert!(marker.exists());
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"], json!([]));
}

/// Spools written by the user's own choice of folder, without a collector.
fn spools_in(dir: &Path) {
    let output = program("scenarios", &["runtime"])
        .env("LD_PRELOAD", tracer_library())
        .env("CUDATRACE_DIR", dir)
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(spool_files(dir).len(), 1);
}

#[test]
fn collect_replaces_an_existing_trace_only_with_force_and_keeps_the_user_s_folder() {
    let dir = scratch_dir("collect-existing");
    let spools = dir.join("spools");
    std::fs::create_dir(&spools).unwrap();
    spools_in(&spools);
    let existing = dir.join("existing.trace");
    std::fs::write(&existing, b"the only copy").unwrap();
    let output = cudatrace(&["collect", "-o", existing.to_str().unwrap(), spools.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: {} exists and may be the only copy of a trace; pass --force to replace it\n",
            existing.display()
        )
    );
    assert_eq!(std::fs::read(&existing).unwrap(), b"the only copy");
    assert_eq!(
        spool_files(&spools).len(),
        1,
        "spools were removed by a refused collect"
    );
    let output = cudatrace(&[
        "collect",
        "--force",
        "-o",
        existing.to_str().unwrap(),
        spools.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json(&existing);
    assert_eq!(report["processes"][0]["events"], 24);
    // The spools went into the trace; the folder, which the user made, stays.
    assert!(spool_files(&spools).is_empty());
    assert!(spools.is_dir());
    // With nothing named, the trace goes beside the folder; --keep-spools keeps them.
    spools_in(&spools);
    let output = cudatrace(&["collect", "--keep-spools", spools.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json(&dir.join("spools.trace"));
    assert_eq!(report["processes"][0]["events"], 24);
    assert_eq!(spool_files(&spools).len(), 1);
    // A pipe is never replaced, even with --force: refused, spools kept.
    let fifo = dir.join("f.trace");
    let fifo_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo_path.as_ptr(), 0o600) }, 0);
    let output = cudatrace(&[
        "collect",
        "--force",
        "-o",
        fifo.to_str().unwrap(),
        spools.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: cannot write {}: it is a pipe; a trace is written to a regular file\n",
            fifo.display()
        )
    );
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(spool_files(&spools).len(), 1);
}

#[test]
fn an_unusable_spool_folder_is_said_once_for_the_whole_tree_and_the_program_runs_unchanged() {
    let dir = scratch_dir("bad-spool-dir");
    // A folder that cannot be made: its parent is a file.
    std::fs::write(dir.join("a-file"), b"").unwrap();
    let nowhere = dir.join("a-file").join("nowhere");
    let expected_line = format!(
        "cudatrace: nothing is recorded: CUDATRACE_DIR={}: Not a directory (os error 20)\n",
        nowhere.display()
    );
    let plain = |quiet: bool| {
        let mut command = program("scenarios", &["tree"]);
        command
            .env("LD_PRELOAD", tracer_library())
            .env("CUDATRACE_DIR", &nowhere);
        if quiet {
            command.env("CUDATRACE_QUIET", "1");
        }
        command.output().unwrap()
    };
    let untraced = program("scenarios", &["tree"]).output().unwrap();
    let lines = |output: &Output| {
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut words: Vec<String> = text.lines().map(|l| l.split(' ').next().unwrap().to_owned()).collect();
        words.sort();
        words
    };
    // Four processes (three forks and an exec), one line.
    let output = plain(false);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stderr(&output), expected_line);
    assert_eq!(lines(&output), lines(&untraced));
    assert!(!nowhere.exists());
    let output = plain(true);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stderr(&output), "");
    // Under `cudatrace run`, cudatrace says it, and runs the command untraced.
    let trace = dir.join("run.trace");
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(fake_cuda::program("scenarios"))
        .arg("exit3")
        .env("CUDATRACE_DIR", &nowhere)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(stderr(&output), expected_line);
    assert!(!trace.exists());
}

#[test]
fn a_spool_folder_named_but_missing_is_made_private_and_used() {
    use std::os::unix::fs::PermissionsExt;
    // docs/usage.md's "Collecting by hand", as written: the folder need not exist.
    let dir = scratch_dir("missing-spool-dir");
    let spools = dir.join("spools").join("deeper");
    let output = program("scenarios", &["exit3"])
        .env("LD_PRELOAD", tracer_library())
        .env("CUDATRACE_DIR", &spools)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
    let mode = std::fs::metadata(&spools).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert_eq!(spool_files(&spools).len(), 1);
}

#[test]
fn run_honours_cudatrace_dir_for_its_spools() {
    let dir = scratch_dir("run-spool-dir");
    let spools = dir.join("big-disk");
    std::fs::create_dir(&spools).unwrap();
    let (mut command, trace) = run_command("run-spool-dir", "runtime", &["--keep-spools"]);
    let output = command.env("CUDATRACE_DIR", &spools).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let run_dirs: Vec<_> = std::fs::read_dir(&spools).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(run_dirs.len(), 1);
    assert_eq!(spool_files(&run_dirs[0]).len(), 1);
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"][0]["events"], 24);
}

/// Runs `command` with stdout a pipe whose reading end is already closed,
/// as under `| head` once head has exited: every write fails with EPIPE.
fn with_stdout_closed(mut command: Command) -> Output {
    let mut fds = [0; 2];
    // SAFETY: a two-element array for pipe(2).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just created and are owned here.
    let (reading, writing) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(reading);
    command
        .stdout(Stdio::from(writing))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let (mut command, trace) = run_command("closed-pipe", "loop", &["--keep-spools"]);
    let spool_base = trace.parent().unwrap().to_owned();
    let output = command
        .arg("2000")
        .env("FAKE_CUDA_CAPACITY", "1099511627776")
        .output()
        .unwrap();
    assert!(output.status.success());
    let mut cases = vec![
        cudatrace(&["report", "--json", trace.to_str().unwrap()]),
        cudatrace(&["report", trace.to_str().unwrap()]),
        cudatrace(&["--help"]),
        cudatrace(&["run", "--help"]),
        cudatrace(&["--version"]),
    ];
    let mut dump = cudatrace(&["dump"]);
    dump.args(run_spools(&spool_base));
    cases.push(dump);
    for command in cases {
        let shown = format!("{command:?}");
        let output = with_stdout_closed(command);
        assert_eq!(output.status.code(), Some(0), "{shown}: {}", stderr(&output));
        assert_eq!(stderr(&output), "", "{shown}");
    }
}

#[test]
fn every_command_that_names_what_it_wrote_ends_quietly_on_a_closed_pipe() {
    let (output, trace) = run_scenario("closed-pipe-outputs", "runtime", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let pid = report_json(&trace).0["processes"][0]["pid"].clone();
    let dir = trace.parent().unwrap();
    let at = |name: &str| dir.join(name).to_str().unwrap().to_string();
    // Each command, and what it must still have written.
    let cases = [
        (["html", "-o", &at("page.html")], at("page.html")),
        (["perfetto", "-o", &at("view.pftrace")], at("view.pftrace")),
        (["flamegraph", "-o", &at("flame.svg")], at("flame.svg")),
        (["snapshot", "-o", &at("snap")], at(&format!("snap.{pid}.pickle"))),
        (["merge", "-o", &at("merged.trace")], at("merged.trace")),
        (["export", "-o", &at("fleet")], at("fleet/call_sites.parquet")),
    ];
    for (args, written) in cases {
        let mut command = cudatrace(&args);
        command.arg(&trace);
        let output = with_stdout_closed(command);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {}", stderr(&output));
        assert!(!stderr(&output).contains("panicked"), "{args:?}: {}", stderr(&output));
        assert!(Path::new(&written).is_file(), "{args:?}: {written} missing");
    }
}

#[test]
fn dump_checks_each_file_before_reading_it() {
    let dir = scratch_dir("dump-input");
    let zeros = dir.join("zeros.spool");
    std::fs::write(&zeros, vec![0u8; 8 << 20]).unwrap();
    let garbage = dir.join("garbage.spool");
    std::fs::write(&garbage, vec![0x41u8; 8 << 20]).unwrap();
    let empty = dir.join("empty.spool");
    std::fs::write(&empty, b"").unwrap();
    // Named as a process names its spool: an empty one is a spool whose
    // process could not reserve room for its header.
    let empty_spool = dir.join("cudatrace-4242-0.spool");
    std::fs::write(&empty_spool, b"").unwrap();
    let cases = [
        (
            "/dev/zero".to_string(),
            "/dev/zero is a device, not a regular file: cudatrace reads its input more than once (save it to a file first)".to_string(),
        ),
        (
            zeros.display().to_string(),
            format!(
                "{}: its header was never completed (its process died creating it?)",
                zeros.display()
            ),
        ),
        (
            garbage.display().to_string(),
            format!("{}: not a cudatrace spool file (bad magic)", garbage.display()),
        ),
        (
            empty.display().to_string(),
            format!("{}: an empty file, neither a cudatrace spool nor a trace", empty.display()),
        ),
        (
            empty_spool.display().to_string(),
            format!(
                "{}: spool is empty: its process could not reserve space for it (disk full?)",
                empty_spool.display()
            ),
        ),
        // Its size reads as 0, yet it has content: made as it is read.
        (
            "/proc/self/status".to_string(),
            "/proc/self/status: not a cudatrace spool file (bad magic)".to_string(),
        ),
    ];
    for (path, message) in cases {
        let output = cudatrace(&["dump", &path]).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{path}");
        assert_eq!(stderr(&output), format!("cudatrace: {message}\n"));
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn a_command_that_cannot_be_executed_exits_126_as_in_a_shell() {
    let dir = scratch_dir("not-executable");
    let script = dir.join("script.sh");
    std::fs::write(&script, "echo hi\n").unwrap();
    for target in [script.as_path(), dir.as_path()] {
        let output = cudatrace_run()
            .arg("--")
            .arg(target)
            .env("TMPDIR", &dir)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(126), "{}", stderr(&output));
        assert_eq!(
            stderr(&output),
            format!(
                "cudatrace: cannot run {}: Permission denied (os error 13)\n",
                target.display()
            )
        );
    }
}

#[test]
fn a_program_without_cuda_is_said_to_record_nothing_and_one_that_only_initialises_is_in_the_trace() {
    let dir = scratch_dir("no-cuda-run");
    let trace = dir.join("true.trace");
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .args(["--", "true"])
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: recording `true` and every process it starts into {0}\ncudatrace: no process loaded libcuda; nothing to record (wrote an empty trace {0})\n",
            trace.display()
        )
    );
    // Without -o, no empty trace is left behind.
    let output = cudatrace_run()
        .args(["--", "true"])
        .current_dir(&dir)
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let said = stderr(&output);
    assert!(
        said.ends_with("\ncudatrace: no process loaded libcuda; nothing to record; no trace written\n"),
        "{said}"
    );
    let traces: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".trace") && name != "true.trace")
        .collect();
    assert_eq!(traces, Vec::<String>::new());
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"], json!([]));
    let (output, trace) = run_scenario("init-only-run", "init-only", &[]);
    assert!(output.status.success());
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"].as_array().unwrap().len(), 1);
    assert_eq!(report["processes"][0]["events"], 0);
    assert_eq!(report["processes"][0]["exit_status"], 0);
}

#[test]
fn every_subcommand_has_its_own_help() {
    for (command, usage) in [
        ("run", "Usage: cudatrace run [OPTIONS] <CMD>..."),
        ("collect", "Usage: cudatrace collect [OPTIONS] <DIR>"),
        ("report", "Usage: cudatrace report [OPTIONS] <TRACE>"),
        ("dump", "Usage: cudatrace dump [OPTIONS] [FILE]..."),
        ("snapshot", "Usage: cudatrace snapshot [OPTIONS] <TRACE>"),
        ("perfetto", "Usage: cudatrace perfetto [OPTIONS] <TRACE>"),
        ("html", "Usage: cudatrace html [OPTIONS] <TRACE>"),
        ("export", "Usage: cudatrace export [OPTIONS] --output <DIR> <TRACE>..."),
    ] {
        let output = cudatrace(&[command, "--help"]).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{command}");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains(usage), "{command}: {text}");
    }
    // A command's own flags after CMD belong to it.
    let dir = scratch_dir("run-args");
    let output = cudatrace_run()
        .arg("-o")
        .arg(dir.join("t.trace"))
        .args(["sh", "-c", "exit 4", "--help"])
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
}

#[test]
fn run_inside_a_preloaded_tree_traces_its_command_into_its_own_trace() {
    let dir = scratch_dir("preloaded-parent");
    let inner = dir.join("inner.trace");
    let run = format!(
        "{} run --preload {} -o {} -- {} runtime",
        cli().display(),
        tracer_library().display(),
        inner.display(),
        fake_cuda::program("scenarios").display()
    );
    // A shell exported LD_PRELOAD, as a user's profile might: the shell
    // becomes a traced tree's root and cudatrace runs inside that tree.
    let output = Command::new("sh")
        .args(["-c", &run])
        .env("LD_PRELOAD", tracer_library())
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("TMPDIR", &dir)
        .env("CUDATRACE_OUT", dir.join("outer.trace"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json(&inner);
    assert_eq!(report["processes"].as_array().unwrap().len(), 1);
    assert_eq!(report["processes"][0]["events"], 24);
    assert!(
        !dir.join("outer.trace").exists(),
        "the outer tree recorded the inner command"
    );
}

#[test]
fn collect_says_when_there_is_nothing_to_collect_and_names_a_trace_for_dot() {
    let dir = scratch_dir("nothing-to-collect");
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let output = cudatrace(&["collect", empty.to_str().unwrap()]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: {} holds no spool files: nothing to collect\n",
            empty.display()
        )
    );
    assert!(!dir.join("empty.trace").exists());
    // `collect .` from inside the folder writes the trace beside it.
    let spools = dir.join("spools");
    std::fs::create_dir(&spools).unwrap();
    spools_in(&spools);
    let output = cudatrace(&["collect", "."]).current_dir(&spools).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json(&dir.join("spools.trace"));
    assert_eq!(report["processes"][0]["events"], 24);
}

#[test]
fn dump_without_files_says_what_to_do_and_dumps_traces_record_by_record() {
    let output = cudatrace(&["dump"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "cudatrace: dump needs spool files or traces, or --dir DIR (see --help)\n"
    );
    let (run, trace) = run_scenario("dump-a-trace", "runtime", &[]);
    assert!(run.status.success());
    let (report, _) = report_json(&trace);
    let output = cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["header"]["format_version"], 13);
    let process = lines.iter().find(|l| l.get("process").is_some()).unwrap();
    assert_eq!(process["process"]["pid"], report["processes"][0]["pid"]);
    // Without NVML (no GPU here), the collector says so once.
    let nvml: Vec<_> = lines.iter().filter_map(|l| l.get("nvml_status")).collect();
    assert_eq!(nvml.len(), 1);
    assert_eq!(nvml[0]["devices_ok"], false);
    let memory_events = lines
        .iter()
        .filter_map(|l| l["op"].as_str())
        .filter(|op| cudatrace_events::Op::from_name(op).is_some_and(|op| op.is_memory_event()))
        .count();
    assert_eq!(memory_events, 24);
    assert_eq!(lines.iter().filter(|l| l.get("process_end").is_some()).count(), 1);
    assert_eq!(lines.last().unwrap()["footer"]["events"], 24);
    // A damaged trace: every record before the damage, then the damage; exit 1.
    let bytes = std::fs::read(&trace).unwrap();
    let cut = trace.with_extension("cut");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let output = cudatrace(&["dump", cut.to_str().unwrap()]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&output.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(
        last["damage"]["at"],
        (bytes.len() - 24) as u64,
        "the footer: 9 bytes of frame and 15 of payload"
    );
    assert_eq!(last["damage"]["skipped"], false);
}

/// The lines `cudatrace dump ARGS` prints, parsed; it must succeed.
fn dump_lines(args: &[&str]) -> Vec<serde_json::Value> {
    let output = cudatrace(&[&["dump"], args].concat()).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The dump line of a stack node or blob piece, worked out here from the
/// record's words as `docs/trace-format.md` lays them out.
fn expected_stack_record_line(event: &cudatrace_events::Event) -> serde_json::Value {
    use cudatrace_events::Op;
    let common = json!({"pid": event.pid, "tid": event.tid, "seq": event.seq, "time_ns": event.time_ns});
    let own = match event.op {
        Op::StackNode => json!({
            "op": "stack-node",
            "node": event.stream,
            "parent": event.size,
            "frame_kind": (["native", "python", "no-python", "truncated"][event.arg2 as usize]),
            "value": event.address,
            "offset": event.arg1,
        }),
        Op::Blob => {
            let words = [event.size, event.stream, event.arg2];
            let bytes: String = words
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .map(|b| format!("{b:02x}"))
                .collect();
            json!({
                "op": "blob",
                "blob_kind": (["module", "code", "device"][event.device.unwrap() as usize - 1]),
                "key": event.address,
                "offset": event.arg1 & 0xffff_ffff,
                "total": event.arg1 >> 32,
                "bytes": bytes,
            })
        }
        other => panic!("not a stack record: {other}"),
    };
    let mut line = common;
    line.as_object_mut().unwrap().extend(own.as_object().unwrap().clone());
    line
}

/// The paths of the module blobs among dump `lines`, put back together
/// from their pieces.
fn module_paths(lines: &[serde_json::Value]) -> Vec<String> {
    let mut blobs = std::collections::BTreeMap::<u64, Vec<u8>>::new();
    for line in lines.iter().filter(|l| l["op"] == "blob" && l["blob_kind"] == "module") {
        let text = line["bytes"].as_str().unwrap();
        let bytes: Vec<u8> = (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect();
        let total = line["total"].as_u64().unwrap() as usize;
        let whole = blobs
            .entry(line["key"].as_u64().unwrap())
            .or_insert_with(|| vec![0; total]);
        let offset = line["offset"].as_u64().unwrap() as usize;
        let length = bytes.len().min(total - offset);
        whole[offset..offset + length].copy_from_slice(&bytes[..length]);
    }
    blobs
        .values()
        .map(|whole| cudatrace_events::stacks::ModuleInfo::decode(whole).unwrap().path)
        .collect()
}

#[test]
fn dump_prints_stack_nodes_and_blob_pieces_with_their_own_fields() {
    // A blob piece's words hold bytes of a description, a stack node's its
    // ids: printed as a memory event's address, size and stream, they read
    // as garbage ("size":13149600763535018839).
    let run = run_traced("dump-stack-records", program("scenarios", &["runtime"]));
    assert!(run.output.status.success());
    let folder = run.spool_paths[0].parent().unwrap();
    let lines = dump_lines(&["--dir", folder.to_str().unwrap()]);
    let stack_records: Vec<&cudatrace_events::Event> = run
        .stack_records
        .iter()
        .flatten()
        .filter(|e| e.op.is_stack_record())
        .collect();
    assert!(stack_records.iter().any(|e| e.op == cudatrace_events::Op::Blob));
    assert!(stack_records.iter().any(|e| e.op == cudatrace_events::Op::StackNode));
    for event in &stack_records {
        let line = lines
            .iter()
            .find(|l| l["pid"] == event.pid && l["seq"] == event.seq)
            .unwrap_or_else(|| panic!("no line for {event:?}"));
        assert_eq!(*line, expected_stack_record_line(event));
    }
    let printed = lines
        .iter()
        .filter(|l| l["op"] == "blob" || l["op"] == "stack-node")
        .count();
    assert_eq!(printed, stack_records.len());
    let wanted = [
        fake_cuda::program("scenarios").display().to_string(),
        tracer_library().display().to_string(),
    ];
    let paths = module_paths(&lines);
    assert!(wanted.iter().all(|path| paths.contains(path)), "{paths:?}");

    // A trace's lines are the same, with the process's index in the trace.
    let (run, trace) = run_scenario("dump-stack-records-trace", "runtime", &[]);
    assert!(run.status.success());
    let lines = dump_lines(&[trace.to_str().unwrap()]);
    let fields = |line: &serde_json::Value| line.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    let blob_fields = [
        "blob_kind",
        "bytes",
        "key",
        "offset",
        "op",
        "pid",
        "process",
        "seq",
        "tid",
        "time_ns",
        "total",
    ];
    let node_fields = [
        "frame_kind",
        "node",
        "offset",
        "op",
        "parent",
        "pid",
        "process",
        "seq",
        "tid",
        "time_ns",
        "value",
    ];
    let blobs: Vec<_> = lines.iter().filter(|l| l["op"] == "blob").collect();
    let nodes: Vec<_> = lines.iter().filter(|l| l["op"] == "stack-node").collect();
    assert!(!blobs.is_empty() && !nodes.is_empty());
    assert!(blobs.iter().all(|l| fields(l) == blob_fields), "{blobs:?}");
    assert!(nodes.iter().all(|l| fields(l) == node_fields), "{nodes:?}");
    let paths = module_paths(&lines);
    assert!(wanted.iter().all(|path| paths.contains(path)), "{paths:?}");
    // Every event's stack and every node's parent names a node printed.
    let node_ids: Vec<&serde_json::Value> = nodes.iter().map(|l| &l["node"]).collect();
    for line in &lines {
        for id in [&line["stack"], &line["parent"]] {
            assert!(id.is_null() || *id == 0 || node_ids.contains(&id), "{line}");
        }
    }
}

#[test]
fn the_text_report_says_how_many_live_allocations_it_does_not_list() {
    let (mut command, trace) = run_command("many-live", "loop", &[]);
    assert!(command.arg("20").output().unwrap().status.success());
    let output = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("  GPU 0: 20 allocations, 10 frees, peak "), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("    live ")).count(), 5, "{text}");
    assert!(
        text.contains("    ... and 5 more (all in `cudatrace report --json`)\n"),
        "{text}"
    );
}

#[test]
fn run_says_so_when_recording_is_disabled() {
    let (mut command, trace) = run_command("disabled-run", "runtime", &[]);
    let output = command.env("CUDATRACE_DISABLE", "1").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stderr(&output),
        format!(
            "cudatrace: recording `{1} runtime` and every process it starts into {0}\ncudatrace: CUDATRACE_DISABLE is set; nothing was recorded (wrote an empty trace {0})\n",
            trace.display(),
            fake_cuda::program("scenarios").display()
        )
    );
}
