//! What a hook adds to a driver call: runs the fake driver's `bench_calls`
//! (cuMemAlloc_v2 + cuMemFree_v2 pairs, and launches of a kernel launched
//! before, each call timed alone) plainly and under `libcudatrace.so`,
//! alternating, and reports median latencies.
//!
//! `cargo bench --bench hook_overhead` — results go in docs/performance.md.

use std::process::Command;

const PAIRS: &str = "200000";
const ROUNDS: usize = 7;

fn tracer_library() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("bench executable path");
    exe.parent().expect("deps folder").join("libcudatrace.so")
}

/// (alloc, free, launch) median ns of one run.
fn measure(traced: bool, spool_dir: &std::path::Path) -> (u64, u64, u64) {
    let mut command = Command::new(fake_cuda::program("bench_calls"));
    command.arg(PAIRS).env("LD_LIBRARY_PATH", fake_cuda::library_dir());
    if traced {
        command
            .env("LD_PRELOAD", tracer_library())
            .env("CUDATRACE_DIR", spool_dir);
    }
    let output = command.output().expect("run bench_calls");
    assert!(output.status.success(), "bench_calls failed");
    let text = String::from_utf8(output.stdout).unwrap();
    let value = |key: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {text}"))
    };
    (
        value("alloc_median_ns"),
        value("free_median_ns"),
        value("launch_median_ns"),
    )
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for the list of benchmarks
    }
    let library = tracer_library();
    assert!(library.exists(), "{} missing", library.display());
    let spool_dir = std::env::temp_dir().join(format!("cudatrace-bench-{}", std::process::id()));
    std::fs::create_dir_all(&spool_dir).unwrap();
    let mut plain = (Vec::new(), Vec::new(), Vec::new());
    let mut traced = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (a, f, l) = measure(false, &spool_dir);
        plain.0.push(a);
        plain.1.push(f);
        plain.2.push(l);
        let (a, f, l) = measure(true, &spool_dir);
        traced.0.push(a);
        traced.1.push(f);
        traced.2.push(l);
    }
    std::fs::remove_dir_all(&spool_dir).ok();
    let rows = [
        ("cuMemAlloc_v2", plain.0, traced.0),
        ("cuMemFree_v2", plain.1, traced.1),
        ("cuLaunchKernel, after the first", plain.2, traced.2),
    ];
    println!("{PAIRS} alloc/free pairs per run, median of {ROUNDS} runs' per-call medians\n");
    println!("| call | untraced (ns) | traced (ns) | added (ns) |");
    println!("| --- | --- | --- | --- |");
    for (call, without, with) in rows {
        let (without, with) = (median(without), median(with));
        println!("| {call} | {without} | {with} | {} |", with as i64 - without as i64);
    }
}
