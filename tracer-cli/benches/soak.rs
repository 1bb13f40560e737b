//! Soak test, kept as a benchmark: 8 processes x 8 threads allocating and
//! freeing for minutes under `cudatrace run`, some processes killed with
//! SIGKILL, and `cudatrace run` itself killed once half way, then the run
//! recovered with `cudatrace collect`. Every count in the recovered trace
//! must match each process's own log exactly; a killed process may show at
//! most one more event per thread (the call it was inside). Panics on any
//! mismatch; prints a table for docs/performance.md.
//!
//! `cargo bench -p cudatrace-cli --bench soak`
//! (`CUDATRACE_SOAK_SECONDS`, default 180; `CUDATRACE_SOAK_RATE`, calls a
//! second per thread, default 4000; `CUDATRACE_SOAK_MAX_SIZE`, the trace's
//! cap, default 64MiB so that the live collector folds the trace several
//! times before it is killed.)

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PROCESSES: usize = 8;
const THREADS: u64 = 8;

/// The folder of this benchmark's executable, where cargo also puts the
/// `libcudatrace.so` it built for it (a dev-dependency).
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("bench executable path");
    exe.parent().expect("deps").to_owned()
}

fn env_number(key: &str, default: f64) -> f64 {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// (pid, allocations, frees, live bytes, threads that finished) from each log.
fn read_logs(dir: &Path) -> Vec<(u32, u64, u64, u64, u64)> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let Some(pid) = name.strip_prefix("soak-").and_then(|n| n.strip_suffix(".log")) else {
            continue;
        };
        let bytes = std::fs::read(&path).unwrap();
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        let (mut allocations, mut frees, mut live, mut done) = (0, 0, 0, 0);
        for thread in 0..THREADS as usize {
            allocations += word(thread * 4);
            frees += word(thread * 4 + 1);
            live += word(thread * 4 + 2);
            done += word(thread * 4 + 3);
        }
        logs.push((pid.parse().unwrap(), allocations, frees, live, done));
    }
    logs.sort();
    logs
}

fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn kill(pid: u32) {
    // SAFETY: signalling a process of this benchmark's own tree.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds = env_number("CUDATRACE_SOAK_SECONDS", 180.0);
    let rate = env_number("CUDATRACE_SOAK_RATE", 4000.0);
    let deps = deps_dir();
    let target = deps.parent().expect("profile folder");
    let cli = target.join("cudatrace");
    let library = deps.join("libcudatrace.so");
    assert!(cli.exists() && library.exists(), "build the workspace first");
    let work = target.join(format!("soak-{}", std::process::id()));
    let (logs, spools) = (work.join("logs"), work.join("spools"));
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::create_dir_all(&spools).unwrap();
    let trace = work.join("soak.trace");

    let max_size = std::env::var("CUDATRACE_SOAK_MAX_SIZE").unwrap_or_else(|_| "64MiB".into());
    let started = Instant::now();
    let mut run = Command::new(&cli)
        .args([
            "run",
            "--preload",
            library.to_str().unwrap(),
            "-o",
            trace.to_str().unwrap(),
            "--max-size",
            &max_size,
            "--",
        ])
        .arg(fake_cuda::program("scenarios"))
        .args([
            "soak",
            &PROCESSES.to_string(),
            &THREADS.to_string(),
            &seconds.to_string(),
        ])
        .arg(&logs)
        .arg(rate.to_string())
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("FAKE_CUDA_CAPACITY", "1099511627776")
        .env("CUDATRACE_DIR", &spools)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the workers' logs", Duration::from_secs(30), || {
        read_logs(&logs).len() == PROCESSES
    });
    let workers: Vec<u32> = read_logs(&logs).iter().map(|l| l.0).collect();
    // Kills, at fractions of the run: two workers, then cudatrace itself, then a third worker.
    let plan = [
        (0.25, Some(workers[1])),
        (0.4, Some(workers[4])),
        (0.5, None),
        (0.6, Some(workers[6])),
    ];
    let mut killed = Vec::new();
    for (at, victim) in plan {
        let when = Duration::from_secs_f64(seconds * at);
        std::thread::sleep(when.saturating_sub(started.elapsed()));
        match victim {
            Some(pid) => {
                kill(pid);
                killed.push(pid);
            }
            None => {
                kill(run.id());
                run.wait().unwrap();
            }
        }
    }
    wait_until("the workload to end", Duration::from_secs_f64(seconds + 120.0), || {
        logs.join("done").exists()
    });
    let workload = started.elapsed();
    let run_dir = std::fs::read_dir(&spools).unwrap().next().unwrap().unwrap().path();
    let spool_bytes: u64 = std::fs::read_dir(&run_dir)
        .unwrap()
        .map(|e| {
            use std::os::unix::fs::MetadataExt;
            e.unwrap().metadata().unwrap().blocks() * 512
        })
        .sum();
    let collecting = Instant::now();
    let collect = Command::new(&cli).arg("collect").arg(&run_dir).output().unwrap();
    let collect_time = collecting.elapsed();
    assert!(collect.status.success(), "{}", String::from_utf8_lossy(&collect.stderr));
    let reporting = Instant::now();
    let report = Command::new(&cli)
        .args(["report", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    let report_time = reporting.elapsed();
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["complete"], true);

    let processes: HashMap<u64, &Value> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["pid"].as_u64().unwrap(), p))
        .collect();
    println!(
        "{PROCESSES} processes x {THREADS} threads, {seconds} s at up to {rate} calls/s a thread; killed {killed:?} and cudatrace run at {:.0} s\n",
        seconds * 0.5
    );
    println!("| pid | killed | log allocations | trace allocations | log frees | trace frees | lost events |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let (mut total_events, mut total_folded) = (0u64, 0u64);
    for (pid, allocations, frees, live, finished) in read_logs(&logs) {
        let p = processes
            .get(&u64::from(pid))
            .unwrap_or_else(|| panic!("pid {pid} missing from the trace"));
        let device = &p["devices"][0];
        let (got_allocations, got_frees) = (
            device["allocations"].as_u64().unwrap(),
            device["frees"].as_u64().unwrap(),
        );
        let got_live = device["live_bytes_at_exit"].as_u64().unwrap();
        let lost = p["lost_events"].as_u64().unwrap();
        let was_killed = killed.contains(&pid);
        // Events in the trace's detail, and those folded to keep it under its cap.
        let events = p["events"].as_u64().unwrap() + p["folded_events"].as_u64().unwrap();
        total_events += events;
        total_folded += p["folded_events"].as_u64().unwrap();
        println!(
            "| {pid} | {} | {allocations} | {got_allocations} | {frees} | {got_frees} | {lost} |",
            if was_killed { "yes" } else { "no" },
        );
        // A free cut short by a kill, whose address another thread then
        // reused, shows as a free the report infers at the reuse.
        let inferred_frees = p["reused_without_free"].as_u64().unwrap();
        let recorded_frees = got_frees - inferred_frees;
        assert_eq!(events, got_allocations + recorded_frees, "pid {pid}");
        if was_killed {
            // Each thread's call in flight at the kill is in the trace but not
            // yet in the log, or cut short and counted lost; nothing else.
            assert!(got_allocations >= allocations && recorded_frees >= frees, "pid {pid}");
            let extra = (got_allocations - allocations) + (recorded_frees - frees);
            assert!(extra + lost <= THREADS, "pid {pid}: {extra} extra, {lost} lost");
            assert!(inferred_frees <= lost, "pid {pid}");
            assert_eq!(lost, p["unfinished_records"].as_u64().unwrap(), "pid {pid}");
        } else {
            assert_eq!(finished, THREADS, "pid {pid} did not finish");
            assert_eq!(
                (got_allocations, got_frees, got_live, lost),
                (allocations, frees, live, 0),
                "pid {pid}"
            );
            assert_eq!(p["exit_status"], 0, "pid {pid}");
        }
    }
    let trace_bytes = std::fs::metadata(&trace).unwrap().len();
    println!(
        "\n| events | of them folded (cap {max_size}) | trace bytes | bytes/event | workload (s) | spool disk after the collector died (MiB) | collect (s) | report (s) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| {total_events} | {total_folded} | {trace_bytes} | {:.1} | {:.0} | {} | {:.1} | {:.1} |",
        trace_bytes as f64 / total_events as f64,
        workload.as_secs_f64(),
        spool_bytes >> 20,
        collect_time.as_secs_f64(),
        report_time.as_secs_f64()
    );
    println!(
        "\nevery count exact: {} lost events in all, each in a killed process's in-flight call",
        report["lost_events"]
    );
    std::fs::remove_dir_all(&work).ok();
}
