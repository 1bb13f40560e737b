//! The driver calls the hooks add, counted by the fake driver: in steady
//! state, with `CUDATRACE_SAMPLES=0`, exactly none; with samples on, at
//! most one in twenty of the program's own calls. And the devices the hooks
//! work out without asking the driver.

mod support;

use cudatrace_events::{Api, Op};
use support::*;

/// (driver calls seen, calls the program made) of each loop `call_count` ran.
fn loops(stdout: &str) -> Vec<(String, u64, u64)> {
    stdout
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            (words.len() == 3 && ["driver", "async", "runtime", "pool"].contains(&words[0])).then(|| {
                (
                    words[0].to_owned(),
                    words[1].parse().unwrap(),
                    words[2].parse().unwrap(),
                )
            })
        })
        .collect()
}

/// Runs fake-CUDA program `name` traced, with `env`; it must succeed.
fn traced(label: &str, name: &str, args: &[&str], env: &[(&str, &str)]) -> TracedRun {
    let mut command = program(name, args);
    for (key, value) in env {
        command.env(key, value);
    }
    let run = run_traced(label, command);
    assert!(
        run.output.status.success(),
        "{}",
        String::from_utf8_lossy(&run.output.stderr)
    );
    run
}

/// The device of the last allocation recorded at `address`.
fn device_of(run: &TracedRun, address: u64) -> Option<u8> {
    run.spools[0]
        .events
        .iter()
        .rev()
        .find(|e| e.op == Op::Alloc && e.address == address)
        .and_then(|e| e.device)
}

fn call_count(pairs: u32, tracer_env: Option<&[(&str, &str)]>) -> (Vec<(String, u64, u64)>, Option<TracedRun>) {
    let pairs = pairs.to_string();
    match tracer_env {
        None => {
            let output = program("call_count", &[&pairs]).output().unwrap();
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            (loops(&String::from_utf8_lossy(&output.stdout)), None)
        }
        Some(env) => {
            let run = traced("call-count", "call_count", &[&pairs], env);
            (loops(&run.stdout), Some(run))
        }
    }
}

#[test]
fn without_samples_the_hooks_add_no_driver_call_to_allocations_and_frees() {
    let (plain, _) = call_count(2000, None);
    assert_eq!(
        plain,
        ["driver", "async", "runtime", "pool"].map(|label| (label.to_owned(), 4000, 4000))
    );
    let (traced, run) = call_count(2000, Some(&[("CUDATRACE_SAMPLES", "0")]));
    assert_eq!(traced, plain);
    // Every pair was recorded: 4 loops of 10 + 2000 pairs, 2 events each,
    // the captured allocation and two more.
    let run = run.unwrap();
    assert_eq!(run.spools[0].events.len(), 4 * 2010 * 2 + 3);
}

#[test]
fn with_samples_the_hooks_add_at_most_one_driver_call_in_twenty() {
    // Driver calls that cost 2 µs make each loop last long enough for
    // several rate-limited readings.
    let (traced, _) = call_count(5000, Some(&[("FAKE_CUDA_CALL_NS", "2000")]));
    assert_eq!(traced.len(), 4);
    for (label, seen, made) in traced {
        assert_eq!(made, 10_000);
        assert!(seen >= made, "{label}: {seen} < {made}");
        assert!(
            (seen - made) * 20 <= made,
            "{label}: {} extra calls for {made}",
            seen - made
        );
    }
}

#[test]
fn stream_ordered_allocations_are_on_their_pool_s_or_stream_s_device_whatever_is_current() {
    // Without cuStreamGetDevice, only the stream's creation says its device.
    let (_, run) = call_count(
        10,
        Some(&[("CUDATRACE_SAMPLES", "0"), ("FAKE_CUDA_NO_STREAM_DEVICE", "1")]),
    );
    let run = run.unwrap();
    let pool_address = hex(field(&run.stdout, "P", 0));
    let stream_address = hex(field(&run.stdout, "P", 2));
    assert_eq!(device_of(&run, pool_address), Some(1));
    assert_eq!(device_of(&run, stream_address), Some(1));
}

#[test]
fn a_device_change_the_hooks_cannot_see_is_caught_and_counted() {
    let run = traced("device-switch", "device_switch", &[], &[]);
    let address = |key: &str, index: usize| hex(field(&run.stdout, key, index));
    let (a, b, c) = (address("A", 0), address("A", 2), address("A", 4));
    // The first allocation after the quiet switch still names the cached
    // device; the reading that follows it finds the change.
    assert_eq!(
        [device_of(&run, a), device_of(&run, b), device_of(&run, c)],
        [Some(0), Some(0), Some(1)]
    );
    let mismatches: Vec<(Option<u8>, u64)> = run.stack_records[0]
        .iter()
        .filter(|e| e.op == Op::DeviceMismatch)
        .map(|e| (e.device, e.arg1))
        .collect();
    assert_eq!(mismatches, vec![(Some(1), 0)]);
}

#[test]
fn a_call_that_may_change_every_thread_s_context_clears_every_thread_s_cached_device() {
    // No rate-limited check here: only the reset can make the worker ask again.
    let run = traced(
        "context-reset-devices",
        "context_reset",
        &["devices"],
        &[("CUDATRACE_SAMPLES", "0")],
    );
    let (before, after) = (hex(field(&run.stdout, "A", 0)), hex(field(&run.stdout, "A", 2)));
    assert_eq!([device_of(&run, before), device_of(&run, after)], [Some(0), Some(1)]);
}

#[test]
fn a_recycled_stream_handle_is_a_new_stream_with_its_own_device_and_first_launch() {
    let run = traced(
        "context-reset-streams",
        "context_reset",
        &["streams"],
        &[("CUDATRACE_SAMPLES", "0")],
    );
    let (first, second) = (hex(field(&run.stdout, "S", 0)), hex(field(&run.stdout, "S", 1)));
    assert_eq!(first, second, "the fake driver gives the handle out again");
    let (a, b) = (hex(field(&run.stdout, "A", 0)), hex(field(&run.stdout, "A", 2)));
    assert_eq!([device_of(&run, a), device_of(&run, b)], [Some(1), Some(0)]);
    // Each stream's first launch is measured, the recycled handle's too.
    let first_launches = run.stack_records[0]
        .iter()
        .filter(|e| e.op == Op::StreamObjects && e.address == first && e.api == Api::CuLaunchKernel)
        .count();
    assert_eq!(first_launches, 2);
}
