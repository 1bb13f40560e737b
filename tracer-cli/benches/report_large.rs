//! Reads a 10-million-event synthetic trace with `cudatrace report --json`,
//! pinned to one core, and reports its wall time and peak memory. The goal:
//! under 10 s and under 1 GiB.
//!
//! `cargo bench -p cudatrace-cli --bench report_large` — results go in docs/performance.md.
//! `CUDATRACE_BENCH_EVENTS` changes the event count.

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
    let path = std::env::temp_dir().join(format!("cudatrace-bench-{}.trace", std::process::id()));
    let file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create trace"));
    let started = Instant::now();
    let bytes = cudatrace_trace::synthetic::write_synthetic(file, events, 8, 42).expect("write trace");
    let generated = started.elapsed();

    let started = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_cudatrace"));
    command.arg("report").arg("--json").arg(&path).stdout(Stdio::null());
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
    let child = command.spawn().expect("run cudatrace report");
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let elapsed = started.elapsed();
    std::fs::remove_file(&path).ok();
    assert_eq!(status, 0, "report failed");
    println!("| events | trace bytes | bytes/event | generate (s) | report wall (s) | report peak RSS (MiB) |");
    println!("| --- | --- | --- | --- | --- | --- |");
    println!(
        "| {events} | {bytes} | {:.1} | {:.2} | {:.2} | {:.0} |",
        bytes as f64 / events as f64,
        generated.as_secs_f64(),
        elapsed.as_secs_f64(),
        usage.ru_maxrss as f64 / 1024.0
    );
}
