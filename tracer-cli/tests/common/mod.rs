//! Helpers for the CLI's end-to-end tests: running `cudatrace` over the
//! fake driver and reading its reports.
#![allow(dead_code)]

pub mod perfetto;
pub mod retimed;
#[path = "../../../tests/support/mod.rs"]
mod support;
pub mod viewer;

pub use support::*;

use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The `cudatrace` binary of this build (`cargo test --workspace` builds it).
pub fn cli() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let cli = exe.parent().unwrap().parent().unwrap().join("cudatrace");
    assert!(
        cli.exists(),
        "{} is missing: run `cargo test --workspace`",
        cli.display()
    );
    cli
}

pub fn cudatrace(args: &[&str]) -> Command {
    let mut command = Command::new(cli());
    command.args(args).env("LD_LIBRARY_PATH", fake_cuda::library_dir());
    command
}

/// `cudatrace run` of a scenario; returns (output, trace path).
pub fn run_scenario(label: &str, scenario: &str, extra_env: &[(&str, &str)]) -> (Output, PathBuf) {
    let (output, trace, _) = run_scenario_with_pid(label, scenario, extra_env);
    (output, trace)
}

/// `cudatrace run` preloading this build's library; options and CMD follow.
pub fn cudatrace_run() -> Command {
    let mut command = cudatrace(&["run", "--preload"]);
    command.arg(tracer_library());
    command
}

/// `cudatrace run -o <fresh folder>/run.trace OPTIONS -- PROGRAM`, spooling
/// in that folder; the program's arguments follow.
pub fn run_program(label: &str, program: &Path, options: &[&str]) -> (Command, PathBuf) {
    run_argv(label, options, &[program.as_os_str()])
}

/// `cudatrace run -o <fresh folder>/run.trace OPTIONS -- ARGV…`, spooling
/// in that folder.
pub fn run_argv(label: &str, options: &[&str], argv: &[&std::ffi::OsStr]) -> (Command, PathBuf) {
    let dir = scratch_dir(label);
    let trace = dir.join("run.trace");
    let mut command = cudatrace_run();
    command
        .arg("-o")
        .arg(&trace)
        .args(options)
        .arg("--")
        .args(argv)
        .env("TMPDIR", &dir);
    (command, trace)
}

/// `cudatrace run` of a scenario, which must succeed; returns the trace's
/// path and what the scenario printed.
pub fn traced_scenario(label: &str, scenario: &str, extra_env: &[(&str, &str)]) -> (PathBuf, String) {
    let (output, trace) = run_scenario(label, scenario, extra_env);
    assert!(output.status.success(), "{}", stderr(&output));
    (trace, stdout(&output))
}

/// [`traced_scenario`], and the trace's report with stacks.
pub fn traced_with_report(label: &str, scenario: &str, extra_env: &[(&str, &str)]) -> (PathBuf, Value) {
    let (trace, _) = traced_scenario(label, scenario, extra_env);
    let (report, _) = report_json_with_stacks(&trace);
    (trace, report)
}

/// `cudatrace run -o <fresh folder>/run.trace -- scenarios SCENARIO`, spooling in that folder.
pub fn run_command(label: &str, scenario: &str, options: &[&str]) -> (Command, PathBuf) {
    let (mut command, trace) = run_program(label, &fake_cuda::program("scenarios"), options);
    command.arg(scenario);
    (command, trace)
}

/// The Chromium of this machine (the README's test command installs it).
pub fn chromium() -> &'static str {
    ["chromium", "chromium-browser"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("chromium is needed for this test (the README's test command installs it)")
}

/// Like [`run_scenario`], also returning the pid of `cudatrace` itself.
pub fn run_scenario_with_pid(label: &str, scenario: &str, extra_env: &[(&str, &str)]) -> (Output, PathBuf, u32) {
    let (mut command, trace) = run_command(label, scenario, &[]);
    for (key, value) in extra_env {
        command.env(key, value);
    }
    let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    (child.wait_with_output().unwrap(), trace, pid)
}

pub fn report_json(trace: &Path) -> (Value, Output) {
    let (mut json, output) = report_json_with_stacks(trace);
    for process in json["processes"].as_array_mut().into_iter().flatten() {
        // Where the driver's memory went has tests of its own (explain.rs).
        process.as_object_mut().unwrap().remove("footprint");
        for device in process["devices"].as_array_mut().into_iter().flatten() {
            let device = device.as_object_mut().unwrap();
            device.remove("live_at_exit_by_call_site");
            device.remove("peak_by_call_site");
            for key in ["live_at_exit", "ooms"] {
                for entry in device[key].as_array_mut().into_iter().flatten() {
                    entry.as_object_mut().unwrap().remove("stack");
                }
            }
        }
    }
    (json, output)
}

/// `cudatrace report --json` of `trace`, call stacks and all.
pub fn report_json_with_stacks(trace: &Path) -> (Value, Output) {
    let output = cudatrace(&["report", "--json", trace.to_str().unwrap()])
        .output()
        .unwrap();
    let json = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "report output is not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (json, output)
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn process(report: &Value, pid: u32) -> &Value {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("no process {pid} in {report}"))
}

/// Every "LABEL pid address size" line the scenario printed.
pub fn blocks(text: &str, label: &str) -> Vec<(u32, u64, u64)> {
    text.lines()
        .filter_map(|line| line.strip_prefix(label).filter(|rest| rest.starts_with(' ')))
        .map(|rest| {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            (fields[0].parse().unwrap(), hex(fields[1]), fields[2].parse().unwrap())
        })
        .collect()
}

pub fn live(address: u64, size: u64, api: &str, kind: &str) -> Value {
    json!({"address": address, "size": size, "api": api, "kind": kind})
}

/// Reads `child`'s stdout until a line starting with `word`.
pub fn wait_for_line(child: &mut Child, word: &str) -> std::io::BufReader<std::process::ChildStdout> {
    let mut reader = std::io::BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut line = String::new();
    while !line.starts_with(word) {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "no line '{word}' before the end"
        );
    }
    reader
}

/// This process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The spool files of the one run folder under `tmpdir`.
pub fn run_spools(tmpdir: &Path) -> Vec<PathBuf> {
    let user_folder = tmpdir.join(cudatrace_events::naming::user_folder_name(effective_uid()));
    let run_folder = std::fs::read_dir(&user_folder).unwrap().next().unwrap().unwrap().path();
    spool_files(&run_folder)
}

/// Lines of a report, by key, for the fields the tests compare exactly.
pub fn counts(report: &Value) -> Value {
    let p = &report["processes"][0];
    let d = &p["devices"][0];
    json!({
        "complete": report["complete"],
        "lost_events": report["lost_events"],
        "events": p["events"],
        "allocations": d["allocations"],
        "frees": d["frees"],
        "live_bytes_at_exit": d["live_bytes_at_exit"],
        "exit_status": p["exit_status"],
    })
}

/// A fresh folder holding `small` (where a small disk is mounted, see
/// [`on_small_disk`]) and `spools`, and the path of a trace recovered
/// beside them: (small, spools, recovered).
pub fn small_disk_folders(label: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch_dir(label);
    let (small, spools) = (dir.join("small"), dir.join("spools"));
    std::fs::create_dir(&small).unwrap();
    std::fs::create_dir(&spools).unwrap();
    (small, spools, dir.join("recovered.trace"))
}

/// `command` in a mount namespace of its own, where a tmpfs of `size` is
/// mounted on `dir`: a small disk that fills up, and vanishes afterwards.
pub fn on_small_disk(dir: &Path, size: &str, command: &Command) -> Command {
    wrapped(
        &[
            "unshare",
            "-rm",
            "sh",
            "-c",
            r#"mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@""#,
            "sh",
            size,
            dir.to_str().unwrap(),
        ],
        command,
    )
}

/// `command` run by a wrapper (`prefix` then the command's program and
/// arguments), with the command's environment.
pub fn wrapped(prefix: &[&str], command: &Command) -> Command {
    let mut wrapped = Command::new(prefix[0]);
    wrapped
        .args(&prefix[1..])
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    wrapped
}

/// Waits up to 30 s for a finished trace at `path` (a detached collector
/// writes it in the background); its report.
pub fn finished_trace(path: &Path) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if path.exists() {
            let (report, _) = report_json(path);
            if report["complete"] == true {
                return report;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no finished trace at {}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A scenario run as a plain `LD_PRELOAD` tree (no `cudatrace run`): its
/// root starts a collector that writes `trace`, with spools under `tmpdir`.
pub fn plain_preload_scenario(scenario: &str, trace: &Path, tmpdir: &Path) -> Output {
    Command::new(fake_cuda::program("scenarios"))
        .arg(scenario)
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("LD_PRELOAD", tracer_library())
        .env_remove("CUDATRACE_DIR")
        .env("CUDATRACE_OUT", trace)
        .env("CUDATRACE_CLI", cli())
        .env("TMPDIR", tmpdir)
        .output()
        .unwrap()
}

/// Bytes as the CLI prints them (`wording::bytes`: `512 B`, `2.0 MiB`),
/// written again here so that a test checks the CLI's figures against an
/// oracle of its own.
pub fn human_bytes(value: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut scaled, mut unit) = (value as f64, 0);
    while scaled >= 1024.0 && unit < units.len() - 1 {
        scaled /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value} B")
    } else {
        format!("{scaled:.1} {}", units[unit])
    }
}

/// The HTML page of `trace`, written beside it (`TRACE.html`) by
/// `cudatrace html`, which must succeed.
pub fn html_page(trace: &Path) -> String {
    let page = trace.with_extension("html");
    let output = cudatrace(&["html", trace.to_str().unwrap(), "-o", page.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    std::fs::read_to_string(&page).unwrap()
}

/// The process of a report that recorded PyTorch's tensors.
pub fn main_process(report: &Value) -> Value {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["tensors"]["actions"].as_u64() > Some(0))
        .expect("the process with tensors")
        .clone()
}

/// Waits up to 30 s for a spool's header to satisfy `done`.
pub fn wait_for_header(spool: &Path, done: impl Fn(&cudatrace_events::SpoolHeaderInfo) -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if let Ok(file) = cudatrace_events::SpoolFile::open(spool, false) {
            if done(&file.header()) {
                return true;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// A `cudatrace run` of a program that prints `ready` and then waits for
/// stdin, started with its spools in `spools`: the run, the program's
/// output after `ready`, the run's spool folder and the program's spool.
pub struct RunWithSpools {
    pub run: Child,
    pub program_out: std::io::BufReader<std::process::ChildStdout>,
    pub run_dir: PathBuf,
    pub spool: PathBuf,
}

/// Starts `command` as [`RunWithSpools`] says.
pub fn start_with_spools_in(command: &mut Command, spools: &Path) -> RunWithSpools {
    std::fs::create_dir(spools).unwrap();
    let mut run = command
        .env("CUDATRACE_DIR", spools)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let program_out = wait_for_line(&mut run, "ready");
    let run_dir = std::fs::read_dir(spools).unwrap().next().unwrap().unwrap().path();
    let spool = spool_files(&run_dir).pop().unwrap();
    RunWithSpools {
        run,
        program_out,
        run_dir,
        spool,
    }
}

impl RunWithSpools {
    /// Kills `cudatrace run` (the collector) with SIGKILL; the program runs
    /// on to its end (its stdin closed), which its spool then records.
    pub fn kill_collector_and_let_the_program_end(mut self) {
        // SAFETY: killing our own child.
        unsafe { libc::kill(self.run.id() as i32, libc::SIGKILL) };
        self.run.wait().unwrap();
        drop(self.run.stdin.take());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.program_out, &mut rest).unwrap();
        assert!(wait_for_header(&self.spool, |h| h.process.exit.is_some()));
    }
}
