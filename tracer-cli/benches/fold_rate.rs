//! What folding costs the collector: the same run of `scenarios pairs N`
//! (N allocations of 8 KiB, each freed before the next) over the fake
//! driver, under `cudatrace run --max-size unlimited` and under a cap, then
//! twice as long, each way. Prints, for docs/performance.md, each run's
//! CPU time (cudatrace and the program together, from `wait4`), the
//! collector's peak anonymous memory, the trace's size, and the rate of folding: events folded per
//! second of CPU the cap added. Checks that the capped trace is within its
//! cap and that its counts equal the unlimited run's; panics otherwise.
//!
//! `cargo bench -p cudatrace-cli --bench fold_rate`
//! (`CUDATRACE_FOLD_PAIRS`, default 10,000,000; `CUDATRACE_FOLD_CAP`,
//! default 64MiB.)

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The folder of this benchmark's executable, where cargo also puts the
/// `libcudatrace.so` it built for it (a dev-dependency).
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("bench executable path");
    exe.parent().expect("deps").to_owned()
}

struct Measured {
    cpu_s: f64,
    /// CPU time of the collector's writer thread, which writes and folds.
    writer_cpu_s: f64,
    wall_s: f64,
    max_rss_mib: f64,
    collector_anonymous_mib: f64,
    trace_bytes: u64,
    report: Value,
}

/// Runs `cudatrace run --max-size CAP -- scenarios pairs N` and reads its report.
fn measure(cli: &Path, library: &Path, work: &Path, pairs: u64, cap: &str) -> Measured {
    let trace = work.join(format!("pairs-{pairs}-{cap}.trace"));
    let _ = std::fs::remove_file(&trace);
    let started = std::time::Instant::now();
    #[expect(
        clippy::zombie_processes,
        reason = "reaped by wait4 below, which also gives its rusage"
    )]
    let child = Command::new(cli)
        .args(["run", "--preload", library.to_str().unwrap(), "--max-size", cap, "-o"])
        .arg(&trace)
        .arg("--")
        .arg(fake_cuda::program("scenarios"))
        .args(["pairs", &pairs.to_string()])
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("TMPDIR", work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid, and wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // The collector's own memory: `cudatrace run`'s anonymous pages, read
    // every 20 ms (its RSS would count the spools' mapped pages too, and
    // wait4's the traced program's).
    let mut anonymous_kib = 0u64;
    let mut writer_ticks = 0u64;
    loop {
        // SAFETY: waiting for our own child, without blocking.
        let waited = unsafe { libc::wait4(child.id() as i32, &mut status, libc::WNOHANG, &mut usage) };
        if waited == child.id() as i32 {
            break;
        }
        assert_eq!(waited, 0, "wait4");
        let status_text = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
        let anonymous = status_text
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap_or(0);
        anonymous_kib = anonymous_kib.max(anonymous);
        writer_ticks = writer_ticks.max(writer_thread_ticks(child.id()));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status}"
    );
    let wall_s = started.elapsed().as_secs_f64();
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let output = Command::new(cli)
        .args(["report", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let measured = Measured {
        cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        // SAFETY: sysconf has no preconditions.
        writer_cpu_s: writer_ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64,
        wall_s,
        max_rss_mib: usage.ru_maxrss as f64 / 1024.0,
        collector_anonymous_mib: anonymous_kib as f64 / 1024.0,
        trace_bytes: std::fs::metadata(&trace).unwrap().len(),
        report: serde_json::from_slice(&output.stdout).unwrap(),
    };
    std::fs::remove_file(&trace).unwrap();
    measured
}

/// The user and system clock ticks of `cudatrace run`'s writer thread so
/// far (0 before it starts).
fn writer_thread_ticks(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != "cudatrace-write" {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The fields after the command's closing parenthesis: utime and
        // stime are the 12th and 13th.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        return tick(11) + tick(12);
    }
    0
}

/// The counts folding must leave whole.
fn counts(report: &Value) -> Value {
    let p = &report["processes"][0];
    let d = &p["devices"][0];
    serde_json::json!([
        report["lost_events"],
        report["complete"],
        d["allocations"],
        d["frees"],
        d["peak_bytes"],
        d["live_bytes_at_exit"]
    ])
}

fn parse_cap(text: &str) -> u64 {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let number: u64 = number.parse().expect("CUDATRACE_FOLD_CAP: a number of MiB or GiB");
    match unit {
        "MiB" => number << 20,
        "GiB" => number << 30,
        _ => panic!("CUDATRACE_FOLD_CAP: give MiB or GiB"),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let pairs: u64 = std::env::var("CUDATRACE_FOLD_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let cap = std::env::var("CUDATRACE_FOLD_CAP").unwrap_or_else(|_| "64MiB".into());
    let deps = deps_dir();
    let target = deps.parent().expect("profile folder");
    let (cli, library) = (target.join("cudatrace"), deps.join("libcudatrace.so"));
    assert!(cli.exists() && library.exists(), "build the workspace first");
    let work = target.join(format!("fold-rate-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();

    let whole = measure(&cli, &library, &work, pairs, "unlimited");
    let capped = measure(&cli, &library, &work, pairs, &cap);
    let whole_longer = measure(&cli, &library, &work, 2 * pairs, "unlimited");
    let longer = measure(&cli, &library, &work, 2 * pairs, &cap);
    assert_eq!(counts(&capped.report), counts(&whole.report), "the capped run's counts");
    assert_eq!(
        counts(&longer.report),
        counts(&whole_longer.report),
        "the longer capped run's counts"
    );
    for run in [&capped, &longer] {
        assert!(
            run.trace_bytes <= parse_cap(&cap),
            "{} bytes over the cap",
            run.trace_bytes
        );
    }
    println!("`scenarios pairs {pairs}` ({} events), cap {cap}\n", 2 * pairs);
    println!(
        "| run | CPU (s) | writer thread's CPU (s) | wall (s) | collector's peak anonymous memory (MiB) | largest RSS in the tree (MiB) | trace bytes | events folded |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, run) in [
        ("unlimited", &whole),
        ("capped", &capped),
        ("unlimited, twice as long", &whole_longer),
        ("capped, twice as long", &longer),
    ] {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {} | {} |",
            run.cpu_s,
            run.writer_cpu_s,
            run.wall_s,
            run.collector_anonymous_mib,
            run.max_rss_mib,
            run.trace_bytes,
            run.report["processes"][0]["folded_events"]
        );
    }
    println!();
    for (name, capped, whole) in [("", &capped, &whole), (", twice as long", &longer, &whole_longer)] {
        let folded = capped.report["processes"][0]["folded_events"].as_u64().unwrap();
        let added = capped.cpu_s - whole.cpu_s;
        let writer = capped.writer_cpu_s - whole.writer_cpu_s;
        println!(
            "folding{name} added {added:.2} s of CPU for {folded} events folded: {:.1} million events a second; \
             in the writer thread, which folds, {writer:.2} s: {:.1} million a second",
            folded as f64 / added.max(1e-9) / 1e6,
            folded as f64 / writer.max(1e-9) / 1e6
        );
    }
    std::fs::remove_dir_all(&work).ok();
}
