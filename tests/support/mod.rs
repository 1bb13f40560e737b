//! Running the C test programs under the tracer and reading what it wrote.
#![allow(dead_code)]

use cudatrace_events::{Event, Spool, SpoolReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `libcudatrace.so` from the same build as the running test.
pub fn tracer_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("test executable has a folder");
    let library = deps.join("libcudatrace.so");
    assert!(
        library.exists(),
        "{} is missing: build the workspace first",
        library.display()
    );
    library
}

/// A fresh, empty folder under the target directory.
pub fn scratch_dir(label: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("test-scratch")
        .join(format!(
            "{label}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What one traced run produced.
pub struct TracedRun {
    pub output: Output,
    pub stdout: String,
    /// Every spool file written, ordered by file name (pid, then image),
    /// with only the memory events in `events`.
    pub spools: Vec<Spool>,
    /// The stack nodes and blobs of each spool, in the same order.
    pub stack_records: Vec<Vec<Event>>,
    pub spool_paths: Vec<PathBuf>,
}

/// A command for a fake-CUDA test program, with the fake libraries on the path.
pub fn program(name: &str, args: &[&str]) -> Command {
    let mut command = Command::new(fake_cuda::program(name));
    command.args(args).env("LD_LIBRARY_PATH", fake_cuda::library_dir());
    command
}

/// Runs `command` with the tracer preloaded, spooling into a fresh folder.
pub fn run_traced(label: &str, mut command: Command) -> TracedRun {
    let dir = scratch_dir(label);
    command.env("LD_PRELOAD", tracer_library()).env("CUDATRACE_DIR", &dir);
    let output = command.output().expect("run test program");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let spool_paths = spool_files(&dir);
    let mut spools: Vec<Spool> = spool_paths
        .iter()
        .map(|path| SpoolReader::read_path(path).unwrap_or_else(|e| panic!("{}: {e:?}", path.display())))
        .collect();
    let stack_records = spools
        .iter_mut()
        .map(|spool| {
            let (memory, stacks) = std::mem::take(&mut spool.events)
                .into_iter()
                .partition(|event| event.op.is_memory_event());
            spool.events = memory;
            stacks
        })
        .collect();
    TracedRun {
        output,
        stdout,
        spools,
        stack_records,
        spool_paths,
    }
}

/// Spool files in `dir`, sorted by (pid, image).
pub fn spool_files(dir: &Path) -> Vec<PathBuf> {
    cudatrace_events::naming::spool_files_in(dir).unwrap()
}

/// An event in the line format the C programs print for what they expect.
pub fn describe(event: &Event) -> String {
    format!(
        "E {} {} {} 0x{:x} {} {} 0x{:x}",
        event.op,
        event.api,
        event.kind,
        event.address,
        event.size,
        event.device.map_or(-1, i32::from),
        event.stream
    )
}

/// The `E ...` lines a program printed.
pub fn expected_events(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|line| line.starts_with("E "))
        .map(str::to_owned)
        .collect()
}

/// The spool's events in the same format.
pub fn recorded_events(spool: &Spool) -> Vec<String> {
    spool.events.iter().map(describe).collect()
}

/// The first word-separated field after `key` on the line starting with `key`.
pub fn field<'a>(stdout: &'a str, key: &str, index: usize) -> &'a str {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(key).filter(|rest| rest.starts_with(' ')))
        .unwrap_or_else(|| panic!("no line '{key} ...' in output:\n{stdout}"))
        .split_whitespace()
        .nth(index)
        .unwrap()
}

/// Parses `0x...` as printed by `%p`.
pub fn hex(text: &str) -> u64 {
    u64::from_str_radix(text.trim_start_matches("0x"), 16).unwrap()
}
