//! `cudatrace run --limit SIZE`: every device behaves like a card of SIZE
//! for the whole process tree, and the report says whether the job fit.
//! Checked over the fake driver, with `limit` (tests/fake-cuda/c/limit.c).

mod common;

use common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const LIMIT: &str = "256MiB";
const LIMIT_BYTES: u64 = 256 << 20;
/// 50,000,000-byte blocks: five fit under 256 MiB (268,435,456), six do not.
const BLOCK: &str = "50000000";

/// `cudatrace run [--limit LIMIT] -- limit ARGS`: (stdout, report, trace).
fn run_limit(label: &str, options: &[&str], args: &[&str], env: &[(&str, &str)]) -> (String, Value, PathBuf) {
    let (mut command, trace) = run_program(label, &fake_cuda::program("limit"), options);
    command.args(args).envs(env.iter().copied());
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json(&trace);
    (stdout(&output), report, trace)
}

/// `cudatrace run --limit 256MiB -- /bin/sh -c SCRIPT` with `env`, in a
/// fresh folder: (output, trace). In SCRIPT, `{limit}` is the test program.
fn run_script(label: &str, script: &str, env: &[(&str, &str)]) -> (std::process::Output, PathBuf) {
    let dir = scratch_dir(label);
    let trace = dir.join("run.trace");
    let limit = fake_cuda::program("limit");
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .args(["--limit", LIMIT, "--", "/bin/sh", "-c"])
        .arg(script.replace("{limit}", limit.to_str().unwrap()))
        .envs(env.iter().copied())
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    (output, trace)
}

/// Shell that starts `limit hold BYTES MS` in the background (its pid in
/// `$h`) and goes on once it holds its memory: waiting for its word, not
/// for a while, so that a slow machine cannot reorder the processes.
fn hold_in_background(bytes: u64, ms: u64) -> String {
    format!(
        "f=$(mktemp); {{limit}} hold {bytes} {ms} > $f & h=$!; until grep -q held $f; do sleep 0.02; done; rm -f $f"
    )
}

/// The line of limit.c where `allocate` makes an allocation of `kind`.
fn call_line(kind: &str) -> usize {
    let call = match kind {
        "plain" => "result = cuMemAlloc_v2(",
        "runtime" => "result = cudaMalloc(",
        "async" => "result = cuMemAllocAsync(",
        "pool" => "result = cuMemAllocFromPoolAsync(",
        "vmm" => "result = cuMemCreate(",
        "pitch" => "result = cuMemAllocPitch_v2(",
        "array" => "result = cuArrayCreate_v2(",
        _ => unreachable!(),
    };
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fake-cuda/c/limit.c")).unwrap();
    source.lines().position(|l| l.contains(call)).unwrap() + 1
}

fn line<'a>(out: &'a str, start: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{out}"))
}

#[test]
fn every_query_path_reports_the_limit_and_nothing_changes_without_it() {
    let (limited, _, _) = run_limit("limit-queries", &["--limit", LIMIT], &["queries"], &[]);
    let free_and_total = format!("{LIMIT_BYTES} {LIMIT_BYTES}");
    for query in [
        "cuMemGetInfo_v2",
        "cuMemGetInfo",
        "dlsym cuMemGetInfo_v2",
        "cuGetProcAddress cuMemGetInfo",
        "cudaMemGetInfo",
    ] {
        assert_eq!(
            line(&limited, &format!("{query} ")),
            format!("{query} {free_and_total}")
        );
    }
    for query in [
        "cuDeviceTotalMem_v2",
        "dlsym cuDeviceTotalMem_v2",
        "cuGetProcAddress cuDeviceTotalMem",
        "cudaGetDeviceProperties totalGlobalMem",
    ] {
        assert_eq!(line(&limited, &format!("{query} ")), format!("{query} {LIMIT_BYTES}"));
    }
    // Without --limit the fake card's 1 GiB shows through every path.
    let (plain, report, _) = run_limit("limit-queries-off", &[], &["queries"], &[]);
    assert_eq!(line(&plain, "cudaMemGetInfo "), "cudaMemGetInfo 1073741824 1073741824");
    assert_eq!(
        line(&plain, "cudaGetDeviceProperties"),
        "cudaGetDeviceProperties totalGlobalMem 1073741824"
    );
    assert_eq!(report["memory_limit"], serde_json::json!([]));
}

#[test]
fn the_first_refused_allocation_is_the_one_past_the_limit_for_every_kind() {
    for kind in ["plain", "runtime", "async", "pool", "vmm", "pitch", "array"] {
        let (out, report, _) = run_limit(
            &format!("limit-{kind}"),
            &["--limit", LIMIT],
            &["refuse", kind, BLOCK, "10"],
            &[],
        );
        // The error a real card gives, errno untouched, and the out-parameter
        // as the real driver leaves it when out of memory (GPU run 111).
        // cuMemCreate and arrays leave their handle as it was (0xdead here).
        let out_after = if kind == "vmm" || kind == "array" {
            "0xdead"
        } else {
            "0x0"
        };
        assert_eq!(
            line(&out, "refused"),
            format!("refused {kind} at 5 error 2 errno 4321 out {out_after}"),
            "{kind}"
        );
        assert_eq!(line(&out, "allocated"), "allocated 5", "{kind}");
        // Freed, the memory is the limit's again.
        assert_eq!(line(&out, "after freeing"), "after freeing 0", "{kind}");
        let verdicts = report["memory_limit"].as_array().unwrap();
        assert_eq!(verdicts.len(), 1, "{kind}");
        let verdict = &verdicts[0];
        assert_eq!(verdict["fits"], false, "{kind}");
        assert_eq!(verdict["limit_bytes"], LIMIT_BYTES, "{kind}");
        let refusals = verdict["refusals"].as_array().unwrap();
        assert_eq!(refusals.len(), 1, "{kind}");
        assert_eq!(verdict["refusals_total"], 1, "{kind}");
        // Pitched rows are padded to 512 bytes: a block takes 50,000,384,
        // and the refusal names what it would have taken.
        let block = if kind == "pitch" { 50_000_384 } else { 50_000_000u64 };
        assert_eq!(refusals[0]["requested_bytes"], block, "{kind}");
        let held = 5 * block;
        assert_eq!(refusals[0]["left_bytes"], LIMIT_BYTES - held, "{kind}");
        assert_eq!(
            refusals[0]["site"],
            format!("allocate (limit.c:{})", call_line(kind)),
            "{kind}"
        );
    }
}

#[test]
fn a_driver_that_cannot_tell_a_devices_uuid_is_limited_by_ordinal() {
    let (out, report, _) = run_limit(
        "limit-no-uuid",
        &["--limit", LIMIT],
        &["refuse", "plain", BLOCK, "10"],
        &[("FAKE_CUDA_NO_UUID", "1")],
    );
    assert_eq!(line(&out, "refused"), "refused plain at 5 error 2 errno 4321 out 0x0");
    assert_eq!(report["memory_limit"][0]["fits"], false);
}

#[test]
fn limit_off_runs_without_one_whatever_the_environment_says() {
    let (out, report, _) = run_limit(
        "limit-off",
        &["--limit", "off"],
        &["queries"],
        &[("CUDATRACE_LIMIT", "256MiB")],
    );
    assert_eq!(line(&out, "cudaMemGetInfo "), "cudaMemGetInfo 1073741824 1073741824");
    assert_eq!(report["memory_limit"], serde_json::json!([]));
}

#[test]
fn managed_memory_is_never_refused() {
    let (out, report, _) = run_limit(
        "limit-managed",
        &["--limit", LIMIT],
        &["refuse", "managed", BLOCK, "10"],
        &[],
    );
    assert_eq!(line(&out, "allocated"), "allocated 10");
    assert!(!out.contains("refused"), "{out}");
    assert_eq!(report["memory_limit"][0]["fits"], true);
    // 476.8 MiB of managed memory under a 256 MiB limit: the verdict says
    // why its peak is past the limit.
    let text = report["memory_limit"][0]["verdict"].as_str().unwrap().to_string();
    assert!(
        text.ends_with("; the peak passed the limit by 220.8 MiB in memory the limit does not refuse (managed memory) or that the driver took after its last reading"),
        "{text}"
    );
}

#[test]
fn below_the_limit_the_program_behaves_as_without_it() {
    let (limited, limited_report, _) = run_limit(
        "limit-below",
        &["--limit", "1GiB"],
        &["refuse", "plain", BLOCK, "5"],
        &[],
    );
    let (plain, plain_report, _) = run_limit("limit-below-off", &[], &["refuse", "plain", BLOCK, "5"], &[]);
    assert_eq!(limited, plain);
    assert_eq!(limited, "allocated 5\nafter freeing 0\n");
    let counts = |r: &Value| {
        (
            r["processes"][0]["devices"][0]["allocations"].clone(),
            r["processes"][0]["devices"][0]["frees"].clone(),
        )
    };
    assert_eq!(counts(&limited_report), counts(&plain_report));
    let verdict = &limited_report["memory_limit"][0];
    assert_eq!(verdict["fits"], true);
    assert_eq!(
        verdict["verdict"],
        "fits: peak 238.4 MiB of the 1.0 GiB limit (limit 238.4 MiB)"
    );
}

#[test]
fn a_graph_allocation_and_a_context_that_would_not_fit_are_refused() {
    let (out, _, _) = run_limit("limit-graph", &["--limit", LIMIT], &["graph", "300000000"], &[]);
    assert_eq!(out, "cuGraphAddMemAllocNode 2\n");
    let (out, _, _) = run_limit("limit-graph-fits", &["--limit", LIMIT], &["graph", "200000000"], &[]);
    assert_eq!(out, "cuGraphAddMemAllocNode 0\n");

    // A shared card: a process holds a 100,000,000-byte context and as
    // much memory; a second context of that size no longer fits 256 MiB.
    let nvml = scratch_dir("limit-context-nvml");
    let env = [
        ("FAKE_NVML_DIR", nvml.to_str().unwrap()),
        ("FAKE_CUDA_SHARED_CARD", "1"),
        ("FAKE_CUDA_CONTEXT_BYTES", "100000000"),
    ];
    let script = format!("{}; {{limit}} context; wait", hold_in_background(100_000_000, 1500));
    let (output, trace) = run_script("limit-context", &script, &env);
    let said = stdout(&output);
    assert_eq!(line(&said, "cuDevicePrimaryCtxRetain"), "cuDevicePrimaryCtxRetain 2");
    let (report, _) = report_json(&trace);
    let refused: Vec<&Value> = report["memory_limit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["fits"] == false)
        .collect();
    assert_eq!(refused.len(), 1, "{report:#}");
    assert_eq!(refused[0]["refusals"][0]["requested_bytes"], 0);
    assert_eq!(refused[0]["refusals"][0]["api"], "cuDevicePrimaryCtxRetain");
}

#[test]
fn processes_of_one_tree_share_the_limit_and_a_killed_one_gives_its_share_back() {
    // The holder keeps 200,000,000 bytes; the second process gets 6 blocks
    // of 10,000,000 beside it; once the holder is killed (SIGKILL: nothing
    // of ours runs in it), a third gets 26.
    let script = format!(
        "{}; {{limit}} refuse plain 10000000 40; kill -9 $h; wait; {{limit}} refuse plain 10000000 40",
        hold_in_background(200_000_000, 30_000)
    );
    let (output, _) = run_script("limit-shared", &script, &[]);
    let out = stdout(&output);
    let said: Vec<&str> = out.lines().filter(|l| l.starts_with("refused")).collect();
    assert_eq!(
        said,
        [
            "refused plain at 6 error 2 errno 4321 out 0x0",
            "refused plain at 26 error 2 errno 4321 out 0x0"
        ]
    );
}

#[test]
fn a_forked_child_shares_its_parents_limit() {
    let (out, report, _) = run_limit("limit-fork", &["--limit", LIMIT], &["fork", "100000000"], &[]);
    assert_eq!(out, "parent 0\nchild refused at 1\nchild exited 0\n");
    // The child's refusal has its verdict, though the child wrote no limit
    // record of its own: the limit is the one its refusal carries.
    let verdicts = report["memory_limit"].as_array().unwrap();
    let fits: Vec<bool> = verdicts.iter().map(|v| v["fits"].as_bool().unwrap()).collect();
    assert_eq!(fits, [true, false], "{verdicts:#?}");
    assert_eq!(verdicts[1]["limit_bytes"], LIMIT_BYTES);
    // Left: the limit less both blocks, as the device's reading before the
    // refusal showed them (the parent's unspent credit is not memory in
    // use). The fake driver's state is copied into the child with the
    // fork, so its reading holds both blocks.
    assert_eq!(verdicts[1]["refusals"][0]["left_bytes"], LIMIT_BYTES - 200_000_000);
}

#[test]
fn a_limit_larger_than_the_card_says_so_and_the_cards_own_refusal_does_not_fit() {
    // The fake card has 1 GiB: the sixth 200,000,000-byte block is the
    // card's to refuse, under a 4 GiB limit.
    let (out, report, _) = run_limit(
        "limit-above-card",
        &["--limit", "4GiB"],
        &["refuse", "plain", "200000000", "10"],
        &[],
    );
    assert_eq!(
        line(&out, "refused"),
        "refused plain at 5 error 2 errno 4321 out 0xdead"
    );
    let verdict = &report["memory_limit"][0];
    assert_eq!(verdict["fits"], false);
    let expected = format!(
        "did not fit: the card itself refused 1 allocation, at allocate (limit.c:{}) (asked 190.7 MiB with 70.3 MiB free of 1.0 GiB); the 4.0 GiB limit is larger than this card (1.0 GiB), which held the job to its own size",
        call_line("plain")
    );
    assert_eq!(verdict["verdict"], expected);
}

#[test]
fn figures_that_round_alike_are_given_exactly() {
    // One byte more than the limit, refused with the whole limit left.
    let (_, report, _) = run_limit(
        "limit-exact",
        &["--limit", LIMIT],
        &["refuse", "plain", "268435457", "2"],
        &[],
    );
    let text = report["memory_limit"][0]["verdict"].as_str().unwrap().to_string();
    assert!(
        text.ends_with("(asked 268435457 B with 268435456 B left of the 256.0 MiB limit)"),
        "{text}"
    );
}

#[test]
fn threads_that_ended_leave_nothing_counted() {
    // 256 MiB holds exactly 256 blocks of 1 MiB: the 257th is refused
    // whether or not 64 threads allocated and freed before and exited.
    let (out, _, _) = run_limit("limit-threads", &["--limit", LIMIT], &["threads", "64", "1048576"], &[]);
    assert_eq!(line(&out, "refused"), "refused plain at 256 error 2 errno 4321 out 0x0");
    let (out, _, _) = run_limit(
        "limit-no-threads",
        &["--limit", LIMIT],
        &["threads", "0", "1048576"],
        &[],
    );
    assert_eq!(line(&out, "refused"), "refused plain at 256 error 2 errno 4321 out 0x0");
}

#[test]
fn each_device_has_the_whole_limit() {
    let script = format!(
        "{}; {{limit}} refuse plain 100000000@1 5; wait",
        hold_in_background(200_000_000, 800)
    );
    let (output, trace) = run_script("limit-devices", &script, &[]);
    assert_eq!(
        line(&stdout(&output), "refused"),
        "refused plain at 2 error 2 errno 4321 out 0x0"
    );
    let (report, _) = report_json(&trace);
    let mut devices: Vec<u64> = report["memory_limit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["device"].as_u64().unwrap())
        .collect();
    devices.sort();
    assert_eq!(devices, [0, 1]);
}

#[test]
fn the_report_opens_with_the_verdict_and_marks_each_refusal() {
    let (_, _, trace) = run_limit(
        "limit-text",
        &["--limit", LIMIT],
        &["refuse", "plain", BLOCK, "10"],
        &[],
    );
    let output = cudatrace(&["report"]).arg(&trace).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[1], "memory limit:");
    let verdict = format!(
        ", GPU 0: did not fit: 1 allocation refused, at allocate (limit.c:{}) (asked 47.7 MiB with 17.6 MiB left of the 256.0 MiB limit)",
        call_line("plain")
    );
    assert!(lines[2].ends_with(&verdict), "{}", lines[2]);
    assert_eq!(
        text.matches("    REFUSED BY THE MEMORY LIMIT: cuMemAlloc_v2 asked for 47.7 MiB with 17.6 MiB left of the 256.0 MiB limit\n")
            .count(),
        1,
        "{text}"
    );
    assert!(!text.contains("OUT OF MEMORY"), "{text}");
}

#[test]
fn a_limit_that_is_no_size_is_refused_in_one_line() {
    for (args, env, said) in [
        (vec!["--limit", "lots"], None, "'lots' is not a size"),
        (vec!["--limit", "1000"], None, "'1000' is too small for a GPU"),
        (vec!["--limit", "-5"], None, "'-5' is not a size"),
        (vec![], Some("lots"), "CUDATRACE_LIMIT=lots: 'lots' is not a size"),
    ] {
        let mut command = cudatrace_run();
        command.args(&args).args(["--", "/bin/true"]);
        if let Some(value) = env {
            command.env("CUDATRACE_LIMIT", value);
        }
        let output = command.stdin(Stdio::null()).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let text = stderr(&output);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains(said), "{text}");
    }
    // The library, preloaded by hand with a bad value, says so and runs unlimited.
    let child = Command::new(fake_cuda::program("limit"))
        .arg("queries")
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("LD_PRELOAD", tracer_library())
        .env("CUDATRACE_LIMIT", "lots")
        .env("CUDATRACE_DIR", scratch_dir("limit-bad-env"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let out = stdout(&output);
    assert_eq!(line(&out, "cudaMemGetInfo "), "cudaMemGetInfo 1073741824 1073741824");
    assert_eq!(
        stderr(&output),
        "cudatrace: CUDATRACE_LIMIT=lots is not a size (such as 24GiB); running without a limit\n"
    );
}

/// `torch_like` (PyTorch 2.11's layout) SCENARIO under `--limit LIMIT`: the
/// program's output and the report's verdicts.
fn torch_under_limit(label: &str, scenario: &str, limit: &str) -> (String, Value) {
    let (mut command, trace) = run_program(label, &fake_cuda::program("torch_like"), &["--limit", limit]);
    command.arg(fake_cuda::torch_library("211")).arg(scenario);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (report, _) = report_json(&trace);
    (stdout(&output), report["memory_limit"].clone())
}

#[test]
fn refusals_pytorch_recovers_from_by_freeing_its_cache_still_fit() {
    // 22 MiB held, 20 of them cached; 24 MiB more is refused under 40 MiB
    // until PyTorch gives its cache back and asks again.
    let (out, verdicts) = torch_under_limit("limit-torch-recover", "limit_recover", "40MiB");
    assert_eq!(line(&out, "limit_recover"), "limit_recover granted=1");
    let verdict = &verdicts[0];
    assert_eq!(verdict["fits"], true);
    assert_eq!(verdict["recovered_by_pytorch"], true);
    assert_eq!(verdict["refusals"].as_array().unwrap().len(), 1);
    assert_eq!(verdict["refusals"][0]["requested_bytes"], 24u64 << 20);
    let text = verdict["verdict"].as_str().unwrap();
    assert!(text.starts_with("fits: peak "), "{text}");
    assert!(
        text.contains(" of the 40.0 MiB limit")
            && text.contains(", after PyTorch freed its cache when 1 allocation was refused by the limit (at "),
        "{text}"
    );

    // Asked for more than the limit holds, PyTorch raises: it did not fit.
    let (out, verdicts) = torch_under_limit("limit-torch-oom", "oom", "40MiB");
    assert_eq!(line(&out, "oom"), "oom null=1");
    let verdict = &verdicts[0];
    assert_eq!(verdict["fits"], false);
    assert_eq!(verdict["recovered_by_pytorch"], false);
    // Asked once, and again after the cache was given back.
    assert_eq!(verdict["refusals"].as_array().unwrap().len(), 2);
    assert!(verdict["verdict"]
        .as_str()
        .unwrap()
        .starts_with("did not fit: 2 allocations refused, the first at "));
}

#[test]
fn the_html_page_opens_with_the_verdict_and_marks_the_refusal() {
    let (_, report, trace) = run_limit(
        "limit-html",
        &["--limit", LIMIT],
        &["refuse", "plain", BLOCK, "10"],
        &[],
    );
    let page = html_page(&trace);
    let verdict = report["memory_limit"][0]["verdict"].as_str().unwrap();
    assert!(page.contains("<h2>Memory limit</h2>"), "no verdict section");
    assert!(page.contains(&format!(", GPU 0: {verdict}</li>")), "{verdict}");
    assert_eq!(
        page.matches("cuMemAlloc_v2 (refused by the memory limit: free is what it had left, total the limit)")
            .count(),
        1
    );
}

/// `limit ARGS` preloaded by hand with `CUDATRACE_LIMIT` and the spool
/// folder `dir` (no collector): its output, status and stderr.
fn preloaded(
    limit: &str,
    dir: &std::path::Path,
    args: &[&str],
    wrapper: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut command = Command::new(fake_cuda::program("limit"));
    command
        .args(args)
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("LD_PRELOAD", tracer_library())
        .env("CUDATRACE_LIMIT", limit)
        .env("CUDATRACE_DIR", dir)
        .env_remove("CUDATRACE_ROOT_PID")
        .env_remove("CUDATRACE_COLLECTOR")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let mut command = if wrapper.is_empty() {
        command
    } else {
        wrapped(wrapper, &command)
    };
    command.output().unwrap()
}

#[test]
fn a_full_spool_disk_or_a_file_size_limit_keeps_the_limit_per_process_and_never_kills_the_job() {
    // The ledger was sized with ftruncate: on a full disk its first store
    // raised SIGBUS (rc 135), and past `ulimit -f` ftruncate raised SIGXFSZ
    // (rc 153). Now each process keeps the limit to itself.
    let expected = "refused plain at 5 error 2 errno 4321 out 0x0";
    let dir = scratch_dir("limit-full-disk");
    let full = dir.join("full");
    std::fs::create_dir(&full).unwrap();
    let script = r#"mount -t tmpfs -o size=1m tmpfs "$2" && { dd if=/dev/zero of="$2/fill" bs=4096 2>/dev/null; true; } && shift 2 && exec "$@""#;
    let output = preloaded(
        LIMIT,
        &full,
        &["refuse", "plain", BLOCK, "10"],
        &["unshare", "-rm", "sh", "-c", script, "sh", "1m", full.to_str().unwrap()],
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(line(&stdout(&output), "refused"), expected);

    let spools = dir.join("spools");
    let output = preloaded(
        LIMIT,
        &spools,
        &["refuse", "plain", BLOCK, "10"],
        &["prlimit", "--fsize=102400", "--"],
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(line(&stdout(&output), "refused"), expected);
}

#[test]
fn idle_threads_credit_never_refuses_what_the_device_has_room_for() {
    // 64 threads each allocated and freed 4 KiB and wait, alive, holding
    // their credit: one allocation of all but 1 MiB of the limit fits.
    let (out, _, _) = run_limit(
        "limit-idle",
        &["--limit", LIMIT],
        &["idle", "64", "4096", &(LIMIT_BYTES - (1 << 20)).to_string()],
        &[],
    );
    assert_eq!(out, "big 0\n");
    // 1,000 threads under 64 MiB: none of their 4 KiB allocations fails.
    let (out, _, _) = run_limit(
        "limit-idle-many",
        &["--limit", "64MiB"],
        &["idle", "1000", "4096", "4096"],
        &[],
    );
    assert_eq!(out, "big 0\n");
}

#[test]
fn idle_threads_of_several_processes_leave_room_for_another() {
    // Two processes of 300 idle threads each hold credit while a third
    // asks for 250,000,000 of the 268,435,456 bytes; the card is one (as a
    // real GPU's reading is, across processes).
    let nvml = scratch_dir("limit-idle-procs-nvml");
    let hold = |n: u32| {
        format!(
            "f{n}=$(mktemp); {{limit}} idle 300 4096 4096 hold > $f{n} & h{n}=$!; until grep -q idle $f{n}; do sleep 0.02; done"
        )
    };
    let script = format!(
        "{}; {}; {{limit}} refuse plain 250000000 1; kill $h1 $h2; wait",
        hold(1),
        hold(2)
    );
    let (output, _) = run_script(
        "limit-idle-procs",
        &script,
        &[
            ("FAKE_NVML_DIR", nvml.to_str().unwrap()),
            ("FAKE_CUDA_SHARED_CARD", "1"),
        ],
    );
    let out = stdout(&output);
    assert_eq!(line(&out, "allocated"), "allocated 1", "{out}");
    assert!(!out.contains("refused"), "{out}");
    // And the limit still holds across them: a fourth process asking more
    // than what the card has left under the limit is refused.
    let script = format!(
        "{}; {}; {{limit}} refuse plain 100000000 1; kill $h1 $h; wait",
        hold(1),
        hold_in_background(200_000_000, 30_000)
    );
    let (output, _) = run_script(
        "limit-idle-procs-held",
        &script,
        &[
            ("FAKE_NVML_DIR", nvml.to_str().unwrap()),
            ("FAKE_CUDA_SHARED_CARD", "1"),
        ],
    );
    assert_eq!(
        line(&stdout(&output), "refused"),
        "refused plain at 0 error 2 errno 4321 out 0x0"
    );
}

#[test]
fn threads_of_a_program_holding_every_pthread_key_give_their_credit_back() {
    let (out, _, _) = run_limit(
        "limit-keys",
        &["--limit", "64MiB"],
        &["keys", "1000", "4096", &(60u64 << 20).to_string()],
        &[],
    );
    assert_eq!(out, "keys taken yes\nbig 0\n");
}

#[test]
fn an_image_that_execs_leaves_the_limit_its_share_and_a_failed_exec_keeps_it() {
    // 600 MiB held, then exec: the shell's child gets 600 MiB of 1 GiB.
    let dir = scratch_dir("limit-exec");
    let trace = dir.join("run.trace");
    let limit = fake_cuda::program("limit");
    let size = (600u64 << 20).to_string();
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .args(["--limit", "1GiB", "--"])
        .arg(&limit)
        .args(["exec", &size, "/bin/sh", "-c"])
        .arg(format!("{} refuse plain {size} 1", limit.display()))
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "hold 0\nallocated 1\nafter freeing 0\n");
    // An exec that fails returns: the 200,000,000 held still count, so
    // another 200,000,000 is refused under 256 MiB.
    let (out, _, _) = run_limit(
        "limit-exec-fails",
        &["--limit", LIMIT],
        &["exec", "200000000", "/nonexistent/program"],
        &[],
    );
    assert_eq!(out, "hold 0\nexec failed 2\nafter 2\n");
}

/// The ledger's layout (src/system/shared_ledger.rs), for planting one.
const LEDGER_BYTES: usize = 64 + 64 + 16 * 128 + 1024 * 448;

/// A ledger file with every one of its 16 device entries taken by devices
/// the fake driver does not have, and each counting `counted` bytes.
fn planted_ledger(path: &std::path::Path, counted: u64) {
    let mut bytes = vec![0u8; LEDGER_BYTES];
    bytes[..8].copy_from_slice(b"cdtlimt2");
    for device in 0..16 {
        let at = 128 + device * 128;
        bytes[at..at + 8].copy_from_slice(&2u64.to_le_bytes());
        bytes[at + 8..at + 16].copy_from_slice(&(0xabcd_0000 + device as u64).to_le_bytes());
        bytes[at + 24..at + 32].copy_from_slice(&counted.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_ledger_planted_by_another_user_or_with_no_room_keeps_the_limit_per_process_and_says_so() {
    use std::os::unix::fs::PermissionsExt;
    let expected = "refused plain at 5 error 2 errno 4321 out 0x0";
    for (label, owner, mode, why) in [
        ("limit-planted-other-user", Some(65534), 0o600, 3),
        ("limit-planted-readable", None, 0o644, 3),
        ("limit-planted-no-room", None, 0o600, 7),
    ] {
        let dir = scratch_dir(label);
        let spools = dir.join("shared");
        std::fs::create_dir(&spools).unwrap();
        let ledger = spools.join("memory-limit.ledger");
        planted_ledger(&ledger, 0);
        std::fs::set_permissions(&ledger, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&ledger, Some(uid), Some(uid)).unwrap();
        }
        let output = preloaded(LIMIT, &spools, &["refuse", "plain", BLOCK, "10"], &[], &[]);
        assert_eq!(output.status.code(), Some(0), "{label}: {}", stderr(&output));
        assert_eq!(line(&stdout(&output), "refused"), expected, "{label}");
        // The planted file is left as it was.
        assert_eq!(std::fs::read(&ledger).unwrap()[128 + 24..128 + 32], [0; 8], "{label}");
        // The process said why it kept the limit to itself: in its limit record.
        let dump = cudatrace(&["dump", "--dir"]).arg(&spools).output().unwrap();
        let text = stdout(&dump);
        let record = text
            .lines()
            .find(|l| l.contains("\"op\":\"memory-limit\""))
            .unwrap_or_else(|| panic!("{label}: no limit record in\n{text}"));
        assert!(record.contains(&format!("\"arg1\":{why},")), "{label}: {record}");
        // And the report says it, from the collected spool.
        let trace = dir.join("collected.trace");
        let collect = cudatrace(&["collect"])
            .arg(&spools)
            .arg("-o")
            .arg(&trace)
            .output()
            .unwrap();
        assert_eq!(collect.status.code(), Some(0), "{label}: {}", stderr(&collect));
        let (report, _) = report_json(&trace);
        let reason = if why == 3 {
            "the ledger file found in the spool folder is another user's or open to others"
        } else {
            "every device entry of the tree's ledger was taken"
        };
        assert_eq!(report["memory_limit"][0]["kept_alone"], reason, "{label}");
        let verdict = report["memory_limit"][0]["verdict"].as_str().unwrap();
        assert!(
            verdict.ends_with(&format!(
                "; this process kept the limit to itself ({reason}): the job's other processes did not count against it"
            )),
            "{label}: {verdict}"
        );
    }
}

#[test]
fn a_thread_with_a_cancellation_pending_is_cancelled_where_it_would_be_without_us() {
    // Its first CUDA call created the spool (open is a cancellation point)
    // on a spare stack: glibc's forced unwind aborted the program (rc 134).
    // Under the limit, the ledger's open and /proc reads too.
    for options in [&[][..], &["--limit", LIMIT][..]] {
        let (out, _, _) = run_limit("limit-cancel", options, &["cancel", "1048576"], &[]);
        assert_eq!(out, "alloc 0\ncancelled yes\n", "{options:?}");
    }
    let untraced = Command::new(fake_cuda::program("limit"))
        .args(["cancel", "1048576"])
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .output()
        .unwrap();
    assert_eq!(stdout(&untraced), "alloc 0\ncancelled yes\n");
}

/// `torch_like limit_library` under a 40 MiB limit: PyTorch recovers from
/// one refusal by freeing its cache, then a cuBLAS-like library's own
/// allocation is refused and the program does what `after` says
/// (`FAKE_TORCH_AFTER_FAILURE`). With `by_hand`, the program runs under a
/// plain `LD_PRELOAD` (no `cudatrace run` to see how it ended). Returns
/// (the program's exit code, the verdict of its first image).
fn library_refused(label: &str, after: &str, by_hand: bool) -> (Option<i32>, Value) {
    let (mut command, trace) = if by_hand {
        let dir = scratch_dir(label);
        let trace = dir.join("run.trace");
        let mut command = Command::new(fake_cuda::program("torch_like"));
        command
            .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
            .env("LD_PRELOAD", tracer_library())
            .env("CUDATRACE_LIMIT", "40MiB")
            .env_remove("CUDATRACE_DIR")
            .env("CUDATRACE_OUT", &trace)
            .env("CUDATRACE_CLI", cli())
            .env("TMPDIR", &dir);
        (command, trace)
    } else {
        run_program(label, &fake_cuda::program("torch_like"), &["--limit", "40MiB"])
    };
    command
        .arg(fake_cuda::torch_library("211"))
        .arg("limit_library")
        .env("FAKE_TORCH_AFTER_FAILURE", after);
    let output = command.output().unwrap();
    assert_eq!(
        line(&stdout(&output), "limit_library"),
        "limit_library granted=1 blas=3"
    );
    let report = if by_hand {
        finished_trace(&trace)
    } else {
        report_json(&trace).0
    };
    // An image it exec'd that recorded has a verdict of its own, after.
    let images = report["processes"].as_array().unwrap().len();
    let verdicts = report["memory_limit"].as_array().unwrap();
    assert_eq!(verdicts.len(), images, "{verdicts:?}");
    (output.status.code(), verdicts[0].clone())
}

#[test]
fn a_process_that_ends_badly_after_a_refusal_did_not_fit_and_the_verdict_names_the_library() {
    // What every ending shares: PyTorch's refusal (24 MiB, recovered from),
    // then the library's (32 MiB), which the verdict names.
    let refusals = |verdict: &Value| -> String {
        let refusals = verdict["refusals"].as_array().unwrap();
        assert_eq!(refusals.len(), 2, "{refusals:?}");
        assert_eq!(refusals[0]["requested_bytes"], 24u64 << 20);
        assert_eq!(refusals[1]["requested_bytes"], 32u64 << 20);
        assert_eq!(verdict["recovered_by_pytorch"], true);
        assert_eq!(verdict["failed_library"], "libcublas_fake.so");
        format!(
            "after 2 allocations were refused by the limit, the last made by libcublas_fake.so at {} \
             (asked 32.0 MiB with {} left of the 40.0 MiB limit)",
            refusals[1]["site"].as_str().unwrap(),
            human_bytes(refusals[1]["left_bytes"].as_u64().unwrap())
        )
    };
    let exec_recording = format!("exec {} exec-chain-b", fake_cuda::program("scenarios").display());
    for (after, code, ended) in [
        ("exit", Some(1), "the process exited 1"),
        ("kill", Some(137), "the process was killed by signal 9 (status 137)"),
        // It execs a program that records nothing: the process's status is
        // the one its last traced image is told with.
        ("exec /bin/false", Some(1), "the process exited 1"),
        // It execs a program that records, then execs `sh -c 'exit 7'`:
        // the status is the process's, at the end of its exec chain.
        (&exec_recording, Some(7), "the process exited 7"),
    ] {
        let label = format!("limit-library-{}", after.split(' ').next().unwrap());
        let (status, verdict) = library_refused(&label, after, false);
        assert_eq!(status, code, "{after}");
        assert_eq!(verdict["fits"], false, "{after}");
        assert_eq!(verdict["exit_status"], code.unwrap(), "{after}");
        assert_eq!(
            verdict["verdict"].as_str().unwrap(),
            format!("did not fit: {ended} {}", refusals(&verdict)),
            "{after}"
        );
    }

    // Killed with no `cudatrace run` to see it: how it ended is not known.
    let (status, verdict) = library_refused("limit-library-by-hand", "kill", true);
    assert_eq!(status, None);
    assert_eq!(verdict["fits"], Value::Null);
    assert_eq!(verdict["exit_status"], Value::Null);
    assert_eq!(
        verdict["verdict"].as_str().unwrap(),
        format!(
            "not known whether it fits: the process's exit status was not recorded, {}",
            refusals(&verdict)
        )
    );

    // It went on and exited 0: it fits, as on a card of that size.
    let (status, verdict) = library_refused("limit-library-went-on", "on", false);
    assert_eq!(status, Some(0));
    assert_eq!(verdict["fits"], true);
    assert_eq!(verdict["exit_status"], 0);
    let text = verdict["verdict"].as_str().unwrap();
    let first_site = verdict["refusals"][0]["site"].as_str().unwrap();
    assert!(text.starts_with("fits: peak "), "{text}");
    assert!(
        text.ends_with(&format!(
            ", after PyTorch freed its cache when 2 allocations were refused by the limit (the first at {first_site})"
        )),
        "{text}"
    );
}

#[test]
fn the_recording_line_says_the_limit_as_it_was_read() {
    // `24gb` counts in 1000s: fewer bytes than 24 GiB, said before the job
    // runs, not first in the report.
    for (options, env, limited) in [
        (
            vec!["--limit", "24gb"],
            None,
            ", every GPU limited to 24,000,000,000 bytes (22.4 GiB)",
        ),
        (
            vec!["--limit", "24GiB"],
            None,
            ", every GPU limited to 25,769,803,776 bytes (24.0 GiB)",
        ),
        (
            vec![],
            Some("256MiB"),
            ", every GPU limited to 268,435,456 bytes (256.0 MiB)",
        ),
        (vec!["--limit", "off"], Some("256MiB"), ""),
        (vec![], None, ""),
    ] {
        let (mut command, trace) = run_program("limit-recording-line", &fake_cuda::program("limit"), &options);
        command.arg("queries").env_remove("CUDATRACE_LIMIT");
        if let Some(value) = env {
            command.env("CUDATRACE_LIMIT", value);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let text = stderr(&output);
        assert_eq!(
            text.lines().next().unwrap(),
            format!(
                "cudatrace: recording `{} queries` and every process it starts into {}{limited}",
                fake_cuda::program("limit").display(),
                trace.display()
            ),
            "{options:?} {env:?}"
        );
    }
}

/// The line of scenarios.c where `scenario_oom` asks for more than the card.
fn too_big_line() -> usize {
    let source =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fake-cuda/c/scenarios.c")).unwrap();
    source
        .lines()
        .position(|l| l.contains("cudaMalloc(&too_big, 1 << 20)"))
        .unwrap()
        + 1
}

#[test]
fn the_answers_open_the_report_and_the_page_in_order() {
    // Under the limit, one program is refused by it, another by a card
    // smaller than the limit, and a third (fake PyTorch's training loop)
    // leaks a MiB a step: the limit's verdicts, then the failures in time
    // order, then what keeps growing open the report, before the ranks
    // and every process's details.
    let scenarios = fake_cuda::program("scenarios");
    let script = format!(
        "{{limit}} refuse plain {BLOCK} 10; FAKE_CUDA_CAPACITY=1048576 {} oom; {} {} training",
        scenarios.display(),
        fake_cuda::program("torch_like").display(),
        fake_cuda::torch_library("211").display()
    );
    let (_, trace) = run_script("limit-answers-first", &script, &[("FAKE_TORCH_LEAK", "1")]);
    let (report, _) = report_json(&trace);
    let pid_of = |program: &str| -> u64 {
        let processes = report["processes"].as_array().unwrap();
        let process = processes
            .iter()
            .find(|p| p["argv"][0].as_str().unwrap().ends_with(program))
            .unwrap_or_else(|| panic!("no {program} in {report:#}"));
        process["pid"].as_u64().unwrap()
    };
    let (refused, card, leaking) = (pid_of("/limit"), pid_of("/scenarios"), pid_of("/torch_like"));
    let text = stdout(&cudatrace(&["report"]).arg(&trace).output().unwrap());
    let headings: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(' '))
        .take(6)
        .collect();
    assert!(headings[0].starts_with("trace of `/bin/sh -c "), "{text}");
    assert_eq!(headings[1], "memory limit:", "{text}");
    assert_eq!(headings[2], "out of memory:", "{text}");
    assert_eq!(
        headings[3],
        format!(
            "pid {leaking} {} {} training: 8 steps; growth measured at the ends of steps 1 to 7 (the last step has no end)",
            fake_cuda::program("torch_like").display(),
            fake_cuda::torch_library("211").display()
        ),
        "{text}"
    );
    assert_eq!(
        headings[4], "every rank: 3 rows on 1 host, one row per process and device",
        "{text}"
    );
    assert!(headings[5].starts_with("where the memory went, "), "{text}");
    // The failures, each with its process, device, moment and call site.
    let failures: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "out of memory:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let expected = [
        (
            refused,
            format!(
                "REFUSED BY THE MEMORY LIMIT: cuMemAlloc_v2 asked for 47.7 MiB with 17.6 MiB left of the 256.0 MiB limit, at allocate (limit.c:{})",
                call_line("plain")
            ),
        ),
        (
            card,
            format!(
                "OUT OF MEMORY: cudaMalloc asked for 1.0 MiB with 512.0 KiB free of 1.0 MiB, at scenario_oom (scenarios.c:{})",
                too_big_line()
            ),
        ),
    ];
    assert_eq!(failures.len(), expected.len(), "{text}");
    for (line, (pid, said)) in failures.iter().zip(&expected) {
        let (when, what) = line.split_once(": ").unwrap();
        assert!(when.starts_with(&format!("  pid {pid}, GPU 0, at ")), "{line}");
        assert!(when.ends_with(" ms"), "{line}");
        assert_eq!(what, said);
    }

    // The page opens with the same answers, in the same order.
    let page = html_page(&trace);
    let at = |heading: &str| {
        page.find(&format!("<h2>{heading}</h2>"))
            .unwrap_or_else(|| panic!("no {heading}"))
    };
    let order = [
        "Memory limit",
        "Out of memory",
        "What keeps growing",
        "Every rank",
        "Processes",
    ]
    .map(at);
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    let items: Vec<&str> = page[order[1]..order[2]]
        .split("<li>")
        .skip(1)
        .map(|item| item.split("</li>").next().unwrap())
        .collect();
    assert_eq!(items.len(), 2);
    for (item, (pid, said)) in items.iter().zip(&expected) {
        assert!(item.starts_with(&format!("pid {pid}, GPU 0, at ")), "{item}");
        assert!(item.ends_with(said.as_str()), "{item}");
    }
    assert_eq!(page.matches("<table class=\"growing\">").count(), 1);
    assert!(page.find("<table class=\"growing\">").unwrap() < order[3]);
}
