//! The fake `libc10_cuda.so`, run by `torch_like` without any tracer: what
//! each scenario emits, what a C++ tracker attached through the vtable
//! receives, and the binary interface a tracer reads from the file.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

const ACTIONS: [&str; 9] = [
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
];

/// Runs `torch_like` on a fake PyTorch, with a clean environment plus `env`.
fn run(version: &str, scenario: &str, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(fake_cuda::program("torch_like"));
    command.arg(fake_cuda::torch_library(version)).arg(scenario);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("FAKE_") || key.starts_with("PYTORCH_") || key == "LD_PRELOAD" {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    command.output().unwrap()
}

fn stdout_of(version: &str, scenario: &str, env: &[(&str, &str)]) -> String {
    let output = run(version, scenario, env);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "torch_like {scenario} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The `key=value` fields of the line starting with `label `.
fn fields(stdout: &str, label: &str) -> HashMap<String, u64> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("{label} ")))
        .unwrap_or_else(|| panic!("no {label} line in:\n{stdout}"));
    line.split_whitespace()
        .skip(1)
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

fn counts(stdout: &str, label: &str) -> [u64; 9] {
    let fields = fields(stdout, label);
    ACTIONS.map(|name| fields[name])
}

fn blocks(stdout: &str) -> Vec<(u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("block 0x"))
        .map(|rest| {
            let (address, size) = rest.split_once(' ').unwrap();
            (u64::from_str_radix(address, 16).unwrap(), size.parse().unwrap())
        })
        .collect()
}

/// Lines printed by static destruction, after main returned.
fn destroyed_after_main(stdout: &str) -> usize {
    let after = stdout.split_once("main returned\n").map_or("", |(_, after)| after);
    assert!(!stdout.split_once("main returned\n").unwrap().0.contains("destroyed"));
    after
        .lines()
        .filter(|l| *l == "tracker copy destroyed after main")
        .count()
}

const MIB: u64 = 1 << 20;

/// Scenario, devices, counts with a tracker attached after init, blocks live at exit.
const EXPECTED: &[(&str, usize, [u64; 9], usize)] = &[
    ("basic", 1, [13, 11, 11, 4, 2, 0, 0, 0, 0], 2),
    ("record_stream", 1, [3, 3, 3, 1, 1, 0, 0, 0, 0], 0),
    ("expandable", 1, [4, 3, 3, 0, 0, 4, 3, 0, 0], 1),
    ("pool", 1, [5, 3, 3, 3, 1, 0, 0, 0, 0], 2),
    ("oom", 1, [2, 2, 2, 2, 1, 0, 0, 0, 1], 0),
    ("snapshot", 1, [1, 1, 1, 1, 0, 0, 0, 1, 0], 0),
    ("two_devices", 2, [4, 2, 2, 3, 1, 0, 0, 2, 0], 2),
    ("late_attach", 1, [5, 2, 2, 2, 0, 0, 0, 0, 0], 3),
    ("all", 1, [28, 23, 23, 7, 4, 4, 3, 1, 1], 5),
];

#[test]
fn without_a_tracker_nothing_is_emitted() {
    for &(scenario, _, _, live) in EXPECTED.iter().chain([("threads", 2, [0; 9], 0)].iter()) {
        let stdout = stdout_of("211", scenario, &[]);
        assert_eq!(counts(&stdout, "actions"), [0; 9], "{scenario}");
        assert!(!stdout.contains("tracker"), "{scenario}: {stdout}");
        assert_eq!(blocks(&stdout).len(), live, "{scenario}");
    }
}

#[test]
fn a_tracker_attached_through_slot_44_sees_every_action() {
    for &(scenario, devices, expected, live) in EXPECTED {
        let stdout = stdout_of("211", scenario, &[("FAKE_TORCH_SELF_TRACKER", "1")]);
        assert!(stdout.contains("self tracker attached\n"), "{scenario}: {stdout}");
        assert_eq!(counts(&stdout, "actions"), expected, "{scenario}: {stdout}");
        assert_eq!(counts(&stdout, "tracker"), expected, "{scenario}: {stdout}");
        let tracker = fields(&stdout, "tracker");
        assert_eq!((tracker["bad"], tracker["unseen"]), (0, 0), "{scenario}: {stdout}");
        assert_eq!(tracker["live"], live as u64, "{scenario}: the tracker's live blocks");
        assert_eq!(blocks(&stdout).len(), live, "{scenario}");
        // One copy per device allocator, destroyed by static destruction.
        assert_eq!(destroyed_after_main(&stdout), devices, "{scenario}: {stdout}");
    }
}

#[test]
fn the_scenarios_leave_the_blocks_they_say() {
    let stdout = stdout_of("211", "basic", &[("FAKE_TORCH_SELF_TRACKER", "1")]);
    assert_eq!(
        blocks(&stdout),
        [(0x7e00_0000_0400, 4096), (0x7e00_0040_0000, 10 * MIB)]
    );
    // The three allocations under a compile context, and the segment of the third.
    assert_eq!(fields(&stdout, "tracker")["long_context"], 4);
    let stdout = stdout_of("211", "expandable", &[]);
    assert!(stdout.contains("expandable contiguous=1\n"), "{stdout}");
    assert_eq!(blocks(&stdout), [(0x6000_0000_0000, MIB)]);
    let stdout = stdout_of("211", "record_stream", &[]);
    assert!(stdout.contains("record_stream distinct=1 reused=1\n"), "{stdout}");
    let stdout = stdout_of("211", "pool", &[("FAKE_TORCH_SELF_TRACKER", "1")]);
    assert_eq!(fields(&stdout, "tracker")["pooled"], 10);
    let stdout = stdout_of("211", "two_devices", &[]);
    assert_eq!(blocks(&stdout), [(0x7e00_0020_0000, 3 * MIB), (0x7e10_0000_0000, MIB)]);
}

#[test]
fn an_oom_carries_the_free_bytes_and_the_rounded_request() {
    let stdout = stdout_of("211", "oom", &[("FAKE_TORCH_SELF_TRACKER", "1")]);
    assert!(stdout.contains("oom null=1\n"), "{stdout}");
    // 1 GiB of fake device less the 2 MiB segment still holding a tensor.
    let oom = fields(&stdout, "tracker oom");
    assert_eq!((oom["free"], oom["size"]), ((1 << 30) - 2 * MIB, 2 << 30));
}

#[test]
fn a_late_tracker_sees_only_what_follows() {
    let stdout = stdout_of("211", "late_attach", &[("FAKE_TORCH_SELF_TRACKER", "late")]);
    let (before, after) = stdout.split_once("late_attach: pause\n").unwrap();
    assert!(before.contains("self tracker attached\n"), "{stdout}");
    assert!(after.contains("actions "), "{stdout}");
    // The allocation after the attach fits a segment made before it.
    assert_eq!(counts(&stdout, "tracker"), [2, 2, 2, 0, 0, 0, 0, 0, 0]);
    assert_eq!(counts(&stdout, "actions"), [2, 2, 2, 0, 0, 0, 0, 0, 0]);
    let tracker = fields(&stdout, "tracker");
    // The free of a tensor from before the attach; the one tensor allocated after.
    assert_eq!((tracker["unseen"], tracker["live"], tracker["bad"]), (1, 1, 0));
    assert_eq!(blocks(&stdout).len(), 3);
}

#[test]
fn threads_keep_every_action_and_segments_balance() {
    for conf in [None, Some("release_lock_on_cudamalloc:True")] {
        let mut env = vec![("FAKE_TORCH_SELF_TRACKER", "1")];
        env.extend(conf.map(|c| ("PYTORCH_CUDA_ALLOC_CONF", c)));
        let stdout = stdout_of("211", "threads", &env);
        let actions = counts(&stdout, "actions");
        assert_eq!(counts(&stdout, "tracker"), actions, "{stdout}");
        // The main thread's first tensor, then the threads' 8,000.
        assert_eq!(actions[..3], [8001, 8001, 8001], "{stdout}");
        assert_eq!(actions[5..], [0, 0, 0, 0], "{stdout}");
        // How segments are shared between a device's two threads varies;
        // the final emptying of the cache gives every one back.
        assert!(actions[3] >= 2 && actions[3] == actions[4], "{stdout}");
        let tracker = fields(&stdout, "tracker");
        assert_eq!((tracker["bad"], tracker["unseen"], tracker["live"]), (0, 0, 0));
        assert_eq!(destroyed_after_main(&stdout), 2);
    }
}

#[test]
fn the_async_backend_refuses_trackers() {
    let env = [
        ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
        ("FAKE_TORCH_SELF_TRACKER", "1"),
    ];
    let stdout = stdout_of("211", "async", &env);
    assert!(stdout.contains("self tracker: attach failed: "), "{stdout}");
    assert_eq!(counts(&stdout, "actions"), [0; 9]);
    assert_eq!(blocks(&stdout), [(0x7e00_0010_0400, 4 * MIB)]);
    assert_eq!(destroyed_after_main(&stdout), 0);
    // Without the backend, the scenario refuses to run.
    assert_eq!(run("211", "async", &[]).status.code(), Some(2));
}

#[test]
fn the_other_layout_is_not_attached_as_2_11() {
    let stdout = stdout_of("other", "basic", &[("FAKE_TORCH_SELF_TRACKER", "1")]);
    assert!(stdout.contains("self tracker: attach is at slot 45, not 2.11's 44; not attached\n"));
    assert_eq!(counts(&stdout, "actions"), [0; 9]);
    assert_eq!(blocks(&stdout).len(), 2);
}

#[test]
fn the_packages_say_their_versions() {
    let version = |v| std::fs::read_to_string(fake_cuda::torch_version_file(v)).unwrap();
    assert!(version("211").lines().any(|l| l == "__version__ = '2.11.0+cu130'"));
    assert!(version("other").lines().any(|l| l == "__version__ = '2.99.0'"));
}

// ---- The binary interface, read from the file as a tracer reads it ----------

const NATIVE: &str = "_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator";
const VTABLE: &str = "_ZTVN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE";
const ASYNC_VTABLE: &str = "_ZTVN3c104cuda20CUDACachingAllocator15CudaMallocAsync24CudaMallocAsyncAllocatorE";
const ALLOCATOR: &str = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";

struct Symbol {
    name: String,
    value: u64,
    defined: bool,
}

/// The symbols of the ELF64 section of type `kind` (2: .symtab, 11: .dynsym).
fn symbols(path: &Path, kind: u32) -> Vec<Symbol> {
    let file = std::fs::read(path).unwrap();
    assert_eq!(&file[..6], b"\x7fELF\x02\x01", "a 64-bit little-endian ELF file");
    let u16_at = |at: usize| u64::from(u16::from_le_bytes(file[at..at + 2].try_into().unwrap()));
    let u32_at = |at: usize| u64::from(u32::from_le_bytes(file[at..at + 4].try_into().unwrap()));
    let u64_at = |at: usize| u64::from_le_bytes(file[at..at + 8].try_into().unwrap());
    let (sections, entry, count) = (u64_at(0x28) as usize, u16_at(0x3a) as usize, u16_at(0x3c) as usize);
    let section = |i: usize| sections + i * entry;
    let mut found = Vec::new();
    for i in 0..count {
        if u32_at(section(i) + 4) != u64::from(kind) {
            continue;
        }
        let (offset, size) = (u64_at(section(i) + 24) as usize, u64_at(section(i) + 32) as usize);
        let strings = u64_at(section(u32_at(section(i) + 40) as usize) + 24) as usize;
        for symbol in (offset..offset + size).step_by(24) {
            let name_at = strings + u32_at(symbol) as usize;
            let end = file[name_at..].iter().position(|&b| b == 0).unwrap();
            found.push(Symbol {
                name: String::from_utf8_lossy(&file[name_at..name_at + end]).into_owned(),
                value: u64_at(symbol + 8),
                defined: u16_at(symbol + 6) != 0,
            });
        }
    }
    found
}

fn value_of(symbols: &[Symbol], name: &str) -> u64 {
    let found: Vec<_> = symbols.iter().filter(|s| s.name == name && s.defined).collect();
    assert_eq!(found.len(), 1, "{name}");
    found[0].value
}

#[test]
fn the_vtable_slot_holds_attach_as_symtab_says() {
    for (version, slot) in [("211", 44), ("other", 45)] {
        let library = fake_cuda::torch_library(version);
        let symtab = symbols(&library, 2);
        let stdout = stdout_of(version, "vtable", &[]);
        let line = stdout.lines().find(|l| l.starts_with("vtable ")).unwrap();
        let field = |key: &str| {
            let text = line.split_whitespace().find_map(|f| f.strip_prefix(key)).unwrap();
            u64::from_str_radix(
                text.trim_start_matches("0x"),
                if text.starts_with("0x") { 16 } else { 10 },
            )
            .unwrap()
        };
        assert_eq!(field("slot="), slot);
        // The object's vptr is the address point, 16 bytes into the vtable.
        assert_eq!(field("vptr="), value_of(&symtab, VTABLE) + 16, "{version}");
        let attach: Vec<_> = symtab
            .iter()
            .filter(|s| s.name.starts_with(&format!("{NATIVE}27attachAllocatorTraceTrackerE")))
            .collect();
        assert_eq!(attach.len(), 1, "exactly one attach symbol");
        assert_eq!(
            attach[0].name,
            format!("{NATIVE}27attachAllocatorTraceTrackerESt8functionIFvRKNS1_10TraceEntryEEE")
        );
        assert_eq!(field("entry="), attach[0].value, "{version}: slot {slot} holds attach");
        value_of(&symtab, &format!("{NATIVE}11initializedEv"));
        value_of(&symtab, ASYNC_VTABLE);
        // Only the allocator object and the fake's C functions are exported.
        let dynsym = symbols(&library, 11);
        value_of(&dynsym, ALLOCATOR);
        for symbol in dynsym.iter().filter(|s| s.defined) {
            assert!(
                symbol.name == ALLOCATOR || symbol.name.starts_with("fake_torch_"),
                "{version}: {} exported",
                symbol.name
            );
        }
    }
}
