//! The capture layer, end to end: real programs over the fake driver, run
//! with `libcudatrace.so` preloaded, and their spools decoded.

mod support;

use cudatrace_events::{Api, Kind, Op, Spool, SpoolReader};
use std::collections::{HashMap, HashSet};
use support::*;

fn single_spool(run: &TracedRun) -> &Spool {
    assert!(
        run.output.status.success(),
        "program failed: {}\n{}",
        run.stdout,
        String::from_utf8_lossy(&run.output.stderr)
    );
    assert_eq!(run.spools.len(), 1, "expected one spool, got {:?}", run.spool_paths);
    &run.spools[0]
}

/// Sequence numbers of the memory events and the stack records, in order.
fn all_seqs(spool: &Spool, stack_records: &[cudatrace_events::Event]) -> Vec<u64> {
    let mut seqs: Vec<u64> = spool.events.iter().chain(stack_records).map(|e| e.seq).collect();
    seqs.sort_unstable();
    seqs
}

/// No record lost or damaged: every sequence number handed out is a memory
/// event or one of the `stack_records` (stack nodes and blobs).
fn assert_clean(spool: &Spool, stack_records: usize) {
    assert_eq!(spool.unwritten_records, 0);
    assert_eq!(spool.damaged_records, 0);
    assert_eq!(spool.header.unknown_frees, 0);
    assert_eq!(spool.header.registry_overflows, 0);
    assert_eq!(spool.header.dropped_records, 0);
    assert_eq!(spool.header.reserved_seqs, (spool.events.len() + stack_records) as u64);
}

#[test]
fn runtime_calls_are_recorded_once_each_under_their_runtime_names() {
    let run = run_traced("runtime", program("scenarios", &["runtime"]));
    let spool = single_spool(&run);
    let expected = expected_events(&run.stdout);
    assert_eq!(expected.len(), 24);
    assert_eq!(recorded_events(spool), expected);
    assert_clean(spool, run.stack_records[0].len());
    assert_eq!(field(&run.stdout, "errno", 0), "4242", "the first hook changed errno");
    assert_eq!(spool.process().argv[1], "runtime");
    assert_eq!(
        spool.process().pid,
        run.output.status.code().map(|_| spool.process().pid).unwrap()
    );
    assert_eq!(spool.events.len(), 24);
    assert_eq!(
        all_seqs(spool, &run.stack_records[0]),
        (0..spool.header.reserved_seqs).collect::<Vec<u64>>()
    );
    // Pitched allocations carry the pitch the driver chose.
    let pitched = spool.events.iter().find(|e| e.api == Api::CudaMallocPitch).unwrap();
    assert_eq!(pitched.arg1, 1024);
    assert_eq!(pitched.size, 10240);
    // The pool allocation records its pool.
    let pooled = spool
        .events
        .iter()
        .find(|e| e.api == Api::CudaMallocFromPoolAsync)
        .unwrap();
    assert_eq!(pooled.arg1, 0x5678);
}

#[test]
fn a_statically_linked_runtime_is_seen_through_cu_get_proc_address() {
    let run = run_traced("static", program("scenarios_static", &["runtime"]));
    let spool = single_spool(&run);
    let expected = expected_events(&run.stdout);
    assert_eq!(expected.len(), 24);
    assert!(expected[0].starts_with("E alloc cuMemAlloc_v2 device "));
    assert_eq!(recorded_events(spool), expected);
    assert_clean(spool, run.stack_records[0].len());
}

#[test]
fn direct_driver_calls_of_every_kind_are_recorded_and_results_kept() {
    let run = run_traced("driver", program("scenarios", &["driver"]));
    let spool = single_spool(&run);
    let expected = expected_events(&run.stdout);
    assert_eq!(expected.len(), 21);
    assert_eq!(recorded_events(spool), expected);
    assert_clean(spool, run.stack_records[0].len());
    // A failing free returns the driver's error and records nothing.
    assert_eq!(field(&run.stdout, "status", 1), "1");
    // The 32-bit entry point's address fits in 32 bits.
    let small = spool.events.iter().find(|e| e.api == Api::CuMemAlloc).unwrap();
    assert!(small.address < 1 << 32);
}

#[test]
fn lookups_through_dlsym_get_hooks_and_other_names_pass_through() {
    let run = run_traced("dlopen", program("scenarios", &["dlopen"]));
    let spool = single_spool(&run);
    assert_eq!(recorded_events(spool), expected_events(&run.stdout));
    assert_eq!(spool.events.len(), 2);
    assert_eq!(field(&run.stdout, "devices", 0), "2");
    assert_eq!(field(&run.stdout, "missing", 0), "null");
    assert_eq!(field(&run.stdout, "missing", 1), "error");
}

#[test]
fn the_driver_looking_itself_up_gets_its_own_functions() {
    let run = run_traced("self-lookup", program("scenarios", &["driver-self-lookup"]));
    let spool = single_spool(&run);
    assert_eq!(field(&run.stdout, "self-lookup-first", 0), "1");
    assert_eq!(field(&run.stdout, "self-lookup-later", 0), "1");
    assert_eq!(spool.events.len(), 1);
}

#[test]
fn vmm_handle_mapped_twice_is_one_allocation_and_two_mappings() {
    let run = run_traced("vmm", program("scenarios", &["vmm"]));
    let spool = single_spool(&run);
    assert_eq!(recorded_events(spool), expected_events(&run.stdout));
    let handle = hex(field(&run.stdout, "handle", 0));
    let allocations: Vec<_> = spool.events.iter().filter(|e| e.op == Op::Alloc).collect();
    assert_eq!(allocations.len(), 1);
    assert_eq!(
        (allocations[0].kind, allocations[0].address),
        (Kind::VmmPhysical, handle)
    );
    let maps: Vec<_> = spool.events.iter().filter(|e| e.op == Op::Map).collect();
    assert_eq!(maps.len(), 2);
    for map in maps {
        assert_eq!((map.arg1, map.arg2), (handle, 0));
    }
}

#[test]
fn per_thread_stream_entry_points_keep_their_abi_and_stream() {
    let run = run_traced("ptsz", program("scenarios", &["ptsz"]));
    let spool = single_spool(&run);
    assert_eq!(field(&run.stdout, "distinct", 0), "1");
    assert_eq!(recorded_events(spool), expected_events(&run.stdout));
    assert_eq!(spool.events.len(), 6);
    let pooled = spool
        .events
        .iter()
        .find(|e| e.api == Api::CuMemAllocFromPoolAsyncPtsz)
        .unwrap();
    assert_eq!(pooled.arg1, 0x77);
}

#[test]
fn out_of_memory_is_recorded_with_the_request_and_device_free_and_total() {
    let mut command = program("scenarios", &["driver-oom"]);
    command.env("FAKE_CUDA_CAPACITY", "1048576");
    let run = run_traced("oom", command);
    let spool = single_spool(&run);
    assert_eq!(recorded_events(spool), expected_events(&run.stdout));
    let statuses: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("status ")).collect();
    assert_eq!(
        statuses,
        ["status cudaMalloc 2", "status cuMemAlloc_v2 2", "status cuMemCreate 2"]
    );
    let ooms: Vec<_> = spool.events.iter().filter(|e| e.op == Op::Oom).collect();
    assert_eq!(ooms.len(), 3);
    for oom in ooms {
        assert_eq!(
            (oom.arg1, oom.arg2),
            (524_288, 1_048_576),
            "free and total bytes of {oom:?}"
        );
    }
}

#[test]
fn thirty_two_threads_lose_and_double_nothing() {
    let run = run_traced("threads", program("scenarios", &["threads"]));
    let spool = single_spool(&run);
    assert_clean(spool, run.stack_records[0].len());
    assert_eq!(spool.events.len(), 2 * 32 * 5000);
    assert_eq!(
        all_seqs(spool, &run.stack_records[0]),
        (0..spool.header.reserved_seqs).collect::<Vec<u64>>()
    );
    // Replaying in sequence order, every free must find its allocation live and
    // every allocation must find its address free, even though addresses are
    // reused across threads the moment they are freed.
    let mut live = HashSet::new();
    let mut reused = 0;
    let mut seen = HashSet::new();
    for event in &spool.events {
        assert_eq!(event.size, 4096);
        match event.op {
            Op::Alloc => {
                assert!(live.insert(event.address), "address live twice at seq {}", event.seq);
                if !seen.insert(event.address) {
                    reused += 1;
                }
            }
            Op::Free => assert!(
                live.remove(&event.address),
                "free of a dead address at seq {}",
                event.seq
            ),
            other => panic!("unexpected {other}"),
        }
    }
    assert!(live.is_empty());
    assert!(
        reused > 100_000,
        "the fake driver reuses addresses; only {reused} reuses seen"
    );
    let threads: HashSet<u32> = spool.events.iter().map(|e| e.tid).collect();
    assert_eq!(threads.len(), 32);
}

#[test]
fn a_forked_child_writes_its_own_spool_under_its_own_pid() {
    let run = run_traced("fork", program("scenarios", &["fork"]));
    assert!(run.output.status.success(), "{}", run.stdout);
    assert_eq!(run.spools.len(), 2, "{:?}", run.spool_paths);
    let parent_pid: u32 = field(&run.stdout, "parent", 0).parse().unwrap();
    let child_pid: u32 = field(&run.stdout, "child", 0).parse().unwrap();
    let child_block = hex(field(&run.stdout, "child", 1));
    let by_pid: HashMap<u32, &Spool> = run.spools.iter().map(|s| (s.process().pid, s)).collect();
    let parent = by_pid[&parent_pid];
    let child = by_pid[&child_pid];
    assert_eq!(recorded_events(parent), expected_events(&run.stdout));
    assert_eq!(child.process().ppid, parent_pid);
    let child_events: Vec<(Op, u64, u64)> = child.events.iter().map(|e| (e.op, e.address, e.size)).collect();
    assert_eq!(
        child_events,
        [(Op::Alloc, child_block, 2000), (Op::Free, child_block, 2000)]
    );
    let child_records = &run.stack_records[run.spools.iter().position(|s| s.process().pid == child_pid).unwrap()];
    assert_eq!(
        all_seqs(child, child_records)[0],
        0,
        "the child numbers its records from 0"
    );
}

#[test]
fn forking_while_other_threads_are_in_hooks_never_hangs_a_child_and_each_keeps_its_own_spool() {
    let run = run_traced("fork-load", program("scenarios", &["fork-under-load"]));
    assert!(run.output.status.success(), "{}", run.stdout);
    assert_eq!(field(&run.stdout, "forks", 0), "20");
    let parent_pid: u32 = field(&run.stdout, "pid", 0).parse().unwrap();
    assert_eq!(run.spools.len(), 21, "{:?}", run.spool_paths);
    for (spool, stack_records) in run.spools.iter().zip(&run.stack_records) {
        assert_clean(spool, stack_records.len());
        if spool.process().pid == parent_pid {
            assert_eq!(spool.events.len(), 4 * 2000 * 2);
            continue;
        }
        // Each child: its own allocation and free, numbered from 0 with its
        // own module map and stack nodes.
        let events: Vec<(Op, u64)> = spool.events.iter().map(|e| (e.op, e.size)).collect();
        assert_eq!(
            events,
            [(Op::Alloc, 512), (Op::Free, 512)],
            "pid {}",
            spool.process().pid
        );
        assert_eq!(
            all_seqs(spool, stack_records),
            (0..spool.header.reserved_seqs).collect::<Vec<u64>>()
        );
        assert_eq!(spool.process().ppid, parent_pid);
    }
}

#[test]
fn a_long_spool_costs_the_program_one_memory_mapping_a_segment_of_its_ring() {
    let dir = scratch_dir("mappings");
    let mut child = program("scenarios", &["loop", "200000", "1", "wait"])
        .env("LD_PRELOAD", tracer_library())
        .env("CUDATRACE_DIR", &dir)
        .env("FAKE_CUDA_CAPACITY", "1099511627776")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("ready") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0);
    }
    // 300,000 records fill 19 chunks; mapped one after another in address
    // space reserved a segment at a time (16 places, then 16, 32, ...), the
    // chunks of a segment merge into one mapping: two, beside the header's.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
    let spool_mappings = maps.lines().filter(|l| l.ends_with(".spool")).count();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert_eq!(spool_mappings, 3, "{maps}");
    let mut spool = SpoolReader::read_path(&spool_files(&dir)[0]).unwrap();
    let (memory, stacks): (Vec<_>, Vec<_>) = spool.events.drain(..).partition(|e| e.op.is_memory_event());
    spool.events = memory;
    assert_eq!(spool.events.len(), 300_000);
    assert_clean(&spool, stacks.len());
}

#[test]
fn an_exec_d_image_is_traced_in_a_spool_of_its_own() {
    let run = run_traced("exec", program("scenarios", &["exec"]));
    assert!(run.output.status.success(), "{}", run.stdout);
    assert_eq!(run.spools.len(), 2, "{:?}", run.spool_paths);
    let (before, after) = (&run.spools[0], &run.spools[1]);
    assert_eq!(before.process().pid, after.process().pid);
    assert_eq!(before.process().argv.last().unwrap(), "exec");
    assert_eq!(after.process().argv.last().unwrap(), "exec-child");
    assert_eq!(recorded_events(before), expected_events(&run.stdout));
    let block = hex(field(&run.stdout, "exec-child", 1));
    assert_eq!(after.events.len(), 1);
    assert_eq!(
        (after.events[0].op, after.events[0].address, after.events[0].size),
        (Op::Alloc, block, 4000)
    );
}

#[test]
fn a_process_that_never_touches_cuda_writes_nothing() {
    let dir = scratch_dir("no-cuda");
    let status = std::process::Command::new("sh")
        .args(["-c", "echo hello > /dev/null"])
        .env("LD_PRELOAD", tracer_library())
        .env("CUDATRACE_DIR", &dir)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(spool_files(&dir).is_empty());
}

#[test]
fn a_process_that_initialises_cuda_has_a_spool_even_without_allocating() {
    let run = run_traced("init-only", program("scenarios", &["init-only"]));
    let spool = single_spool(&run);
    assert!(spool.events.is_empty());
    assert_eq!(spool.process().argv[1], "init-only");
    assert_clean(spool, run.stack_records[0].len());
}

/// `scenarios loop 100000` with `fallocate` failing with `errno`.
fn loop_without_fallocate(errno: i32) -> std::process::Command {
    let mut command = std::process::Command::new(fake_cuda::program("deny_syscall"));
    command
        .arg(libc::SYS_fallocate.to_string())
        .arg(errno.to_string())
        .arg(fake_cuda::program("scenarios"))
        .args(["loop", "100000"])
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("FAKE_CUDA_CAPACITY", "1099511627776");
    command
}

#[test]
fn without_fallocate_space_is_reserved_by_writing_and_nothing_is_lost() {
    let run = run_traced("no-fallocate", loop_without_fallocate(libc::EOPNOTSUPP));
    let spool = single_spool(&run);
    assert_eq!(spool.events.len(), 150_000);
    assert_clean(spool, run.stack_records[0].len());
    // Any other failure is no room: here not even for the header, so the
    // spool stays empty, the program runs on untraced, and the empty file
    // tells the collector so.
    let dir = scratch_dir("fallocate-enospc");
    let output = loop_without_fallocate(libc::ENOSPC)
        .env("LD_PRELOAD", tracer_library())
        .env("CUDATRACE_DIR", &dir)
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(field(&String::from_utf8_lossy(&output.stdout), "loop", 1), "100000");
    let spools = spool_files(&dir);
    assert_eq!(spools.len(), 1);
    assert_eq!(std::fs::metadata(&spools[0]).unwrap().len(), 0);
}

#[test]
fn cudatrace_disable_turns_recording_off_but_not_the_program() {
    let mut command = program("scenarios", &["runtime"]);
    command.env("CUDATRACE_DISABLE", "1");
    let run = run_traced("disabled", command);
    assert!(run.output.status.success());
    assert_eq!(expected_events(&run.stdout).len(), 24);
    assert!(run.spools.is_empty());
}

#[test]
fn the_library_exports_only_the_loader_doors_fork_the_exec_family_and_the_cuda_entry_points() {
    let output = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(tracer_library())
        .output()
        .expect("nm from binutils");
    let names: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2).map(str::to_owned))
        .collect();
    // 140 until the memory limit hooked cuMemGetInfo and cuDeviceTotalMem
    // (both forms), 144 until dlclose was (a driver unloaded and loaded again).
    assert_eq!(names.len(), 145, "{names:?}");
    let exec_family = [
        "execve", "execv", "execvp", "execvpe", "fexecve", "execl", "execlp", "execle",
    ];
    for name in &names {
        let cuda = name.starts_with("cu") && name[2..].starts_with(|c: char| c.is_ascii_uppercase() || c == 'd');
        assert!(
            ["dlsym", "dlopen", "dlclose", "fork"].contains(&name.as_str())
                || exec_family.contains(&name.as_str())
                || cuda,
            "unexpected export {name}"
        );
    }
    for name in exec_family {
        assert!(names.iter().any(|n| n == name), "{name} is not hooked");
    }
    assert!(names.iter().any(|n| n == "fork"), "fork is not hooked");
    assert!(names.iter().any(|n| n == "cuGetProcAddress_v2"));
    assert!(names.iter().any(|n| n == "cuInit"));
    assert!(names.iter().any(|n| n == "cudaMallocFromPoolAsync_ptsz"));
    assert!(names.iter().any(|n| n == "cuLaunchKernelEx_ptsz"));
    assert!(names.iter().any(|n| n == "cuCtxSetCurrent"));
    assert!(names.iter().any(|n| n == "cuDeviceTotalMem"));
}
