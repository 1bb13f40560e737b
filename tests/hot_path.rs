//! The hook's hot path makes no system calls: over the fake driver, the
//! system calls a traced program makes grow with its event count only by the
//! spool's chunk growth (one `fstat` that checks the spool's descriptor still
//! names the spool, one `getrlimit`, one `fallocate`, one `mmap` and one
//! `madvise` that faults the chunk's pages in, per 16384 records).
//!
//! Each count is the least of three runs: a machine under load can add a
//! rare call that has nothing to do with the events (CI once saw one more),
//! while a call per event, or per thousand events, shows in every run.

mod support;

use cudatrace_events::layout::CHUNK_RECORDS;
use std::collections::BTreeMap;
use std::process::Command;
use support::*;

/// How many runs each count is the least of.
const RUNS: usize = 3;

/// System calls of one `bench_calls <pairs>`, by name, counted by strace.
fn syscalls_once(traced: bool, pairs: u64) -> BTreeMap<String, i64> {
    let dir = scratch_dir("strace");
    let summary = dir.join("summary");
    let mut command = Command::new("strace");
    command.arg("-f").arg("-c").arg("-o").arg(&summary);
    if traced {
        command
            .arg("-E")
            .arg(format!("LD_PRELOAD={}", tracer_library().display()));
        command.arg("-E").arg(format!("CUDATRACE_DIR={}", dir.display()));
    }
    command
        .arg("-E")
        .arg(format!("LD_LIBRARY_PATH={}", fake_cuda::library_dir().display()));
    let status = command
        .arg(fake_cuda::program("bench_calls"))
        .arg(pairs.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("strace");
    assert!(status.success());
    let text = std::fs::read_to_string(&summary).unwrap();
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "% time  seconds  usecs/call  calls  [errors]  syscall"
        if fields.len() < 5 || fields[0].starts_with('%') || fields[0].starts_with('-') {
            continue;
        }
        let name = *fields.last().unwrap();
        if name == "total" {
            continue;
        }
        counts.insert(name.to_string(), fields[3].parse().unwrap());
    }
    assert!(!counts.is_empty(), "no strace summary in:\n{text}");
    counts
}

/// Each system call's least count over [`RUNS`] runs.
fn syscalls(traced: bool, pairs: u64) -> BTreeMap<String, i64> {
    let mut least: BTreeMap<String, i64> = BTreeMap::new();
    for run in 0..RUNS {
        let counts = syscalls_once(traced, pairs);
        let names: Vec<String> = least.keys().chain(counts.keys()).cloned().collect();
        for name in names {
            let count = counts.get(&name).copied().unwrap_or(0);
            let entry = least.entry(name).or_insert(count);
            *entry = if run == 0 { count } else { (*entry).min(count) };
        }
    }
    least
}

/// Each call's count in `large` less its count in `small`.
fn growth(small: &BTreeMap<String, i64>, large: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    small
        .keys()
        .chain(large.keys())
        .map(|name| {
            let count = |map: &BTreeMap<String, i64>| map.get(name).copied().unwrap_or(0);
            (name.clone(), count(large) - count(small))
        })
        .collect()
}

fn chunks(records: u64) -> u64 {
    records.div_ceil(CHUNK_RECORDS as u64)
}

#[test]
fn system_calls_grow_only_with_spool_chunks() {
    if Command::new("strace").arg("-V").output().is_err() {
        panic!("strace is required for this test (apt-get install strace)");
    }
    // Both sizes keep bench_calls' own arrays (8 bytes a pair) above glibc's
    // 128 KiB mmap threshold, so the program's heap grows by brk alike in
    // every run, whatever our own allocations did to the heap before.
    let (small, large) = (20_000, 80_000);
    let plain = growth(&syscalls(false, small), &syscalls(false, large));
    let traced = growth(&syscalls(true, small), &syscalls(true, large));
    // Two records per pair; each further chunk costs fstat + getrlimit +
    // fallocate + mmap + madvise.
    let chunk_calls = 5 * (chunks(2 * large) - chunks(2 * small)) as i64;
    assert_eq!(chunk_calls, 35);
    let extra: BTreeMap<&String, i64> = traced
        .iter()
        .map(|(name, grew)| (name, grew - plain.get(name).copied().unwrap_or(0)))
        .filter(|(_, more)| *more != 0)
        .collect();
    let total: i64 = extra.values().sum();
    assert_eq!(total, chunk_calls, "calls grown beyond the program's own: {extra:?}");
    assert!(
        extra.values().all(|more| *more == 7),
        "each chunk call once per chunk: {extra:?}"
    );
}
