//! What cudatrace promises when used against itself: each test is an attack
//! an adversarial user made (the faults issue), and the promise it checks.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `command`, killing it (and failing) if it takes over 20 seconds: the
/// attacks here used to block for ever.
fn output_within_20_seconds(command: &mut Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("{command:?} still ran after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A finished trace of a small scenario.
fn small_trace(label: &str) -> PathBuf {
    let (output, trace) = run_scenario(label, "runtime", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    trace
}

#[test]
fn a_pipe_or_a_fifo_as_input_is_refused_at_once_by_every_command() {
    let dir = scratch_dir("fifo-input");
    let fifo = dir.join("t.trace");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for command in ["report", "snapshot", "perfetto", "html", "dump"] {
        let output = output_within_20_seconds(cudatrace(&[command, fifo.to_str().unwrap()]).current_dir(&dir));
        assert_eq!(output.status.code(), Some(2), "{command}: {}", stderr(&output));
        assert_eq!(
            stderr(&output),
            format!(
                "cudatrace: {} is a pipe: a trace is read more than once, so it needs a regular file (save it to one first)\n",
                fifo.display()
            ),
            "{command}"
        );
    }
    // Process substitution hands a pipe over as /dev/fd/N.
    let trace = small_trace("pipe-input");
    let output = output_within_20_seconds(
        Command::new("bash")
            .arg("-c")
            .arg(format!("\"$0\" report <(cat '{}')", trace.display()))
            .arg(cli()),
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with("cudatrace: /dev/fd/") && stderr(&output).contains(" is a pipe: "),
        "{}",
        stderr(&output)
    );
    assert!(output.stdout.is_empty(), "nothing is reported before the refusal");
}

/// The command between backticks in a message line.
fn quoted_command(line: &str) -> &str {
    line.split('`').nth(1).unwrap_or_else(|| panic!("no command in {line}"))
}

#[test]
fn commands_printed_for_pasting_are_quoted_for_the_shell_and_keep_spools_says_where() {
    // A TMPDIR whose name would run a command if pasted unquoted.
    let base = scratch_dir("quoting");
    let tmpdir = base.join("a b;touch pwned;'x");
    std::fs::create_dir_all(&tmpdir).unwrap();
    let trace = base.join("run.trace");
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .arg("--keep-spools")
        .arg("--")
        .arg(fake_cuda::program("scenarios"))
        .arg("runtime")
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stderr(&output);
    let line = text
        .lines()
        .find(|line| line.starts_with("cudatrace: kept the spools in "))
        .unwrap_or_else(|| panic!("--keep-spools does not say where: {text}"));
    let command = quoted_command(line);
    assert!(command.starts_with("cudatrace dump --dir '"), "{command}");
    // Pasted into a shell, it dumps the kept spools and runs nothing else.
    let pasted = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(&base)
        .env("PATH", format!("{}:/usr/bin:/bin", cli().parent().unwrap().display()))
        .output()
        .unwrap();
    assert!(pasted.status.success(), "{}", stderr(&pasted));
    let dumped = String::from_utf8_lossy(&pasted.stdout);
    assert!(dumped.contains("\"spool_end\""), "{dumped}");
    assert!(
        !Path::new(&base).join("pwned").exists(),
        "the pasted command ran `touch`"
    );
    let folder = line
        .strip_prefix("cudatrace: kept the spools in ")
        .and_then(|rest| rest.split(" (--keep-spools)").next())
        .unwrap();
    assert!(Path::new(folder).starts_with(&tmpdir), "{folder}");
    assert!(Path::new(folder).is_dir());
}
