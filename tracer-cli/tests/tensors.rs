//! Tensors, on the fake `libc10_cuda.so`: the library attaches a trace
//! tracker to the caching allocator of a known PyTorch layout, records
//! every action, and refuses another layout, the async backend and
//! `--tensors off` with the reason in the trace. The snapshot's blocks
//! inside PyTorch's segments are then the tensors.

mod common;

use common::viewer::{check_replay, unpickle};
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Runs `torch_like <layout's library> SCENARIO` under `cudatrace run`;
/// returns the trace and what the program printed.
fn run_torch(label: &str, layout: &str, scenario: &str, flags: &[&str], env: &[(&str, &str)]) -> (PathBuf, String) {
    let (mut command, trace) = run_program(label, &fake_cuda::program("torch_like"), flags);
    command.arg(fake_cuda::torch_library(layout)).arg(scenario);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    (trace, stdout(&output))
}

/// The counts the program printed on its `actions` line: what its
/// allocator handed to trackers.
fn printed_counts(stdout: &str) -> [u64; 9] {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("actions "))
        .expect("an actions line");
    let mut counts = [0; 9];
    for (slot, field) in counts.iter_mut().zip(line.split_whitespace().skip(1)) {
        *slot = field.split_once('=').unwrap().1.parse().unwrap();
    }
    counts
}

/// The blocks the program left live: (address, block size).
fn printed_blocks(stdout: &str) -> Vec<(u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("block 0x"))
        .map(|l| {
            let (address, size) = l.split_once(' ').unwrap();
            (u64::from_str_radix(address, 16).unwrap(), size.parse().unwrap())
        })
        .collect()
}

/// The trace's tensor records, counted by action, and its status records' `arg1`s.
fn recorded(trace: &Path) -> ([u64; 9], Vec<(u64, u64)>) {
    let dump = cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap();
    assert!(dump.status.success(), "{}", stderr(&dump));
    let mut counts = [0; 9];
    let mut status = Vec::new();
    for line in stdout(&dump).lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        match record["op"].as_str() {
            Some("tensor") => counts[record["arg1"].as_u64().unwrap() as usize] += 1,
            Some("tensor-status") => status.push((record["arg1"].as_u64().unwrap(), record["arg2"].as_u64().unwrap())),
            _ => {}
        }
    }
    (counts, status)
}

fn tensors_of(trace: &Path) -> Value {
    let (report, _) = report_json_with_stacks(trace);
    report["processes"][0]["tensors"].clone()
}

#[test]
fn every_action_of_the_known_layout_is_recorded_and_the_layout_confirmed() {
    let (trace, printed) = run_torch("tensors-all", "211", "all", &[], &[]);
    // The tracker the library attached is the only one: every action the
    // allocator handed out went to it.
    assert_eq!(printed_counts(&printed), [28, 23, 23, 7, 4, 4, 3, 1, 1]);
    let (counts, status) = recorded(&trace);
    assert_eq!(counts, printed_counts(&printed));
    // Attached (1), then confirmed (2) by the first segment.
    assert_eq!(status, vec![(1, 0), (2, 0)]);
    let tensors = tensors_of(&trace);
    assert_eq!(
        tensors["status"],
        "tensors: 94 actions of PyTorch 2.11.0's caching allocator recorded"
    );
    assert_eq!(tensors["stopped_midway"], false);
    let device = &tensors["devices"][0];
    assert_eq!(
        (device["allocations"].as_u64(), device["frees"].as_u64()),
        (Some(28), Some(23))
    );
    assert_eq!(device["live_tensors_at_exit"], 5);
    assert_eq!(device["ooms"], 1);
    // The tensors live at exit: what the program says it kept.
    let requested: u64 = [4096u64, 524_288, 10 << 20, 3 << 20, 1 << 20].iter().sum();
    assert_eq!(device["allocated_bytes_at_exit"].as_u64(), Some(requested));
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    assert!(
        text.contains("  tensors on GPU 0: 28 allocations, 23 frees; allocated 14.5 MiB at exit, peak 77.0 MiB"),
        "{text}"
    );
    assert!(text.contains("    5 tensors live at exit\n"), "{text}");
    // The driver's failure: what held the device then, PyTorch's figures
    // with it, and its tensors by call site.
    let (report, _) = report_json_with_stacks(&trace);
    let held = &report["processes"][0]["devices"][0]["ooms"][0]["held"];
    assert_eq!(held["live_bytes"], 46_137_344, "{held}");
    let torch = &held["torch"];
    assert_eq!(
        (
            &torch["allocated_bytes"],
            &torch["reserved_bytes"],
            &torch["inactive_bytes"]
        ),
        (&json!(16_257_024), &json!(46_137_344), &json!(29_880_320))
    );
    let sites: u64 = torch["tensors_by_call_site"]["largest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|site| site["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(sites, 16_257_024, "the call sites hold what PyTorch had allocated");
    assert!(
        text.contains(
            "      held then: 44.0 MiB of device memory in this process; PyTorch 15.5 MiB allocated, 44.0 MiB reserved, 28.5 MiB inactive\n      call sites of the tensors live then:\n"
        ),
        "{text}"
    );
    // `snapshot --at oom` ends at the failure: its blocks are the tensors
    // live then, its last entries the failure itself.
    let stem = trace.with_extension("at-oom");
    let written = cudatrace(&[
        "snapshot",
        trace.to_str().unwrap(),
        "--at",
        "oom",
        "-o",
        stem.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(written.status.success(), "{}", stderr(&written));
    assert!(
        stderr(&written).starts_with("cudatrace: out-of-memory failure 1 (pid "),
        "{}",
        stderr(&written)
    );
    let pickle = stdout(&written).lines().next().unwrap().to_string();
    let (snapshot, _) = unpickle(&std::fs::read(&pickle).unwrap()).unwrap();
    let allocated: u64 = snapshot["segments"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["blocks"].as_array().unwrap().iter())
        .filter(|b| b["state"] == "active_allocated")
        .map(|b| b["size"].as_u64().unwrap())
        .sum();
    assert_eq!(allocated, 16_257_024, "the tensors live at the failure");
    let actions: Vec<&str> = snapshot["device_traces"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    // The whole run has 96 entries; the 93rd is the driver's failure.
    assert_eq!(
        (actions.len(), actions.last()),
        (93, Some(&"oom")),
        "nothing after the failure: {actions:?}"
    );
    // Perfetto's two formats draw PyTorch's allocated and reserved bytes alike.
    let read = common::perfetto::assert_same_drawing(&trace, "tensors-all", &[]);
    let names: Vec<&str> = read["counters"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .filter(|name| name.contains("PyTorch"))
        .collect();
    assert!(names.contains(&"GPU 0 PyTorch allocated") && names.contains(&"GPU 0 PyTorch reserved"));
}

#[test]
fn the_snapshot_blocks_inside_pytorch_segments_are_its_tensors() {
    // The viewer's replay merges every pair of adjacent segments when it
    // undoes an unmap, so it cannot replay a trace whose plain segments
    // touch once expandable ones were unmapped ("all" has both): that one
    // is checked for its blocks and counts only.
    for (scenario, devices, replays) in [
        ("basic", 1, true),
        ("expandable", 1, true),
        ("pool", 1, true),
        ("record_stream", 1, true),
        ("all", 1, false),
        ("two_devices", 2, true),
    ] {
        let (trace, printed) = run_torch(&format!("tensors-snapshot-{scenario}"), "211", scenario, &[], &[]);
        let stem = trace.with_extension("");
        let written = cudatrace(&["snapshot", trace.to_str().unwrap(), "-o", stem.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(written.status.success(), "{}", stderr(&written));
        let pickle = stdout(&written).lines().next().unwrap().to_string();
        let (snapshot, _) = unpickle(&std::fs::read(&pickle).unwrap()).unwrap();
        let mut live: Vec<(u64, u64)> = snapshot["segments"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["blocks"].as_array().unwrap().iter())
            .filter(|b| b["state"] == "active_allocated")
            .map(|b| (b["address"].as_u64().unwrap(), b["size"].as_u64().unwrap()))
            .collect();
        live.sort_unstable();
        // Every block the fake kept, at its carved size; nothing else (the
        // fake makes no allocation outside its allocator).
        assert_eq!(live, printed_blocks(&printed), "{scenario}");
        for device in (0..devices).filter(|_| replays) {
            check_replay(&snapshot, device, false).unwrap_or_else(|e| panic!("{scenario} device {device}: {e}"));
        }
        let mut actions: BTreeMap<String, u64> = BTreeMap::new();
        for device in 0..devices {
            for entry in snapshot["device_traces"][device].as_array().unwrap() {
                *actions
                    .entry(entry["action"].as_str().unwrap().to_string())
                    .or_default() += 1;
            }
        }
        let counts = printed_counts(&printed);
        assert_eq!(actions.get("alloc").copied().unwrap_or(0), counts[0], "{scenario}");
        assert_eq!(
            actions.get("free_completed").copied().unwrap_or(0),
            counts[2],
            "{scenario}"
        );
        let notes = snapshot["allocator_settings"]["cudatrace_notes"].to_string();
        assert!(
            notes.contains("the blocks of PyTorch's segments are its tensors"),
            "{notes}"
        );
        assert!(!notes.contains("default splitting rules"), "{scenario}: {notes}");
    }
}

#[test]
fn another_layout_is_refused_and_the_trace_says_why() {
    let (trace, printed) = run_torch("tensors-other", "other", "basic", &[], &[]);
    // Nothing was attached: the allocator handed no action to anyone.
    assert_eq!(printed_counts(&printed), [0; 9]);
    let (counts, status) = recorded(&trace);
    assert_eq!(counts, [0; 9]);
    // Unavailable (3): unknown version (1).
    assert_eq!(status, vec![(3, 1)]);
    assert_eq!(
        tensors_of(&trace)["status"],
        "tensors: unavailable in PyTorch 2.99.0: this PyTorch version's allocator layout is not known"
    );
    // The run carries on at segment level: basic's 4 segments, 2 freed.
    let (report, _) = report_json(&trace);
    let device = &report["processes"][0]["devices"][0];
    assert_eq!(
        (device["allocations"].as_u64(), device["frees"].as_u64()),
        (Some(4), Some(2))
    );
}

#[test]
fn the_async_backend_is_refused_without_calling_its_attach() {
    let env = [("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync")];
    let (trace, printed) = run_torch("tensors-async", "211", "async", &[], &env);
    assert!(printed.contains("main returned"), "{printed}");
    let (counts, status) = recorded(&trace);
    assert_eq!(counts, [0; 9]);
    // Unavailable (3): not the native allocator (3).
    assert_eq!(status, vec![(3, 3)]);
    let tensors = tensors_of(&trace);
    assert!(
        tensors["status"].as_str().unwrap().starts_with(
            "tensors: unavailable in PyTorch 2.11.0: the allocator is not PyTorch's native caching allocator"
        ),
        "{tensors}"
    );
}

#[test]
fn tensors_off_leaves_the_allocator_alone() {
    let (trace, printed) = run_torch("tensors-off", "211", "basic", &["--tensors", "off"], &[]);
    assert_eq!(printed_counts(&printed), [0; 9]);
    let (counts, status) = recorded(&trace);
    assert_eq!(counts, [0; 9]);
    assert_eq!(status, vec![(3, 7)]);
    assert_eq!(
        tensors_of(&trace)["status"],
        "tensors: unavailable in PyTorch 2.11.0: turned off (--tensors off)"
    );
}

#[test]
fn threads_on_two_devices_lose_no_action_with_or_without_the_lock_released() {
    for conf in ["", "release_lock_on_cudamalloc:True"] {
        let env = [("PYTORCH_CUDA_ALLOC_CONF", conf)];
        let (trace, printed) = run_torch("tensors-threads", "211", "threads", &[], &env);
        let printed = printed_counts(&printed);
        // The main thread's first tensor attached the tracker before the
        // threads started: every action reached it.
        assert_eq!(printed[..3], [8001, 8001, 8001], "{conf}");
        assert_eq!(recorded(&trace).0, printed, "{conf}");
        let tensors = tensors_of(&trace);
        let allocations: u64 = tensors["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["allocations"].as_u64().unwrap())
            .sum();
        assert_eq!(allocations, 8001, "{conf}");
    }
}

#[test]
fn a_late_attach_records_what_follows_and_says_what_it_missed() {
    // The tracker attaches at the first hooked allocation after the
    // library is resolved; with the program's own late tracker too, both
    // see the same actions after the pause.
    let (trace, printed) = run_torch("tensors-late", "211", "late_attach", &[], &[]);
    let (counts, status) = recorded(&trace);
    assert_eq!(counts, printed_counts(&printed));
    assert_eq!(status[..2], [(1, 0), (2, 0)]);
}

/// `cudatrace flamegraph TRACE --at exit --folded EXTRA`: its lines as
/// (frames, bytes), and what it said on stderr.
fn folded_at_exit(trace: &std::path::Path, name: &str, extra: &[&str]) -> (Vec<(String, u64)>, String) {
    let folded = trace.with_extension(name);
    let written = cudatrace(
        &[
            &[
                "flamegraph",
                trace.to_str().unwrap(),
                "--at",
                "exit",
                "--folded",
                "-o",
                folded.to_str().unwrap(),
            ],
            extra,
        ]
        .concat(),
    )
    .output()
    .unwrap();
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    let lines = std::fs::read_to_string(&folded)
        .unwrap()
        .lines()
        .map(|line| {
            let (frames, bytes) = line.rsplit_once(' ').unwrap();
            (frames.to_string(), bytes.parse().unwrap())
        })
        .collect();
    (lines, String::from_utf8_lossy(&written.stderr).into_owned())
}

#[test]
fn the_flamegraph_shows_pytorch_segments_as_their_tensors_and_the_cache_when_asked() {
    let (trace, _) = run_torch("tensors-flamegraph", "211", "all", &[], &[]);
    let (lines, _) = folded_at_exit(&trace, "cache.folded", &["--cache"]);
    let tensors = tensors_of(&trace);
    let device = &tensors["devices"][0];
    let allocated = device["allocated_bytes_at_exit"].as_u64().unwrap();
    let reserved = device["reserved_bytes_at_exit"].as_u64().unwrap();
    let is_cache = |frames: &str| frames.ends_with(";PyTorch's%20cache%20(reserved,%20in%20no%20tensor)");
    let cache: Vec<u64> = lines
        .iter()
        .filter(|(frames, _)| is_cache(frames))
        .map(|&(_, bytes)| bytes)
        .collect();
    assert_eq!(cache, vec![reserved - allocated], "{lines:?}");
    // Every byte once: the tensors, the cache and the memory outside
    // PyTorch add up to what the device held at exit.
    let (report, _) = report_json_with_stacks(&trace);
    let live: u64 = report["processes"][0]["devices"][0]["live_at_exit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["size"].as_u64().unwrap())
        .sum();
    assert_eq!(lines.iter().map(|&(_, bytes)| bytes).sum::<u64>(), live, "{lines:?}");
    // No frame of the allocator's own library: its segments became tensors.
    assert!(
        !lines.iter().any(|(frames, _)| frames.contains("libc10_cuda")),
        "{lines:?}"
    );
    // By default the cache is left out, and said so: the same stacks but it.
    let (without, said) = folded_at_exit(&trace, "default.folded", &[]);
    let expected: Vec<(String, u64)> = lines.iter().filter(|(frames, _)| !is_cache(frames)).cloned().collect();
    assert_eq!(without, expected);
    assert!(
        said.contains(&format!(
            "cudatrace: PyTorch's cache, {} reserved in no tensor, is left out (--cache shows it)\n",
            human_bytes(reserved - allocated)
        )),
        "{said}"
    );
}

#[test]
fn the_backward_pass_is_one_call_site_split_by_autograd_node_and_comes_first_at_exit() {
    let (trace, printed) = run_torch("tensors-backward", "211", "backward", &[], &[]);
    assert!(
        printed.contains("parameters 13631488\ngradients 14680064\n"),
        "{printed}"
    );
    let report = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    assert!(report.status.success(), "{}", stderr(&report));
    let text = stdout(&report);
    // The process's section opens with its tensors, and their call sites
    // live at exit with the backward pass: 14 MiB, more than the 13 MiB of
    // parameters, though neither node alone is.
    let process = &text[text.find("\npid ").expect("a process section")..];
    let tensors_at = process.find("  tensors on GPU 0:").expect("a tensor section");
    let segments_at = process.find("  GPU 0:").expect("a device section");
    assert!(tensors_at < segments_at, "{text}");
    let live = &process[process
        .find("    call sites of tensors live at exit:\n")
        .expect("tensor call sites")..];
    let lines: Vec<&str> = live.lines().collect();
    assert_eq!(
        lines[1], "      14.0 MiB in 4 allocations, 2 stacks: autograd backward pass",
        "{live}"
    );
    assert_eq!(
        lines[2], "        by autograd node: ConvolutionBackward0 12.0 MiB, AddmmBackward0 2.0 MiB",
        "{live}"
    );
    let parameters = lines
        .iter()
        .position(|l| l.starts_with("      13.0 MiB in 1 allocation: "))
        .expect(live);
    assert!(parameters > 2, "{live}");
    // The HTML table says the same, tensors first.
    let page = html_page(&trace);
    let leaks = page
        .find("<h3>Tensors live at exit (leaks)</h3>")
        .expect("a tensor table");
    assert!(leaks < page.find("<h3>Memory live at exit (leaks)</h3>").unwrap());
    // The table's first row: from its first cell to the row's end.
    let table = &page[leaks..];
    let first_cell = table.find("<td").expect("a row in the tensor table");
    let first_row = &table[first_cell..first_cell + table[first_cell..].find("</tr>").expect("the row's end")];
    assert!(
        first_row.contains(
            "<td class=\"num\">14.0 MiB</td><td class=\"num\">4</td><td class=\"site\">autograd backward pass</td>\
             <td><div class=\"parts\">by autograd node: ConvolutionBackward0 12.0 MiB, AddmmBackward0 2.0 MiB</div>"
        ),
        "{}",
        &first_row[..first_row.len().min(2000)]
    );
    // The flamegraph keeps each node's frame in the backward pass's one
    // named tower.
    let (lines, _) = folded_at_exit(&trace, "backward.folded", &[]);
    let by_node = |node: &str| -> u64 {
        lines
            .iter()
            .filter(|(frames, _)| {
                let frames: Vec<&str> = frames.split(';').collect();
                let tower = frames.iter().position(|&f| f == "autograd%20backward%20pass");
                let node_frame = format!("autograd%20{node}%20(backward%20pass)");
                let node = frames.iter().position(|f| f.starts_with(&node_frame));
                matches!((tower, node), (Some(tower), Some(node)) if tower < node)
            })
            .map(|&(_, bytes)| bytes)
            .sum()
    };
    assert_eq!(
        (by_node("ConvolutionBackward0"), by_node("AddmmBackward0")),
        (12 << 20, 2 << 20),
        "{lines:?}"
    );
}
