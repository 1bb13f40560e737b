//! `cudatrace perfetto`'s protobuf trace on traces of the fake driver, read
//! back with Perfetto's own message definitions (common/pftrace.py, which
//! also checks the sequence's rules: flags, the incremental clock, every
//! iid and track uuid defined before it is used, slices that nest on their
//! tracks): what the JSON draws, drawn alike, with every argument, counter
//! and track, and the exact values of known allocations.

mod common;

use common::perfetto::*;
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// The address the scenario printed on its `nth` `E OP API …` line (from 0).
fn printed_address(printed: &str, op: &str, api: &str, nth: usize) -> String {
    let line = printed
        .lines()
        .filter(|l| l.starts_with(&format!("E {op} {api} ")))
        .nth(nth)
        .unwrap_or_else(|| panic!("no {op} by {api} in {printed}"));
    line.split(' ').nth(4).unwrap().to_string()
}

/// The line of scenarios.c that holds `text`.
fn scenario_line(text: &str) -> u64 {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fake-cuda/c/scenarios.c");
    let source = std::fs::read_to_string(source).unwrap();
    source.lines().position(|l| l.contains(text)).expect("the line") as u64 + 1
}

/// The slice named `name`.
fn slice<'a>(read: &'a Value, name: &str) -> &'a Value {
    let found: Vec<&Value> = read["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "{name}");
    found[0]
}

/// The values of counter `name`, in time order.
fn counter_values(read: &Value, name: &str) -> Vec<u64> {
    read["counters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == name)
        .map(|c| c["value"].as_u64().unwrap())
        .collect()
}

/// Names of the tracks that are neither processes nor threads, once each.
fn track_names(read: &Value) -> Vec<String> {
    let mut names: Vec<String> = read["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_protobuf_trace_is_the_default_and_has_every_argument_counter_and_track_of_the_json() {
    let (trace, printed) = traced_scenario("perfetto-runtime", "runtime", &[]);
    let (report, _) = report_json(&trace);
    let process = &report["processes"][0];
    let pid = process["pid"].as_u64().unwrap();

    // By default: protobuf, beside the trace; --format json: the JSON's name.
    let path = trace.to_str().unwrap();
    let written = cudatrace(&["perfetto", path]).output().unwrap();
    assert!(written.status.success(), "{}", stderr(&written));
    let pftrace = trace.with_extension("pftrace");
    assert_eq!(stdout(&written), format!("{}\n", pftrace.display()));
    let written = cudatrace(&["perfetto", path, "--format", "json"]).output().unwrap();
    assert_eq!(
        stdout(&written),
        format!("{}\n", trace.with_extension("perfetto.json").display())
    );
    let default = read_pftrace(&pftrace);
    assert_eq!(default["sequences"], json!([1]));
    assert_eq!(default["compressed_batches"], 1);

    let read = assert_same_drawing(&trace, "runtime", &[]);
    let uncompressed = assert_same_drawing(&trace, "runtime-uncompressed", &["--uncompressed"]);
    assert_eq!(uncompressed["compressed_batches"], 0);
    assert_eq!(uncompressed["packets"], read["packets"]);
    assert_eq!(proto_drawing(&uncompressed), proto_drawing(&read));
    assert_eq!(proto_drawing(&default), proto_drawing(&read));

    // The process, named and labelled as the JSON names it.
    let argv = format!("{} runtime", fake_cuda::program("scenarios").display());
    let processes: Vec<&Value> = read["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == "process")
        .collect();
    assert_eq!(processes.len(), 1);
    assert_eq!(processes[0]["pid"], pid);
    assert_eq!(processes[0]["process_name"], argv.as_str());
    assert_eq!(
        processes[0]["labels"],
        json!([format!("pid {pid}, parent {}", process["ppid"])])
    );

    // Every allocation a slice; a known one with every argument and frame.
    assert_eq!(read["slices"].as_array().unwrap().len(), 14);
    let async1 = slice(&read, "64.0 KiB cudaMallocAsync");
    assert_eq!(
        async1["args"],
        json!({
            "address": printed_address(&printed, "alloc", "cudaMallocAsync", 0),
            "size": 65536,
            "api": "cudaMallocAsync",
            "kind": "pool",
            "device": 0,
            "stream": 0x1234,
            "freed_by": "cudaFreeAsync",
            "free_inferred": false,
        })
    );
    assert_eq!(async1["categories"], json!(["memory"]));
    assert_eq!(async1["track"], "GPU 0 allocations");
    let scenarios_c = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fake-cuda/c/scenarios.c")
        .canonicalize()
        .unwrap();
    let frames = async1["stack"].as_array().unwrap();
    assert_eq!(frames.len(), 5, "the top five frames, as the JSON has them");
    assert_eq!(
        frames[0],
        json!({
            "function": "scenario_runtime",
            "file": scenarios_c.to_str().unwrap(),
            "line": scenario_line("cudaMallocAsync(&async1"),
        })
    );
    assert_eq!(frames[1]["function"], "main");
    // Host memory: no device, as the JSON's null; lanes of its own.
    let host = slice(&read, "8.0 KiB cudaMallocHost");
    assert_eq!(host["args"]["device"], Value::Null);
    assert_eq!(host["args"]["kind"], "host-pinned");
    assert_eq!(host["track"], "host allocations");
    // Allocations still live at the end end with the trace.
    let kept = slice(&read, "2.0 MiB cudaMalloc");
    assert_eq!(kept["args"]["live_at_end"], true);
    assert_eq!(
        kept["args"]["address"],
        printed_address(&printed, "alloc", "cudaMalloc", 1)
    );

    // The counters, with their exact values.
    let mib = 1u64 << 20;
    assert_eq!(
        counter_values(&read, "GPU 0 live bytes"),
        [
            mib,
            3 * mib,
            2 * mib,
            2 * mib + 4096,
            2 * mib + 14336,
            2 * mib + 18432,
            2 * mib + 83968,
            2 * mib + 116736,
            2 * mib + 133120,
            2 * mib + 67584,
            2 * mib + 34816,
            2 * mib + 18432,
            2 * mib + 20032,
            2 * mib + 18432,
            2 * mib + 18944,
            2 * mib + 18432,
        ]
    );
    assert_eq!(counter_values(&read, "GPU 1 live bytes"), [4096, 0]);
    assert_eq!(
        counter_values(&read, "GPU 0 owner: scenarios"),
        counter_values(&read, "GPU 0 live bytes")
    );
    assert_eq!(
        track_names(&read),
        [
            "GPU 0 allocations",
            "GPU 0 context",
            "GPU 0 device used (process reading)",
            "GPU 0 graph memory",
            "GPU 0 live bytes",
            "GPU 0 owner: scenarios",
            "GPU 0 pools beyond live allocations",
            "GPU 1 allocations",
            "GPU 1 context",
            "GPU 1 live bytes",
            "GPU 1 owner: scenarios",
            "host allocations",
            "recording",
        ]
    );
    for counter in read["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == "counter")
    {
        assert_eq!(counter["unit"], "UNIT_SIZE_BYTES", "{counter}");
    }
    // Lanes: as many as allocations ever alive at once on each place.
    assert_eq!(
        read["lanes"],
        json!({
            format!("{pid} GPU 0 allocations"): {"lanes": 7, "most_alive": 7},
            format!("{pid} GPU 1 allocations"): {"lanes": 1, "most_alive": 1},
            format!("{pid} host allocations"): {"lanes": 2, "most_alive": 2},
        })
    );
    // The process's start, on its main thread.
    let instants = read["instants"].as_array().unwrap();
    assert_eq!(instants.len(), 1);
    assert_eq!(instants[0]["name"], "start");
    assert_eq!(instants[0]["tid"], pid);
    assert_eq!(
        instants[0]["args"],
        json!({"ppid": process["ppid"], "image": 0, "argv": argv})
    );
}

#[test]
fn windows_and_the_newest_events_are_drawn_alike() {
    let (trace, _) = traced_scenario("perfetto-window", "runtime", &[]);
    let whole = assert_same_drawing(&trace, "whole", &[]);
    let mut begins: Vec<i64> = whole["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["begin"].as_i64().unwrap())
        .collect();
    begins.sort();
    let seconds = |ns: i64| format!("{:.9}", ns as f64 / 1e9);
    let (from, to) = (seconds(begins[5]), seconds(begins[11]));
    let window = assert_same_drawing(&trace, "window", &["--from", &from, "--to", &to]);
    let before = window["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["args"]["allocated_before_window"] == true)
        .count();
    assert!(before > 0, "allocations made before the window begin with it");
    let newest = assert_same_drawing(&trace, "newest", &["--max-events", "5"]);
    assert!(newest["slices"].as_array().unwrap().len() < whole["slices"].as_array().unwrap().len());
}

#[test]
fn each_process_image_is_a_process_of_its_own() {
    // The tree: a parent, two children, and the image the third exec'd
    // (its image before the exec recorded nothing). The chain: one pid, an
    // image before and one after its exec.
    // (The chain ends in `sh -c 'exit 7'`.)
    for (scenario, status, images, execs) in [("tree", 0, 4, 0), ("exec-chain", 7, 2, 1)] {
        let (output, trace) = run_scenario(&format!("perfetto-{scenario}"), scenario, &[]);
        assert_eq!(output.status.code(), Some(status), "{}", stderr(&output));
        let read = assert_same_drawing(&trace, scenario, &[]);
        let (report, _) = report_json(&trace);
        let mut expected: Vec<Value> = report["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let (pid, image) = (p["pid"].as_u64().unwrap(), p["image"].as_u64().unwrap());
                let label = if image > 0 {
                    format!("pid {pid}, parent {}, image {image} (after exec)", p["ppid"])
                } else {
                    format!("pid {pid}, parent {}", p["ppid"])
                };
                json!([pid | (image << 22), label])
            })
            .collect();
        let mut drawn: Vec<Value> = read["tracks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"] == "process")
            .map(|t| json!([t["pid"], t["labels"][0]]))
            .collect();
        expected.sort_by_key(Value::to_string);
        drawn.sort_by_key(Value::to_string);
        assert_eq!(drawn, expected, "{scenario}");
        assert_eq!(drawn.len(), images, "{scenario}");
        let starts: Vec<&Value> = read["instants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["name"])
            .collect();
        assert_eq!(starts.iter().filter(|&&n| n == "exec").count(), execs, "{scenario}");
        assert_eq!(starts.len(), images, "{scenario}: one start or exec per image");
    }
}

#[test]
fn a_refusal_is_an_instant_on_its_thread_with_its_figures_and_frames() {
    let (trace, _) = traced_scenario("perfetto-oom", "oom", &[("FAKE_CUDA_CAPACITY", "1048576")]);
    let read = assert_same_drawing(&trace, "oom", &[]);
    let refusals: Vec<&Value> = read["instants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["categories"] == json!(["oom"]))
        .collect();
    assert_eq!(refusals.len(), 1);
    let refusal = refusals[0];
    assert_eq!(refusal["name"], "out of memory: cudaMalloc asked for 1.0 MiB");
    assert_eq!(
        refusal["args"],
        json!({
            "requested": 1 << 20,
            "device_free": 512 << 10,
            "device_total": 1 << 20,
            "refused_by_limit": false,
            "device": 0,
            "api": "cudaMalloc",
        })
    );
    assert_eq!(refusal["stack"][0]["function"], "scenario_oom");
    assert_eq!(
        refusal["stack"][0]["line"],
        scenario_line("int status = cudaMalloc(&too_big")
    );
}

#[test]
fn pauses_and_resumes_are_marks_on_the_recording_track() {
    let cli = cli();
    let resume = format!("{} resume", cli.display());
    let pause = format!("{} pause", cli.display());
    let (mut command, trace) = run_command("perfetto-paused", "switching", &["--start-paused"]);
    let output = command.args([&resume, &pause]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let read = assert_same_drawing(&trace, "paused", &[]);
    let marks: Vec<&Value> = read["instants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["track"] == "recording")
        .map(|i| &i["name"])
        .collect();
    assert_eq!(marks, ["recording paused", "recording resumed", "recording paused"]);
}

#[test]
fn a_bad_format_is_one_line_and_json_is_never_uncompressed() {
    let (trace, _) = traced_scenario("perfetto-format", "runtime", &[]);
    let path = trace.to_str().unwrap();
    let bad = cudatrace(&["perfetto", path, "--format", "xml"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(
        stderr(&bad),
        "cudatrace: invalid value 'xml' for '--format <FORMAT>' [possible values: protobuf, json] (see --help)\n"
    );
    let json_uncompressed = cudatrace(&["perfetto", path, "--format", "json", "--uncompressed"])
        .output()
        .unwrap();
    assert_eq!(json_uncompressed.status.code(), Some(2));
    assert_eq!(
        stderr(&json_uncompressed),
        "cudatrace: --uncompressed is for the protobuf format: JSON is never compressed\n"
    );
    assert!(!trace.with_extension("perfetto.json").exists());
}

#[test]
fn an_output_named_json_gets_json_unless_a_format_is_asked_for() {
    let (trace, _) = traced_scenario("perfetto-by-name", "runtime", &[]);
    let path = trace.to_str().unwrap();
    let named = trace.with_file_name("named.json");
    let out = cudatrace(&["perfetto", path, "-o", named.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let read: Value = serde_json::from_slice(&std::fs::read(&named).unwrap()).unwrap();
    assert!(!read["traceEvents"].as_array().unwrap().is_empty());
    // Asked for, the protobuf goes into a .json name too.
    let forced = trace.with_file_name("forced.json");
    let out = cudatrace(&["perfetto", path, "--format", "protobuf", "-o", forced.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(serde_json::from_slice::<Value>(&std::fs::read(&forced).unwrap()).is_err());
}
