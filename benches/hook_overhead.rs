//! What a hook adds to a driver call: runs the fake driver's `bench_calls`
//! (cuMemAlloc_v2 + cuMemFree_v2 pairs, and launches of a kernel launched
//! before, each call timed alone) plainly and under `libcudatrace.so` with
//! each stack setting, alternating, and reports median latencies and the
//! driver calls the pairs made.
//!
//! The last variant runs under a memory limit (`CUDATRACE_LIMIT`, 70 GiB,
//! which nothing here reaches): what `cudatrace run --limit` adds.
//!
//! The fake driver's cost model makes each of its entry points cost
//! `FAKE_CUDA_CALL_NS` (300 ns here, about what a real driver call costs):
//! a driver call the hook added would show as 300 ns more, and in the calls
//! per pair.
//!
//! `cargo bench --bench hook_overhead` — results go in docs/performance.md.

use std::process::Command;

const PAIRS: &str = "100000";
const ROUNDS: usize = 7;
const DRIVER_CALL_NS: &str = "300";

fn tracer_library() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("bench executable path");
    exe.parent().expect("deps folder").join("libcudatrace.so")
}

/// What one run measured.
#[derive(Default)]
struct Figures {
    alloc_ns: Vec<u64>,
    free_ns: Vec<u64>,
    launch_ns: Vec<u64>,
    calls_per_pair_milli: Vec<u64>,
}

/// Runs `bench_calls` once, traced with `stacks` unless it is `None`, and
/// under the memory limit `limit` if one is given.
fn measure(stacks: Option<&str>, limit: Option<&str>, spool_dir: &std::path::Path, into: &mut Figures) {
    let mut command = Command::new(fake_cuda::program("bench_calls"));
    command
        .arg(PAIRS)
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("FAKE_CUDA_CALL_NS", DRIVER_CALL_NS);
    if let Some(stacks) = stacks {
        command
            .env("LD_PRELOAD", tracer_library())
            .env("CUDATRACE_DIR", spool_dir)
            .env("CUDATRACE_STACKS", stacks);
    }
    if let Some(limit) = limit {
        command.env("CUDATRACE_LIMIT", limit);
    }
    let output = command.output().expect("run bench_calls");
    assert!(output.status.success(), "bench_calls failed");
    for spool in std::fs::read_dir(spool_dir).into_iter().flatten().flatten() {
        let _ = std::fs::remove_file(spool.path());
    }
    let text = String::from_utf8(output.stdout).unwrap();
    let value = |key: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {text}"))
    };
    into.alloc_ns.push(value("alloc_median_ns"));
    into.free_ns.push(value("free_median_ns"));
    into.launch_ns.push(value("launch_median_ns"));
    into.calls_per_pair_milli.push(value("driver_calls_per_pair_milli"));
}

fn median(values: &[u64]) -> u64 {
    let mut values = values.to_vec();
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
    let variants: [(&str, Option<&str>, Option<&str>); 5] = [
        ("untraced", None, None),
        ("stacks none", Some("none"), None),
        ("stacks native", Some("native"), None),
        ("stacks all", Some("all"), None),
        ("stacks none, --limit 70GiB", Some("none"), Some("70GiB")),
    ];
    let mut figures: Vec<Figures> = variants.iter().map(|_| Figures::default()).collect();
    for _ in 0..ROUNDS {
        for (i, (_, stacks, limit)) in variants.iter().enumerate() {
            measure(*stacks, *limit, &spool_dir, &mut figures[i]);
        }
    }
    std::fs::remove_dir_all(&spool_dir).ok();
    println!(
        "{PAIRS} alloc/free pairs per run, each driver call costing {DRIVER_CALL_NS} ns; \
         median of {ROUNDS} interleaved runs' per-call medians\n"
    );
    println!(
        "| variant | cuMemAlloc_v2 (ns) | cuMemFree_v2 (ns) | launch after the first (ns) | driver calls per pair |"
    );
    println!("| --- | --- | --- | --- | --- |");
    let base = &figures[0];
    for ((name, _, _), f) in variants.iter().zip(&figures) {
        let show = |values: &[u64], of: &[u64]| {
            let (value, untraced) = (median(values), median(of));
            if *name == "untraced" {
                format!("{value}")
            } else {
                format!("{value} ({:+})", value as i64 - untraced as i64)
            }
        };
        println!(
            "| {name} | {} | {} | {} | {:.3} |",
            show(&f.alloc_ns, &base.alloc_ns),
            show(&f.free_ns, &base.free_ns),
            show(&f.launch_ns, &base.launch_ns),
            median(&f.calls_per_pair_milli) as f64 / 1000.0
        );
    }
}
