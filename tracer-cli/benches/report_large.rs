//! Reads a 10-million-event synthetic trace with `cudatrace report --json`,
//! and converts it with `snapshot`, `perfetto` (its protobuf, compressed and
//! not, and its JSON), `html` and `export`, each pinned to one core, and
//! reports wall time, peak memory, output size and output bytes per event.
//! The goals: report under 10 s, each conversion under 20 s, all under
//! 1 GiB; the protobuf Perfetto trace under 600 MB, at most a fifth of the
//! JSON's bytes.
//!
//! `cargo bench -p cudatrace-cli --bench report_large` — results go in docs/performance.md.
//! `CUDATRACE_BENCH_TRACE=PATH` writes the trace there and keeps it (for
//! `benches/compare_commands.sh`); `CUDATRACE_BENCH_ONLY=none` then only
//! writes it. `CUDATRACE_BENCH_EVENTS` changes the event count,
//! `CUDATRACE_BENCH_PROCESSES` the processes (8; a typical job is 1); `CUDATRACE_BENCH_ONLY`
//! (such as `export,html`) runs only the commands it names.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let events: u64 = std::env::var("CUDATRACE_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let processes: u32 = std::env::var("CUDATRACE_BENCH_PROCESSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let kept = std::env::var_os("CUDATRACE_BENCH_TRACE").map(std::path::PathBuf::from);
    let path = kept
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("cudatrace-bench-{}.trace", std::process::id())));
    let file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create trace"));
    let started = Instant::now();
    let bytes = cudatrace_trace::synthetic::write_synthetic(file, events, processes, 42).expect("write trace");
    let generated = started.elapsed();

    let out_dir = std::env::temp_dir().join(format!("cudatrace-bench-out-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).expect("output folder");
    let perfetto = |name: &str, extra: &[&str]| {
        let mut args: Vec<std::ffi::OsString> = vec![
            "perfetto".into(),
            path.clone().into(),
            "-o".into(),
            out_dir.join(name).into(),
        ];
        args.extend(extra.iter().map(Into::into));
        args
    };
    let jobs: [(&str, Vec<std::ffi::OsString>); 7] = [
        (
            "report --json",
            vec!["report".into(), "--json".into(), path.clone().into()],
        ),
        (
            "snapshot",
            vec![
                "snapshot".into(),
                path.clone().into(),
                "-o".into(),
                out_dir.join("bench").into(),
            ],
        ),
        ("perfetto (protobuf)", perfetto("bench.pftrace", &[])),
        (
            "perfetto --uncompressed",
            perfetto("bench-uncompressed.pftrace", &["--uncompressed"]),
        ),
        ("perfetto --format json", perfetto("bench.json", &["--format", "json"])),
        (
            "html",
            vec![
                "html".into(),
                path.clone().into(),
                "-o".into(),
                out_dir.join("bench.html").into(),
            ],
        ),
        (
            "export",
            vec![
                "export".into(),
                path.clone().into(),
                "-o".into(),
                out_dir.clone().into(),
            ],
        ),
    ];
    let only = std::env::var("CUDATRACE_BENCH_ONLY").ok();
    let wanted = |name: &str| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|w| name.starts_with(w.trim())))
    };
    println!(
        "{events} events, trace {bytes} bytes ({:.1} bytes/event), generated in {:.2} s",
        bytes as f64 / events as f64,
        generated.as_secs_f64()
    );
    println!();
    println!("| command | wall (s) | peak RSS (MiB) | output (MiB) | output (bytes) | bytes/event |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (name, args) in jobs.into_iter().filter(|(name, _)| wanted(name)) {
        let (seconds, rss) = timed(&args);
        let output: u64 = std::fs::read_dir(&out_dir)
            .expect("output folder")
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum();
        println!(
            "| {name} | {seconds:.2} | {rss:.0} | {:.0} | {output} | {:.1} |",
            output as f64 / (1 << 20) as f64,
            output as f64 / events as f64
        );
        for entry in std::fs::read_dir(&out_dir).expect("output folder").flatten() {
            std::fs::remove_file(entry.path()).ok();
        }
    }
    std::fs::remove_dir(&out_dir).ok();
    if kept.is_none() {
        std::fs::remove_file(&path).ok();
    }
}

/// Runs `cudatrace ARGS` on one core; its wall time (s) and peak RSS (MiB).
fn timed(args: &[std::ffi::OsString]) -> (f64, f64) {
    let started = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_cudatrace"));
    command.args(args).stdout(Stdio::null());
    // SAFETY: sched_setaffinity on the child before exec; one core, as the goal says.
    unsafe {
        command.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Ok(())
        });
    }
    // Reaped with wait4 below, which also gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let child = command.spawn().expect("run cudatrace");
    let mut status = 0;
    // SAFETY: rusage is plain data, for which all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let elapsed = started.elapsed();
    assert_eq!(status, 0, "{args:?} failed");
    (elapsed.as_secs_f64(), usage.ru_maxrss as f64 / 1024.0)
}
