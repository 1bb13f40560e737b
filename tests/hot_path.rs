//! The hook's hot path makes no system calls: over the fake driver, the
//! system calls a traced program makes grow with its event count only by the
//! spool's chunk growth (one `fstat` that checks the spool's descriptor still
//! names the spool, one `getrlimit`, one `fallocate`, one `mmap` and one
//! `madvise` that faults the chunk's pages in, per 16384 records).

mod support;

use cudatrace_events::layout::CHUNK_RECORDS;
use std::process::Command;
use support::*;

/// Total system calls of `bench_calls <pairs>`, counted by strace.
fn syscalls(traced: bool, pairs: u64) -> u64 {
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
        .status()
        .expect("strace");
    assert!(status.success());
    let text = std::fs::read_to_string(&summary).unwrap();
    let total = text
        .lines()
        .find(|line| line.trim_end().ends_with("total"))
        .expect("strace summary");
    total.split_whitespace().nth(3).unwrap().parse().unwrap()
}

fn chunks(records: u64) -> u64 {
    records.div_ceil(CHUNK_RECORDS as u64)
}

#[test]
fn system_calls_grow_only_with_spool_chunks() {
    if Command::new("strace").arg("-V").output().is_err() {
        panic!("strace is required for this test (apt-get install strace)");
    }
    let (small, large) = (10_000, 40_000);
    let plain_growth = syscalls(false, large) - syscalls(false, small);
    let traced_growth = syscalls(true, large) - syscalls(true, small);
    // Two records per pair; each further chunk costs fstat + getrlimit +
    // fallocate + mmap + madvise.
    let chunk_calls = 5 * (chunks(2 * large) - chunks(2 * small));
    assert_eq!(chunk_calls, 15);
    assert_eq!(traced_growth, plain_growth + chunk_calls);
}
