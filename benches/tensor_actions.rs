//! What recording a tensor costs: the fake `libc10_cuda.so`'s `bench`
//! scenario (4 KiB allocations and frees from a cached segment, three
//! caching-allocator actions a pair, no driver call) run plainly, under
//! `libcudatrace.so` with tensors off, and with tensors on at each stack
//! setting, alternating; reports the median time per pair and, against
//! tensors off, per action.
//!
//! The goal (the tensors issue): at most 600 ns an action with stacks.
//!
//! `cargo bench --bench tensor_actions` — results go in docs/performance.md.

use std::process::Command;

const PAIRS: &str = "200000";
const ROUNDS: usize = 7;

fn tracer_library() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("bench executable path");
    exe.parent().expect("deps folder").join("libcudatrace.so")
}

/// Nanoseconds per pair of one run: plain when `setting` is `None`, else
/// traced with (tensors, stacks).
fn measure(setting: Option<(&str, &str)>, spool_dir: &std::path::Path) -> f64 {
    let mut command = Command::new(fake_cuda::program("torch_like"));
    command
        .arg(fake_cuda::torch_library("211"))
        .arg("bench")
        .env("FAKE_TORCH_BENCH_PAIRS", PAIRS)
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir());
    if let Some((tensors, stacks)) = setting {
        command
            .env("LD_PRELOAD", tracer_library())
            .env("CUDATRACE_DIR", spool_dir)
            .env("CUDATRACE_TENSORS", tensors)
            .env("CUDATRACE_STACKS", stacks);
    }
    let output = command.output().expect("run torch_like");
    assert!(output.status.success(), "torch_like failed");
    for spool in std::fs::read_dir(spool_dir).into_iter().flatten().flatten() {
        let _ = std::fs::remove_file(spool.path());
    }
    let text = String::from_utf8(output.stdout).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("bench pairs="))
        .and_then(|rest| rest.split_once("ns_per_pair="))
        .and_then(|(_, ns)| ns.trim().parse().ok())
        .unwrap_or_else(|| panic!("no bench line in {text}"))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let spool_dir = std::env::temp_dir().join(format!("cudatrace-tensor-bench-{}", std::process::id()));
    std::fs::create_dir_all(&spool_dir).unwrap();
    let settings: [(&str, Option<(&str, &str)>); 6] = [
        ("plain", None),
        ("tensors off", Some(("off", "all"))),
        ("tensors, stacks none", Some(("on", "none"))),
        ("tensors, stacks python", Some(("on", "python"))),
        ("tensors, stacks native", Some(("on", "native"))),
        ("tensors, stacks all", Some(("on", "all"))),
    ];
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); settings.len()];
    for _ in 0..ROUNDS {
        for (i, (_, setting)) in settings.iter().enumerate() {
            figures[i].push(measure(*setting, &spool_dir));
        }
    }
    let _ = std::fs::remove_dir_all(&spool_dir);
    let medians: Vec<f64> = figures.iter_mut().map(|f| median(f)).collect();
    println!("{PAIRS} pairs, median of {ROUNDS} alternating runs each");
    println!("| setting | ns per pair | ns per action over tensors off |");
    println!("| --- | --- | --- |");
    for (i, (name, _)) in settings.iter().enumerate() {
        let per_action = if i >= 2 {
            format!("{:+.0}", (medians[i] - medians[1]) / 3.0)
        } else {
            "".to_string()
        };
        println!("| {name} | {:.0} | {per_action} |", medians[i]);
    }
}
