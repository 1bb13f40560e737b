//! Many ranks and many nodes: each process's host and rank, the report's
//! table of every rank, and `cudatrace merge` of two "hosts" made on one
//! machine with the test overrides of the host name and the clock.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Every JSON line `cudatrace dump` prints of a trace.
fn dump(trace: &Path) -> Vec<Value> {
    let output = cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The `process` records of a dump.
fn processes(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter_map(|l| l.get("process"))
        .filter(|p| p.is_object())
        .collect()
}

/// The `header` record of a dump.
fn header(lines: &[Value]) -> &Value {
    lines.iter().find_map(|l| l.get("header")).unwrap()
}

fn wall_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// One "host"'s run of fake PyTorch's eight training steps: (trace, wall
/// clock before, wall clock after).
fn host_run(label: &str, env: &[(&str, &str)]) -> (PathBuf, u64, u64) {
    let (mut command, trace) = run_program(label, &fake_cuda::program("torch_like"), &[]);
    command
        .arg(fake_cuda::torch_library("211"))
        .arg("training")
        .env_remove("RANK")
        .env_remove("LOCAL_RANK")
        .env_remove("WORLD_SIZE")
        .envs(env.iter().copied());
    let before = wall_now();
    let out = command.output().unwrap();
    let after = wall_now();
    assert!(out.status.success(), "{}", stderr(&out));
    (trace, before, after)
}

/// A monotonic time of a trace on the wall clock, by the trace's header.
fn wall_of(header: &Value, time_ns: u64) -> u64 {
    let realtime = header["start_realtime_ns"].as_u64().unwrap();
    let monotonic = header["start_monotonic_ns"].as_u64().unwrap();
    (i128::from(realtime) + i128::from(time_ns) - i128::from(monotonic)) as u64
}

/// Host B's clock reads this much more than host A's: a host booted
/// 1,000 s earlier.
const CLOCK_OFFSET_NS: u64 = 1_000_000_000_000;

/// Two runs, as on two nodes: rank 0 on "nodeA", then rank 1 on "nodeB"
/// (whose clock is [`CLOCK_OFFSET_NS`] ahead), which leaks a MiB a step.
fn two_hosts(label: &str) -> [(PathBuf, u64, u64); 2] {
    let a = host_run(
        &format!("{label}-a"),
        &[
            ("CUDATRACE_TEST_HOST", "nodeA"),
            ("RANK", "0"),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "2"),
        ],
    );
    let offset = CLOCK_OFFSET_NS.to_string();
    let b = host_run(
        &format!("{label}-b"),
        &[
            ("CUDATRACE_TEST_HOST", "nodeB"),
            ("CUDATRACE_TEST_CLOCK_OFFSET_NS", offset.as_str()),
            ("RANK", "1"),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("FAKE_TORCH_LEAK", "1"),
        ],
    );
    [a, b]
}

fn merge(inputs: &[&Path], output: &Path) -> std::process::Output {
    let mut command = cudatrace(&["merge", "-o", output.to_str().unwrap()]);
    command.args(inputs);
    command.output().unwrap()
}

#[test]
fn each_process_records_its_host_and_the_ranks_its_environment_set() {
    let (trace, _, _) = host_run(
        "ranks-env",
        &[
            ("CUDATRACE_TEST_HOST", "node7"),
            ("RANK", "3"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "4"),
        ],
    );
    let lines = dump(&trace);
    let process = processes(&lines)[0];
    assert_eq!(
        (
            &process["host"],
            &process["rank"],
            &process["local_rank"],
            &process["world_size"]
        ),
        (&Value::from("node7"), &Value::from(3), &Value::from(1), &Value::from(4))
    );
    assert_eq!(header(&lines)["host"], "node7");

    // Unset or not a number: no rank, never a guess.
    let (trace, _, _) = host_run("ranks-none", &[("RANK", "first"), ("WORLD_SIZE", "-2")]);
    let lines = dump(&trace);
    let process = processes(&lines)[0];
    assert!(process["rank"].is_null() && process["local_rank"].is_null() && process["world_size"].is_null());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(process["host"], host.trim());
}

#[test]
fn a_rank_the_program_sets_itself_is_recorded_at_its_exit() {
    let (mut command, trace) = run_command("ranks-late", "rank-set-late", &[]);
    let out = command
        .arg("5")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // Its end has them (its start may or may not, as the collector read
    // its header before or after), and the report takes them.
    let lines = dump(&trace);
    let end = lines.iter().find_map(|l| l.get("process_end")).unwrap();
    assert_eq!(end["ranks_at_end"], serde_json::json!([5, null, 8]));
    let (report, _) = report_json(&trace);
    let process = &report["processes"][0];
    assert_eq!(
        (&process["rank"], &process["local_rank"], &process["world_size"]),
        (&Value::from(5), &Value::Null, &Value::from(8))
    );
}

#[test]
fn merge_lines_two_hosts_up_by_their_wall_clocks() {
    let [(a, a_before, a_after), (b, b_before, b_after)] = two_hosts("merge-clocks");
    let merged = a.with_file_name("job.trace");
    let out = merge(&[&a, &b], &merged);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), merged.to_str().unwrap());

    let (lines_a, lines_b, lines_m) = (dump(&a), dump(&b), dump(&merged));
    let (header_a, header_b, header_m) = (header(&lines_a), header(&lines_b), header(&lines_m));
    assert_eq!(header_m["host"], "nodeA, nodeB");
    assert_eq!(
        header_m["start_monotonic_ns"], header_a["start_monotonic_ns"],
        "A started first"
    );

    // B's monotonic clock reads 1,000 s ahead of A's: unmerged, its events
    // stand 1,000 s away from A's on the same machine.
    let shift = |h: &Value| {
        i128::from(h["start_realtime_ns"].as_u64().unwrap()) - i128::from(h["start_monotonic_ns"].as_u64().unwrap())
    };
    let shift_b = shift(header_b) - shift(header_a);
    assert!(
        (-(CLOCK_OFFSET_NS as i128) - 1_000_000_000..-(CLOCK_OFFSET_NS as i128) + 1_000_000_000).contains(&shift_b),
        "{shift_b}"
    );
    assert!(
        stderr(&out).contains(&format!("{}: 1 process image, its times moved 16 min", b.display())),
        "{}",
        stderr(&out)
    );

    // Every event moved by exactly the shift; the processes are 0 and 1,
    // with their hosts and ranks.
    let events = |lines: &[Value], process: u64| -> Vec<u64> {
        lines
            .iter()
            .filter(|l| l.get("op").is_some() && l["process"] == process)
            .map(|l| l["time_ns"].as_u64().unwrap())
            .collect()
    };
    let (a_times, b_times) = (events(&lines_a, 0), events(&lines_b, 0));
    assert!(!a_times.is_empty() && !b_times.is_empty());
    assert_eq!(events(&lines_m, 0), a_times);
    let moved: Vec<u64> = b_times.iter().map(|&t| (i128::from(t) + shift_b) as u64).collect();
    assert_eq!(events(&lines_m, 1), moved);
    let merged_processes = processes(&lines_m);
    assert_eq!(merged_processes.len(), 2);
    for (process, (host, rank)) in merged_processes.iter().zip([("nodeA", 0), ("nodeB", 1)]) {
        assert_eq!(
            (&process["host"], &process["rank"]),
            (&Value::from(host), &Value::from(rank))
        );
    }

    // On the merged clock each host's events lie within the wall-clock span
    // its run took: lined up as they happened.
    for (times, before, after) in [(&a_times, a_before, a_after), (&moved, b_before, b_after)] {
        for &time in times.iter() {
            let wall = wall_of(header_m, time);
            assert!(before <= wall && wall <= after, "{before} <= {wall} <= {after}");
        }
    }
    // The merged trace is whole, and every command reads it.
    let (report, _) = report_json(&merged);
    assert_eq!(report["complete"], true);
    assert_eq!(report["lost_events"], 0);
    for command in ["perfetto", "html"] {
        let out = cudatrace(&[command, merged.to_str().unwrap(), "--force"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{command}: {}", stderr(&out));
    }
}

/// The line of torch_like.cpp where `forward_pass` allocates its output
/// (the allocation host B leaks).
fn forward_output_line() -> usize {
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fake-cuda/c/torch_like.cpp"
    ))
    .unwrap();
    source
        .lines()
        .position(|l| l.contains("void *output = api.malloc(kOutputBytes"))
        .unwrap()
        + 1
}

#[test]
fn the_report_opens_with_every_rank_and_names_the_one_that_stands_out() {
    let [(a, ..), (b, ..)] = two_hosts("rank-table");
    let merged = a.with_file_name("job.trace");
    assert!(merge(&[&a, &b], &merged).status.success());
    let (report, _) = report_json(&merged);
    let ranks = &report["ranks"];
    let rows = ranks["rows"].as_array().unwrap();
    let row = |i: usize, key: &str| rows[i][key].clone();
    assert_eq!(rows.len(), 2);
    for (i, (host, rank, peak, allocated)) in [("nodeA", 0, 26u64 << 20, 11u64 << 20), ("nodeB", 1, 32 << 20, 17 << 20)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(row(i, "host"), host);
        assert_eq!(row(i, "rank"), rank);
        assert_eq!(row(i, "world_size"), 2);
        assert_eq!(row(i, "device"), 0);
        assert_eq!(row(i, "peak_bytes"), peak);
        assert_eq!(row(i, "peak_is_footprint"), true);
        assert_eq!(row(i, "allocated_peak_bytes"), allocated);
        assert_eq!(row(i, "reserved_peak_bytes"), peak);
        assert_eq!(row(i, "live_at_exit_bytes"), peak);
        assert_eq!(row(i, "ooms"), 0);
        assert_eq!(row(i, "explained_percent"), 100.0);
    }
    let outlier = &ranks["outlier"];
    assert_eq!(outlier["row"], 1);
    assert_eq!(outlier["median_row"], 0);
    assert_eq!(outlier["above_median_bytes"], 6u64 << 20);
    assert_eq!(outlier["steps"], serde_json::json!([7, 7]));
    let output_line = forward_output_line();
    assert_eq!(
        outlier["call_site"],
        format!("forward_pass (torch_like.cpp:{output_line})")
    );
    assert_eq!(outlier["call_site_more_bytes"], 6u64 << 20);

    let text = stdout(&cudatrace(&["report", merged.to_str().unwrap()]).output().unwrap());
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("every rank"))
        .take(5)
        .collect();
    assert_eq!(
        table[0],
        "every rank: 2 rows on 2 hosts, one row per process and device"
    );
    let words = |line: &str| line.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        words(table[1]),
        [
            "host",
            "rank",
            "pid",
            "device",
            "peak",
            "at",
            "allocated",
            "peak",
            "reserved",
            "peak",
            "live",
            "at",
            "exit",
            "OOMs",
            "explained"
        ]
    );
    for (line, (host, rank, peak, allocated)) in table[2..4]
        .iter()
        .zip([("nodeA", "0", "26.0", "11.0"), ("nodeB", "1", "32.0", "17.0")])
    {
        let cells = words(line);
        assert_eq!(
            (cells[0].as_str(), cells[1].as_str(), cells[3].as_str()),
            (host, rank, "0"),
            "{line}"
        );
        assert_eq!(&cells[4..6], [peak, "MiB"], "{line}");
        assert_eq!(&cells[8..10], [allocated, "MiB"], "{line}");
        assert_eq!(&cells[14..], ["0", "100.0%"], "{line}");
    }
    assert_eq!(
        table[4],
        format!("  rank 1 peaks 6.0 MiB (23%) above the median rank (rank 0), at step 7; the difference is at forward_pass (torch_like.cpp:{output_line}) (6.0 MiB more)")
    );
    // The process headings name host and rank.
    assert!(
        text.contains(" on nodeB, rank 1 (local rank 0, world size 2) "),
        "{text}"
    );

    // The page: the table, the outlier's row marked, one small chart a row.
    let page = html_page(&merged);
    assert_eq!(page.matches("<div class=\"small-chart\">").count(), 2);
    assert_eq!(page.matches("<tr class=\"outlier\">").count(), 1);
    assert!(page.contains("<span class=\"small-name\">rank 1 on nodeB, device 0</span>"));

    // Each pickle names its host (the hosts' pids may be the same), and
    // each reads on its own.
    let pickles = snapshot_pickles(&merged, "pickles");
    assert_eq!(pickles.len(), 2);
    assert!(pickles[0].0.contains("pickles.nodeA.") && pickles[1].0.contains("pickles.nodeB."));
    let figures: Vec<(u64, u64)> = pickles.iter().map(|p| (p.1, p.2)).collect();
    assert_eq!(figures, [(4, 142), (7, 145)]);
}

#[test]
fn a_trace_of_one_process_on_one_device_has_no_rank_table() {
    let (trace, _, _) = host_run("ranks-single", &[("RANK", "0")]);
    let (report, _) = report_json(&trace);
    assert!(report["ranks"].is_null());
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    assert!(!text.contains("every rank"));
}

#[test]
fn merge_says_in_one_line_what_it_cannot_merge() {
    let (a, _, _) = host_run("merge-bad", &[]);
    let dir = a.parent().unwrap();
    let say = |out: &std::process::Output| {
        let text = stderr(out);
        assert_eq!(text.trim_end().lines().count(), 1, "{text}");
        text.trim_end().to_string()
    };
    let out = merge(&[&a, &a], &a);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        say(&out),
        format!(
            "cudatrace: {} is one of the traces to merge: write the merged trace elsewhere",
            a.display()
        )
    );
    let missing = dir.join("missing.trace");
    let out = merge(&[&a, &missing], &dir.join("m.trace"));
    assert_eq!(out.status.code(), Some(2));
    assert!(say(&out).starts_with(&format!("cudatrace: cannot open {}", missing.display())));
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not a trace at all\n").unwrap();
    let out = merge(&[&a, &text], &dir.join("m.trace"));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        say(&out),
        format!("cudatrace: {}: not a cudatrace trace (bad magic)", text.display())
    );
    assert!(!dir.join("m.trace").exists(), "nothing written");

    let out = merge(&[&a, &a], &dir.join("twice.trace"));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        say(&out),
        format!("cudatrace: {} is given twice: each run is merged once", a.display())
    );

    // An input whose process record is damaged: the process's records
    // cannot be placed, so they are left out, said, and the merged trace
    // has no footer.
    let mut bytes = std::fs::read(&a).unwrap();
    let mut at = 8;
    while bytes[at] != b'P' {
        let length = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        at += 5 + length + 4;
    }
    bytes[at + 5] ^= 0x55;
    let damaged = dir.join("damaged-process.trace");
    std::fs::write(&damaged, &bytes).unwrap();
    let merged = dir.join("merged-damaged.trace");
    let (b, _, _) = host_run("merge-bad-b", &[]);
    let out = merge(&[&b, &damaged], &merged);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!(
            "cudatrace: {}: a damaged record skipped at byte {at}",
            damaged.display()
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("cudatrace: {}: ", damaged.display()))
            && said.contains("left out: their process's start record was damaged"),
        "{said}"
    );
    let (report, _) = report_json(&merged);
    assert_eq!(report["complete"], false);
    assert_eq!(report["processes"].as_array().unwrap().len(), 1);

    // An input cut short (of another run: a cut copy of `a` is `a`'s run
    // again): merged without a footer, so that readers say it is
    // incomplete, and the command says which input lacked what.
    let bytes = std::fs::read(&b).unwrap();
    let cut = dir.join("cut.trace");
    std::fs::write(&cut, &bytes[..bytes.len() - 20]).unwrap();
    let merged = dir.join("merged.trace");
    let out = merge(&[&a, &cut], &merged);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!("cudatrace: {}: reading stopped at byte", cut.display())),
        "{said}"
    );
    assert!(
        said.contains(&format!("cudatrace: {}: the trace has no footer", cut.display())),
        "{said}"
    );
    assert!(said.contains("the merged trace is written without a footer"), "{said}");
    let (report, _) = report_json(&merged);
    assert_eq!(report["complete"], false);
    assert_eq!(report["processes"].as_array().unwrap().len(), 2);
}

#[test]
fn merge_refuses_one_run_given_twice_whatever_file_holds_it() {
    let [(a, ..), (b, ..)] = two_hosts("merge-twice");
    let dir = a.parent().unwrap().to_owned();
    let pid = |trace: &Path| processes(&dump(trace))[0]["pid"].as_u64().unwrap();
    let refused = |inputs: &[&Path], said: String| {
        let merged = dir.join("refused.trace");
        let out = merge(inputs, &merged);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_eq!(stderr(&out), format!("cudatrace: {said}\n"));
        assert!(!merged.exists(), "nothing written");
    };
    // A hard link: one file by two names.
    let link = dir.join("hard-link.trace");
    std::fs::hard_link(&a, &link).unwrap();
    refused(
        &[&a, &link],
        format!(
            "{} and {} are the same file: each run is merged once",
            a.display(),
            link.display()
        ),
    );
    // A copy: one run (its header's host and clocks) in two files.
    let copy = dir.join("copy.trace");
    std::fs::copy(&a, &copy).unwrap();
    refused(
        &[&a, &copy],
        format!(
            "{} and {} are the same run (one host, one start): each run is merged once",
            a.display(),
            copy.display()
        ),
    );
    // A merged trace holds its inputs' runs: merging it with one of them
    // again, in either order, counts that run twice.
    let job = dir.join("job.trace");
    assert_eq!(merge(&[&a, &b], &job).status.code(), Some(0));
    refused(
        &[&job, &a],
        format!(
            "{} holds a run that {} holds too (pid {} on nodeA): each run is merged once",
            a.display(),
            job.display(),
            pid(&a)
        ),
    );
    refused(
        &[&b, &job],
        format!(
            "{} holds a run that {} holds too (pid {} on nodeB): each run is merged once",
            job.display(),
            b.display(),
            pid(&b)
        ),
    );
    // The spools of a run collected again (the collector takes the run's
    // header from the spools' trace pointer).
    let (mut command, run) = run_program(
        "merge-recollected",
        &fake_cuda::program("scenarios"),
        &["--keep-spools"],
    );
    let out = command.arg("runtime").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let spools = run_spools(run.parent().unwrap())[0].parent().unwrap().to_owned();
    let again = dir.join("recollected.trace");
    let out = cudatrace(&["collect", spools.to_str().unwrap(), "-o", again.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    refused(
        &[&run, &again],
        format!(
            "{} and {} are the same run (one host, one start): each run is merged once",
            run.display(),
            again.display()
        ),
    );
}

/// `CLOCK_MONOTONIC` now, in ns.
fn monotonic_now() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock and out-pointer.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) }, 0);
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

#[test]
fn merge_takes_its_clock_from_the_earliest_event_so_that_no_time_is_negative() {
    // Rank 0 on nodeX, collected by hand: its header is stamped when it is
    // collected, after its events.
    let dir = scratch_dir("merge-by-hand");
    let spools = dir.join("spools");
    std::fs::create_dir(&spools).unwrap();
    let out = program(
        "torch_like",
        &[fake_cuda::torch_library("211").to_str().unwrap(), "training"],
    )
    .env("LD_PRELOAD", tracer_library())
    .env("CUDATRACE_DIR", &spools)
    .env("CUDATRACE_TEST_HOST", "nodeX")
    .envs([("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "2")])
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // Rank 1 on nodeY, a host that booted a millisecond ago: every event
    // of nodeX happened before its clock began. It runs, then nodeX's
    // spools are collected, so its header is the earlier of the two.
    let booted = format!("-{}", monotonic_now() - 1_000_000);
    let (y, ..) = host_run(
        "merge-late-boot",
        &[
            ("CUDATRACE_TEST_HOST", "nodeY"),
            ("CUDATRACE_TEST_CLOCK_OFFSET_NS", booted.as_str()),
            ("RANK", "1"),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("FAKE_TORCH_LEAK", "1"),
        ],
    );
    let x = dir.join("x.trace");
    let out = cudatrace(&["collect", spools.to_str().unwrap(), "-o", x.to_str().unwrap()])
        .env("CUDATRACE_TEST_HOST", "nodeX")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let (lines_x, lines_y) = (dump(&x), dump(&y));
    let (header_x, header_y) = (header(&lines_x), header(&lines_y));
    assert!(header_y["start_realtime_ns"].as_u64() < header_x["start_realtime_ns"].as_u64());

    let merged = dir.join("job.trace");
    let out = merge(&[&x, &y], &merged);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // nodeX's events are the earliest: its clock is the merged one.
    assert!(
        stderr(&out).contains(&format!(
            "{}: 1 process image, on the merged clock as it is",
            x.display()
        )),
        "{}",
        stderr(&out)
    );
    let lines_m = dump(&merged);
    assert_eq!(
        header(&lines_m)["start_monotonic_ns"],
        header_x["start_monotonic_ns"],
        "nodeX's clock"
    );
    let events = |lines: &[Value], process: u64| -> Vec<u64> {
        lines
            .iter()
            .filter(|l| l.get("op").is_some() && l["process"] == process)
            .map(|l| l["time_ns"].as_u64().unwrap())
            .collect()
    };
    let offset = |h: &Value| {
        i128::from(h["start_realtime_ns"].as_u64().unwrap()) - i128::from(h["start_monotonic_ns"].as_u64().unwrap())
    };
    let shift_y = offset(header_y) - offset(header_x);
    let (x_times, y_times) = (events(&lines_x, 0), events(&lines_y, 0));
    assert!(!x_times.is_empty() && !y_times.is_empty());
    // Every time where it happened: none clamped to 0.
    assert_eq!(events(&lines_m, 0), x_times);
    let moved: Vec<u64> = y_times.iter().map(|&t| (i128::from(t) + shift_y) as u64).collect();
    assert_eq!(events(&lines_m, 1), moved);
    assert!(moved[0] > *x_times.last().unwrap(), "nodeY ran after nodeX");
    // And so each rank's peak is its own.
    let (report, _) = report_json(&merged);
    let peaks: Vec<(Value, Value)> = report["ranks"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["host"].clone(), row["peak_bytes"].clone()))
        .collect();
    assert_eq!(
        peaks,
        [
            (Value::from("nodeX"), Value::from(26u64 << 20)),
            (Value::from("nodeY"), Value::from(32u64 << 20))
        ]
    );
}

/// Each pickle `snapshot -o STEM` writes of `trace`, in the order it names
/// them: its path, its segments and its trace actions, as Python reads it.
fn snapshot_pickles(trace: &Path, stem: &str) -> Vec<(String, u64, u64)> {
    let stem = trace.with_file_name(stem);
    let out = cudatrace(&["snapshot", trace.to_str().unwrap(), "-o", stem.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let pickles: Vec<String> = stdout(&out).lines().map(|p| p.trim().to_string()).collect();
    let script = "import pickle, sys\nfor p in sys.argv[1:]:\n    s = pickle.load(open(p, 'rb'))\n    print(len(s['segments']), sum(len(t) for t in s['device_traces']))";
    let read = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(&pickles)
        .output()
        .unwrap();
    assert!(read.status.success(), "{}", stderr(&read));
    pickles
        .into_iter()
        .zip(stdout(&read).lines())
        .map(|(path, line)| {
            let (segments, entries) = line.split_once(' ').unwrap();
            (path, segments.parse().unwrap(), entries.parse().unwrap())
        })
        .collect()
}

/// The trace actions of each pickle `snapshot -o STEM` writes of `trace`.
fn snapshot_entries(trace: &Path, stem: &str) -> Vec<u64> {
    snapshot_pickles(trace, stem).into_iter().map(|p| p.2).collect()
}

#[test]
fn a_merge_of_folded_traces_keeps_each_host_s_detail_in_its_snapshots() {
    let folded = |label: &str, host: &str, offset: &str| {
        let (mut command, trace) = run_program(label, &fake_cuda::program("torch_like"), &["--max-size", "64KiB"]);
        let out = command
            .arg(fake_cuda::torch_library("211"))
            .arg("training")
            .env("FAKE_TORCH_STEPS", "300")
            .env("CUDATRACE_TEST_HOST", host)
            .env("CUDATRACE_TEST_CLOCK_OFFSET_NS", offset)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        trace
    };
    let a = folded("merge-folded-a", "nodeA", "0");
    let b = folded("merge-folded-b", "nodeB", &CLOCK_OFFSET_NS.to_string());
    let alone: Vec<u64> = [&a, &b].iter().flat_map(|t| snapshot_entries(t, "alone")).collect();
    // How much detail a cap keeps depends on when the collector folded;
    // each host keeps some (the fault left a host's pickle empty).
    assert!(alone.iter().all(|&n| n > 0), "{alone:?}");
    let merged = a.with_file_name("folded-job.trace");
    assert!(merge(&[&a, &b], &merged).status.success());
    // Each host's pickle holds its own detailed span, as its trace alone did.
    assert_eq!(snapshot_entries(&merged, "merged"), alone);
    let text = stdout(&cudatrace(&["report", merged.to_str().unwrap()]).output().unwrap());
    let detail = text.lines().find(|l| l.starts_with("detail ")).unwrap();
    assert!(
        detail.contains(" on nodeA, from ") && detail.contains(" on nodeB to the end"),
        "{detail}"
    );
}

/// What `cudatrace COMMAND TRACE OPTIONS -o TRACE.EXTENSION` wrote.
fn written_by(command: &str, trace: &Path, options: &[&str], extension: &str) -> String {
    let output = trace.with_extension(extension);
    let mut args = vec![command, trace.to_str().unwrap()];
    args.extend(options);
    args.extend(["-o", output.to_str().unwrap()]);
    let out = cudatrace(&args).output().unwrap();
    assert!(out.status.success(), "{command}: {}", stderr(&out));
    std::fs::read_to_string(&output).unwrap()
}

/// A copy of `trace` as if recorded on `host`: the same pids, another host
/// (what two containers' pid namespaces give two nodes).
fn as_host(trace: &Path, host: &str, copy: &Path) {
    use cudatrace_trace::{Record, TraceReader, TraceWriter};
    let mut reader = TraceReader::new(std::io::BufReader::new(std::fs::File::open(trace).unwrap())).unwrap();
    let Some(Record::Header(mut header)) = reader.next_record().unwrap() else {
        panic!("no header")
    };
    header.host = host.to_string();
    let mut writer = TraceWriter::new(std::fs::File::create(copy).unwrap(), &header).unwrap();
    while let Some(mut record) = reader.next_record().unwrap() {
        if let Record::Process(start) = &mut record {
            start.place.host = host.to_string();
        }
        match &record {
            Record::Events { process, events } => writer.events(*process, events).unwrap(),
            Record::ProcessEnd(end) => writer.process_end(end).unwrap(),
            other => writer.record(other).unwrap(),
        }
    }
    writer.flush().unwrap();
}

/// `cudatrace run -- /bin/sh -c SCRIPT`, where `$S` is the fake program
/// `scenarios`: (the program's output, the trace).
fn run_shell(label: &str, script: &str) -> (String, PathBuf) {
    let (mut command, trace) = run_program(label, Path::new("/bin/sh"), &[]);
    command
        .arg("-c")
        .arg(script)
        .env("S", fake_cuda::program("scenarios"))
        .env_remove("RANK")
        .env_remove("LOCAL_RANK")
        .env_remove("WORLD_SIZE");
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    (stdout(&output), trace)
}

#[test]
fn the_images_of_one_process_are_one_row_of_the_rank_table() {
    // One process that execs (3000 bytes, then 4000 in its new image) is
    // no ranks to compare: no table, as for a process that never execs.
    let (_, trace) = run_shell("ranks-exec-alone", "\"$S\" exec");
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"].as_array().unwrap().len(), 2);
    assert!(report["ranks"].is_null(), "{:#}", report["ranks"]);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    assert!(!text.contains("every rank"), "{text}");
    assert!(!text.contains("median rank"), "{text}");
    assert!(!html_page(&trace).contains("<h2>Every rank</h2>"));

    // Beside another process, it is one row: its higher image's peak, and
    // what its last image held at exit.
    let (out, trace) = run_shell("ranks-exec-beside", "\"$S\" exec && \"$S\" leak 3");
    let exec_pid: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("exec-child "))
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"].as_array().unwrap().len(), 3);
    let rows = report["ranks"]["rows"].as_array().unwrap();
    let figures: Vec<(bool, u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["pid"] == exec_pid,
                r["peak_bytes"].as_u64().unwrap(),
                r["live_at_exit_bytes"].as_u64().unwrap(),
                r["ooms"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(figures, [(true, 4000, 4000, 0), (false, 9 << 20, 3 << 20, 0)]);
    assert_eq!(report["ranks"]["outlier"]["row"], 1);
    assert_eq!(report["ranks"]["outlier"]["median_row"], 0);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    assert!(
        text.contains("every rank: 2 rows on 1 host, one row per process and device\n"),
        "{text}"
    );
    assert_eq!(html_page(&trace).matches("<div class=\"small-chart\">").count(), 2);
}

#[test]
fn two_hosts_with_the_same_pids_stay_two_sets_of_processes() {
    let (output, a) = run_scenario("same-pids", "idle-children", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let b = a.with_file_name("other-host.trace");
    as_host(&a, "nodeB", &b);
    let merged = a.with_file_name("same-pids.trace");
    let out = merge(&[&a, &b], &merged);
    assert!(out.status.success(), "{}", stderr(&out));
    let (alone, _) = report_json(&a);
    let (report, _) = report_json(&merged);
    // Each host's idle children are its own: twice as many, none hidden by
    // the other host's processes of the same pid.
    let children = |report: &Value| report["forked_without_spool"].as_array().unwrap().len();
    assert_eq!(children(&alone), 3);
    assert_eq!(children(&report), 6);
    assert_eq!(report["processes"].as_array().unwrap().len(), 2);

    // Perfetto: a process track each, each labelled with its host.
    let perfetto: Value =
        serde_json::from_str(&written_by("perfetto", &merged, &["--format", "json"], "json")).unwrap();
    let mut labels: Vec<(u64, String)> = perfetto["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_labels")
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["args"]["labels"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    labels.sort();
    let pid = report["processes"][0]["pid"].as_u64().unwrap();
    let ppid = report["processes"][0]["ppid"].as_u64().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        labels,
        vec![
            (1, format!("pid {pid}, parent {ppid}, on {}", host.trim())),
            (2, format!("pid {pid}, parent {ppid}, on nodeB")),
        ]
    );

    // The flame graph's roots name the host.
    let text = written_by("flamegraph", &merged, &["--folded"], "folded");
    // (Folded stacks escape a frame's spaces.)
    let mut roots: Vec<String> = text
        .lines()
        .map(|l| l.split(';').next().unwrap().replace("%20", " "))
        .collect();
    roots.sort_unstable();
    roots.dedup();
    let mut expected = vec![
        format!("pid {pid} scenarios on {}", host.trim()),
        format!("pid {pid} scenarios on nodeB"),
    ];
    expected.sort_unstable();
    assert_eq!(roots, expected);
}
