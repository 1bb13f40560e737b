//! Every byte explained, on the fake driver: it models the cost of a
//! context, a raised heap limit, a module, first launches, a pool and a
//! graph, and a fake NVML reports each process's usage, so that the split
//! `cudatrace report` makes can be asserted exactly.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;

const MIB: u64 = 1 << 20;

/// Runs `argv` (a fake-CUDA program and its arguments) under `cudatrace
/// run` with `flags`, the fake driver's costs in `env`, a capacity of 8 GiB
/// and, when `nvml` is set, the fake NVML; returns the trace.
fn run_with_costs(label: &str, argv: &[String], flags: &[&str], nvml: bool, env: &[(&str, String)]) -> PathBuf {
    let dir = scratch_dir(label);
    let trace = dir.join("run.trace");
    let nvml_dir = dir.join("nvml");
    std::fs::create_dir(&nvml_dir).unwrap();
    let mut command = cudatrace_run();
    command.arg("-o").arg(&trace).args(flags).arg("--").args(argv);
    command
        .env("TMPDIR", &dir)
        .env("FAKE_CUDA_CAPACITY", (8192 * MIB).to_string());
    if nvml {
        command.env("FAKE_NVML_DIR", &nvml_dir);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    trace
}

/// Runs the `explain` program with every cost modelled; `nvml` says whether
/// the fake NVML answers, `extra` adds flags and environment.
fn explain_run(label: &str, nvml: bool, flags: &[&str], env: &[(&str, &str)]) -> (Value, String, PathBuf) {
    let mut costs: Vec<(&str, String)> = vec![
        ("FAKE_CUDA_CONTEXT_BYTES", (300 * MIB).to_string()),
        ("FAKE_CUDA_MODULE_BYTES", (20 * MIB).to_string()),
        ("FAKE_CUDA_KERNEL_BYTES", (5 * MIB).to_string()),
        ("FAKE_CUDA_POOL_GRANULE", (2 * MIB).to_string()),
        ("FAKE_CUDA_OTHERS_BYTES", (100 * MIB).to_string()),
    ];
    costs.extend(env.iter().map(|&(key, value)| (key, value.to_string())));
    let program = fake_cuda::program("explain").to_string_lossy().into_owned();
    let trace = run_with_costs(label, &[program], flags, nvml, &costs);
    let (report, _) = report_json_with_stacks(&trace);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    (report["processes"][0]["footprint"].clone(), text, trace)
}

fn owners(breakdown: &Value) -> Vec<(String, u64)> {
    breakdown["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["owner"].as_str().unwrap().to_string(), o["bytes"].as_u64().unwrap()))
        .collect()
}

fn categories(breakdown: &Value) -> Value {
    json!({
        "reference_bytes": breakdown["reference_bytes"],
        "reference_source": breakdown["reference_source"],
        "pools_beyond_live_bytes": breakdown["pools_beyond_live_bytes"],
        "graph_bytes": breakdown["graph_bytes"],
        "context_bytes": breakdown["context_bytes"],
        "modules_and_kernels_bytes": breakdown["modules_and_kernels_bytes"],
        "unexplained_bytes": breakdown["unexplained_bytes"],
        "explained_percent": breakdown["explained_percent"],
    })
}

fn expected_owners() -> Vec<(String, u64)> {
    vec![
        ("explain".into(), 7 * MIB),
        ("libowner_inner.so".into(), 2 * MIB),
        ("libowner_outer.so".into(), MIB),
    ]
}

#[test]
fn with_nvml_every_byte_of_the_process_is_explained_exactly() {
    let (footprint, text, _) = explain_run("explain-nvml", true, &[], &[]);
    let devices = footprint.as_array().unwrap();
    assert_eq!(devices.len(), 1, "{footprint:#}");
    let device = &devices[0];
    assert_eq!(device["device"], 0);
    assert_eq!(device["name"], "Fake GPU 0");
    assert_eq!(device["uuid"], "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfe00");
    assert_eq!(device["total_bytes"], 8192 * MIB);
    assert_eq!(
        device["limits"],
        json!([
            {"limit": "stack", "bytes": 1024},
            {"limit": "printf", "bytes": MIB},
            {"limit": "heap", "bytes": 8 * MIB},
            {"limit": "heap", "bytes": 16 * MIB},
        ])
    );
    // Allocations 7 MiB + pool 4 MiB + context 300 + heap growth 8 + module
    // 20 + three kernels 15 (two launched, one asked about) + graph 4.
    let at_exit = &device["at_exit"];
    assert_eq!(
        categories(at_exit),
        json!({
            "reference_bytes": 358 * MIB,
            "reference_source": "nvml-process",
            "pools_beyond_live_bytes": MIB,
            "graph_bytes": 4 * MIB,
            "context_bytes": 308 * MIB,
            "modules_and_kernels_bytes": 35 * MIB,
            "unexplained_bytes": 0,
            "explained_percent": 100.0,
        })
    );
    assert_eq!(owners(at_exit), expected_owners());
    assert_eq!(categories(&device["at_peak"]), categories(at_exit));
    assert_eq!(device["notes"], json!([]));
    // NVML's first reading after the context saw it alone: the context before its heap grew.
    assert_eq!(device["context_by_nvml_bytes"], 300 * MIB);
    // The text report opens with the same table.
    let table: Vec<&str> = text.lines().skip(2).take(14).collect();
    assert!(table[0].starts_with("where the memory went, pid "), "{text}");
    let rows: Vec<(String, String)> = table[2..13]
        .iter()
        .map(|line| {
            let (name, cells) = line[2..].split_once("  ").unwrap();
            let cells: Vec<&str> = cells.split_whitespace().collect();
            (name.to_string(), cells.join(" "))
        })
        .collect();
    let same = |bytes: &str, share: &str| format!("{bytes} {share} {bytes} {share}");
    assert_eq!(
        rows,
        [
            ("driver-used (NVML, this process)", same("358.0 MiB", "100.0%")),
            ("explain", same("7.0 MiB", "2.0%")),
            ("libowner_inner.so", same("2.0 MiB", "0.6%")),
            ("libowner_outer.so", same("1.0 MiB", "0.3%")),
            ("pools beyond live allocations", same("1.0 MiB", "0.3%")),
            ("graph memory", same("4.0 MiB", "1.1%")),
            (
                "context (stack 1.0 KiB, printf 1.0 MiB, heap 16.0 MiB)",
                same("308.0 MiB", "86.0%")
            ),
            ("modules and kernels", same("35.0 MiB", "9.8%")),
            ("streams and events", same("0 B", "0.0%")),
            ("executable graphs", same("0 B", "0.0%")),
            ("unexplained", same("0 B", "0.0%")),
        ]
        .map(|(a, b)| (a.to_string(), b))
    );
    assert_eq!(table[13], "  explained: 100.0% at exit, 100.0% at peak");
}

#[test]
fn without_nvml_the_reference_is_the_device_used_memory_and_said_to_be_a_bound() {
    let (footprint, text, _) = explain_run("explain-no-nvml", false, &[], &[]);
    let at_exit = &footprint[0]["at_exit"];
    // The device's used memory includes the 100 MiB of other processes, and
    // with no reading before the process, so does the context.
    assert_eq!(
        categories(at_exit),
        json!({
            "reference_bytes": 458 * MIB,
            "reference_source": "device-used-bound",
            "pools_beyond_live_bytes": MIB,
            "graph_bytes": 4 * MIB,
            "context_bytes": 408 * MIB,
            "modules_and_kernels_bytes": 35 * MIB,
            "unexplained_bytes": 0,
            "explained_percent": 100.0,
        })
    );
    assert_eq!(owners(at_exit), expected_owners());
    assert_eq!(
        footprint[0]["notes"],
        json!([
            "no reading of the device before the process (NVML missing): the context figure includes every other process's memory",
            "NVML gave no per-process figure (NVML did not start (nvmlInit_v2 returned 9)): the reference is the device's used memory, an upper bound",
        ])
    );
    assert!(text.contains("driver-used (whole device: a bound)"), "{text}");
}

#[test]
fn nvml_in_another_pid_namespace_is_noticed_and_the_bound_used_instead() {
    let (footprint, _, trace) = explain_run("explain-pidns", true, &[], &[("FAKE_NVML_PID_OFFSET", "100000")]);
    let at_exit = &footprint[0]["at_exit"];
    assert_eq!(at_exit["reference_source"], "device-used-bound");
    // The device reading before the process still measures the context.
    assert_eq!(at_exit["context_bytes"], 308 * MIB);
    assert_eq!(at_exit["reference_bytes"], 458 * MIB);
    assert_eq!(at_exit["unexplained_bytes"], 100 * MIB);
    assert_eq!(
        footprint[0]["notes"],
        json!(["NVML gave no per-process figure (NVML lists processes, but none of the traced pids: it sees another pid namespace): the reference is the device's used memory, an upper bound"])
    );
    // On the page the note is listed last, after every device's section,
    // and nowhere above.
    let page = html_page(&trace);
    let notes = page.find("<h2>Notes</h2>").expect("notes");
    assert!(
        page.rfind("<h2>pid ").unwrap() < notes,
        "a device's section after the notes"
    );
    let listed: Vec<&str> = page[notes..]
        .split("<li>")
        .skip(1)
        .map(|li| &li[..li.find("</li>").unwrap()])
        .collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(
        listed[0].starts_with("pid ")
            && listed[0].ends_with(", device 0: NVML gave no per-process figure (NVML lists processes, but none of the traced pids: it sees another pid namespace): the reference is the device&#39;s used memory, an upper bound."),
        "{}",
        listed[0]
    );
    assert_eq!(page.matches("NVML gave no per-process figure").count(), 1);
}

#[test]
fn owners_without_stacks_are_the_modules_that_called_cuda() {
    let (footprint, _, _) = explain_run("explain-no-stacks", true, &["--stacks", "none"], &[]);
    assert_eq!(owners(&footprint[0]["at_exit"]), expected_owners());
}

#[test]
fn no_launch_hooks_leaves_first_launches_unmeasured() {
    let (footprint, _, _) = explain_run("explain-no-launch", true, &["--no-launch-hooks"], &[]);
    let at_exit = &footprint[0]["at_exit"];
    assert_eq!(at_exit["modules_and_kernels_bytes"], 20 * MIB);
    // The three kernels, and the pool and graph memory: the launch after them
    // is where their reading would have come from.
    assert_eq!(at_exit["unexplained_bytes"], 20 * MIB);
}

#[test]
fn perfetto_and_html_draw_each_owner_and_category() {
    let (_, _, trace) = explain_run("explain-viewers", true, &[], &[]);
    let json_path = trace.with_extension("json");
    let output = cudatrace(&[
        "perfetto",
        trace.to_str().unwrap(),
        "--format",
        "json",
        "-o",
        json_path.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let perfetto: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let mut last: std::collections::BTreeMap<String, (f64, u64)> = Default::default();
    for event in perfetto["traceEvents"].as_array().unwrap() {
        if event["ph"] == "C" {
            let ts = event["ts"].as_f64().unwrap();
            let entry = last
                .entry(event["name"].as_str().unwrap().to_string())
                .or_insert((ts, 0));
            if ts >= entry.0 {
                *entry = (ts, event["args"]["bytes"].as_u64().unwrap());
            }
        }
    }
    let last: Vec<(String, u64)> = last
        .into_iter()
        .filter(|(name, _)| name != "GPU 0 device used (process reading)")
        .map(|(name, (_, bytes))| (name, bytes))
        .collect();
    let expected: Vec<(String, u64)> = [
        ("GPU 0 context", 308 * MIB),
        ("GPU 0 driver-used (NVML)", 358 * MIB),
        ("GPU 0 graph memory", 4 * MIB),
        ("GPU 0 live bytes", 10 * MIB),
        ("GPU 0 modules and kernels", 35 * MIB),
        ("GPU 0 owner: explain", 7 * MIB),
        ("GPU 0 owner: libowner_inner.so", 2 * MIB),
        ("GPU 0 owner: libowner_outer.so", MIB),
        ("GPU 0 pools beyond live allocations", MIB),
    ]
    .iter()
    .map(|(name, bytes)| (name.to_string(), *bytes))
    .collect();
    assert_eq!(last, expected);

    // The protobuf draws the same counters, the context and NVML's readings
    // (known only at the end, so written after later ones) included.
    common::perfetto::assert_same_drawing(&trace, "explain-viewers", &[]);

    let page = html_page(&trace);
    assert!(page.contains("<h2>Where the memory went: pid "), "no footprint section");
    // The table is a table: its first rows, at exit, are the reference and
    // the largest owner.
    let table = &page[page.find("<table class=\"footprint\">").expect("a footprint table")..];
    let table = &table[..table.find("</table>").unwrap()];
    let at_exit: Vec<String> = table
        .split("<tr>")
        .skip(2)
        .take(2)
        .map(|row| row.split("</td>").take(3).collect::<Vec<_>>().join("</td>"))
        .collect();
    assert_eq!(
        at_exit,
        [
            "<td>driver-used (NVML, this process)</td><td class=\"num\">358.0 MiB</td><td class=\"num\">100.0%",
            "<td>explain</td><td class=\"num\">7.0 MiB</td><td class=\"num\">2.0%",
        ]
    );
    // This run's footprint has no notes, so the page has none.
    assert!(!page.contains("<h2>Notes</h2>"));
    let data_start = page.find("<script type=\"application/json\" class=\"data\">").unwrap();
    let data = &page[data_start..];
    let data = &data[data.find('>').unwrap() + 1..data.find("</script>").unwrap()];
    let chart: Value = serde_json::from_str(data).unwrap();
    let series: Vec<(&str, u64)> = chart["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                *s["values"]
                    .as_array()
                    .unwrap()
                    .last()
                    .unwrap()
                    .as_u64()
                    .as_ref()
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(
        series,
        [
            ("explain", 7 * MIB),
            ("libowner_inner.so", 2 * MIB),
            ("libowner_outer.so", MIB),
            ("pools beyond live allocations", MIB),
            ("graph memory", 4 * MIB),
            ("context", 308 * MIB),
            ("modules and kernels", 35 * MIB),
            // Drawn: an early reading saw memory measured only later.
            ("unexplained (driver-used less all measured)", 0),
        ]
    );
}

/// Runs `graph_capture` under `cudatrace run` with streams, events and
/// executable graphs costing memory; returns the footprint and the trace.
fn driver_objects_run(label: &str, streams: u32, events: u32) -> (Value, PathBuf) {
    let argv = [
        fake_cuda::program("graph_capture").to_string_lossy().into_owned(),
        streams.to_string(),
        events.to_string(),
    ];
    let costs = [
        ("FAKE_CUDA_CONTEXT_BYTES", (300 * MIB).to_string()),
        ("FAKE_CUDA_STREAM_BYTES", (64 << 10).to_string()),
        ("FAKE_CUDA_EVENT_BYTES", (16 << 10).to_string()),
        ("FAKE_CUDA_STREAM_USE_BYTES", (32 << 10).to_string()),
        ("FAKE_CUDA_GRAPH_EXEC_BYTES", MIB.to_string()),
    ];
    let trace = run_with_costs(label, &argv, &[], true, &costs);
    let (report, _) = report_json_with_stacks(&trace);
    (report["processes"][0]["footprint"][0].clone(), trace)
}

#[test]
fn streams_events_and_executable_graphs_are_explained_and_graph_memory_is_read_at_the_first_launch() {
    // 4,128 streams: the first 4,096 measured, then one in 16 (standing for
    // 16); 40 events, each measured. The sampled estimate is exact when
    // each creation costs the same. Each stream's first launch is measured.
    let (footprint, trace) = driver_objects_run("driver-objects", 4128, 40);
    let exit = &footprint["at_exit"];
    let objects = 4128 * ((64 << 10) + (32 << 10)) + 40 * (16 << 10);
    assert_eq!(exit["reference_bytes"], 429 * MIB + objects, "{footprint:#}");
    // The first stream's first launch is the kernel's too: measured as the
    // kernel's load, it counts with modules and kernels.
    assert_eq!(exit["streams_and_events_bytes"], objects - (32 << 10));
    assert_eq!(exit["modules_and_kernels_bytes"], 32 << 10);
    assert_eq!(exit["graph_executables_bytes"], MIB);
    // The graph's memory appears at its first launch; the program exits with
    // its context gone, so no later reading could see it.
    assert_eq!(exit["graph_bytes"], 128 * MIB);
    assert_eq!(exit["context_bytes"], 300 * MIB);
    assert_eq!(exit["unexplained_bytes"], 0);
    assert_eq!(exit["explained_percent"], 100.0);
    assert_eq!(
        footprint["notes"],
        json!(["streams and events: an estimate, 4138 of 4168 creations measured, each standing for those after it"])
    );
    // The captured allocations are the graph's, not memory of their own.
    let dump = stdout(&cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap());
    let graph_allocations = dump
        .lines()
        .filter(|line| line.contains("\"op\":\"alloc\"") && line.contains("\"kind\":\"graph-allocation\""))
        .count();
    assert_eq!(graph_allocations, 2, "{dump}");
}

#[test]
fn a_few_streams_and_events_are_each_measured_and_no_estimate_is_claimed() {
    let (footprint, _) = driver_objects_run("driver-objects-few", 3, 5);
    let exit = &footprint["at_exit"];
    assert_eq!(
        exit["streams_and_events_bytes"],
        3 * (64 << 10) + 2 * (32 << 10) + 5 * (16 << 10)
    );
    assert_eq!(exit["unexplained_bytes"], 0);
    assert_eq!(footprint["notes"], json!([]));
}

#[test]
fn the_peak_column_is_the_footprints_peak_between_readings_and_the_exit_column_what_was_live_at_exit() {
    let costs = vec![("FAKE_CUDA_CONTEXT_BYTES", (300 * MIB).to_string())];
    let program = fake_cuda::program("explain").to_string_lossy().into_owned();
    // NVML is read every 100 ms: now and then a reading falls within the
    // spike, as the trace's clock has it: the driver changes the usage NVML
    // reports during the call, the trace stamps the event after it. Run
    // until no reading does.
    let (trace, report) = (0..8)
        .map(|attempt| {
            let trace = run_with_costs(
                &format!("explain-spike-{attempt}"),
                &[program.clone(), "spike".into()],
                &[],
                true,
                &costs,
            );
            let (report, _) = report_json_with_stacks(&trace);
            (trace, report)
        })
        .find(|(_, report)| {
            // The reading after the spike can also read 308 MiB (the
            // driver's usage already back) and leave the same estimate, from
            // the other side: this test is of the reading before it.
            let peak = &report["processes"][0]["footprint"][0]["at_peak"];
            peak["reading_bytes"] == 308 * MIB
                && peak["reference_bytes"] == 372 * MIB
                && peak["reading_time_ns"].as_u64() < peak["time_ns"].as_u64()
        })
        .expect("a spike between two readings in 8 runs");
    let device = &report["processes"][0]["footprint"][0];
    // 64 MiB lived for microseconds between two NVML readings 100 ms apart:
    // the peak is the reading before it (the context and 8 MiB) plus the
    // 64 MiB measured since, with the program owning all 72 MiB.
    let peak = &device["at_peak"];
    assert_eq!(peak["reference_bytes"], 372 * MIB, "{device:#}");
    assert_eq!(owners(peak), vec![("explain".to_string(), 72 * MIB)]);
    assert_eq!(peak["context_bytes"], 300 * MIB);
    assert_eq!(peak["unexplained_bytes"], 0);
    // At exit nothing was live, whatever NVML read last.
    let exit = &device["at_exit"];
    assert_eq!(owners(exit), vec![]);
    assert_eq!(exit["reference_bytes"], 300 * MIB, "{device:#}");
    assert_eq!(exit["unexplained_bytes"], 0);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    let table: Vec<&str> = text.lines().skip(2).take(16).collect();
    assert_eq!(
        table[1].split_whitespace().collect::<Vec<_>>(),
        ["live", "at", "exit", "at", "peak"],
        "{text}"
    );
    let row = |name: &str| {
        table
            .iter()
            .find(|line| line[2..].starts_with(name))
            .map(|line| line[2 + name.len()..].split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no row {name} in {text}"))
    };
    assert_eq!(
        row("driver-used (NVML, this process)"),
        "300.0 MiB 100.0% 372.0 MiB 100.0%"
    );
    assert_eq!(row("explain"), "0 B 0.0% 72.0 MiB 19.4%");
    let peak_line = table
        .iter()
        .find(|l| l.starts_with("  at peak, "))
        .expect("the peak's line");
    // "  at peak, T s: driver-used is NVML's reading at R s, 308.0 MiB, plus
    // 64.0 MiB measured since", the reading before the peak.
    let rest = peak_line.strip_prefix("  at peak, ").unwrap();
    let (at, rest) = rest
        .split_once(" s: driver-used is NVML's reading at ")
        .expect(peak_line);
    let (read_at, rest) = rest.split_once(" s").expect(peak_line);
    assert_eq!(rest, ", 308.0 MiB, plus 64.0 MiB measured since", "{peak_line}");
    let (at, read_at): (f64, f64) = (at.parse().unwrap(), read_at.parse().unwrap());
    // Printed to the millisecond, the spike may come within the reading's.
    assert!(read_at <= at, "{peak_line}");
    assert!(
        peak["reading_time_ns"].as_u64().unwrap() < peak["time_ns"].as_u64().unwrap(),
        "{peak:#}"
    );
    let exit_line = table
        .iter()
        .find(|l| l.starts_with("  at exit, "))
        .expect("the exit's line");
    // NVML's last reading came before the last free, or after it.
    assert!(
        exit_line.ends_with(", 308.0 MiB, less 8.0 MiB measured since") || exit_line.ends_with(" s, 300.0 MiB"),
        "{exit_line}"
    );
}

#[test]
fn a_kernel_run_on_a_second_device_is_measured_loading_there_too() {
    let costs: Vec<(&str, String)> = vec![
        ("FAKE_CUDA_CONTEXT_BYTES", (300 * MIB).to_string()),
        ("FAKE_CUDA_MODULE_BYTES", (20 * MIB).to_string()),
        ("FAKE_CUDA_KERNEL_BYTES", (5 * MIB).to_string()),
    ];
    let program = fake_cuda::program("explain").to_string_lossy().into_owned();
    let trace = run_with_costs("explain-replicated", &[program, "replicated".into()], &[], true, &costs);
    let (report, _) = report_json_with_stacks(&trace);
    let footprint = report["processes"][0]["footprint"].as_array().unwrap();
    let by_device: Vec<(u64, u64, u64)> = footprint
        .iter()
        .map(|f| {
            let at_exit = &f["at_exit"];
            (
                f["device"].as_u64().unwrap(),
                at_exit["modules_and_kernels_bytes"].as_u64().unwrap(),
                at_exit["unexplained_bytes"].as_i64().unwrap() as u64,
            )
        })
        .collect();
    // Device 0: the module (20 MiB) and the kernel's first load (5 MiB);
    // device 1: the same kernel's load there, through the same handle.
    assert_eq!(by_device, vec![(0, 25 * MIB, 0), (1, 5 * MIB, 0)]);
}

#[test]
fn with_nothing_in_use_at_exit_nothing_was_left_to_explain() {
    // Three allocations, each freed: at exit the device holds nothing of
    // the process, and a share of nothing is no figure. (The device's own
    // readings, not the fake NVML's, whose rate-limited readings may miss
    // the peak's allocation.)
    let program = fake_cuda::program("scenarios").to_string_lossy().into_owned();
    let argv = [program, "pairs".to_string(), "3".to_string()];
    let trace = run_with_costs("explain-nothing-left", &argv, &[], false, &[]);
    let (report, _) = report_json_with_stacks(&trace);
    let at_exit = &report["processes"][0]["footprint"][0]["at_exit"];
    assert_eq!(at_exit["reference_bytes"], 0, "{at_exit:#}");
    let output = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    let text = stdout(&output);
    let explained: Vec<&str> = text.lines().filter(|l| l.starts_with("  explained: ")).collect();
    assert_eq!(
        explained,
        ["  explained: nothing was left to explain at exit, 100.0% at peak"],
        "{text}"
    );
    // The page's table says the same.
    let page = html_page(&trace);
    assert_eq!(
        page.matches("<p class=\"note\">explained: nothing was left to explain at exit, 100.0% at peak</p>")
            .count(),
        1
    );
}
