//! Training steps found with no code change, and leaks found by their
//! growth from one step to the next, on the fake `libc10_cuda.so`'s
//! `training` scenario (see `tests/fake-cuda/c/torch_like.cpp`).

mod common;

use common::*;
use serde_json::Value;
use std::path::PathBuf;

const MIB: u64 = 1 << 20;

/// Runs `torch_like` SCENARIO under `cudatrace run` with `env`; the trace.
fn run_training(label: &str, scenario: &str, env: &[(&str, &str)]) -> PathBuf {
    let (mut command, trace) = run_program(label, &fake_cuda::program("torch_like"), &[]);
    command.arg(fake_cuda::torch_library("211")).arg(scenario);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    trace
}

fn main_process(report: &Value) -> Value {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["tensors"]["actions"].as_u64() > Some(0))
        .expect("the process with tensors")
        .clone()
}

/// Each step's (first, allocated peak, allocated at end, complete) on device 0.
fn step_rows(process: &Value) -> Vec<(u64, u64, u64, bool)> {
    process["steps"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let d = &s["devices"][0];
            (
                s["first"].as_u64().unwrap(),
                d["allocated_peak_bytes"].as_u64().unwrap(),
                d["allocated_bytes_at_end"].as_u64().unwrap(),
                s["complete"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Parameters and gradients: 256 + 512 + 768 KiB each.
const PARAMETERS: u64 = 1536 * 1024;

#[test]
fn a_clean_loop_has_its_steps_and_nothing_growing() {
    let trace = run_training("steps-clean", "training", &[]);
    let (report, _) = report_json_with_stacks(&trace);
    let process = main_process(&report);
    assert_eq!(process["steps"]["count"], 8);
    assert_eq!(process["steps"]["measured_on"], "tensors");
    let marker: Vec<&str> = process["steps"]["marker"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert!(marker.iter().any(|f| f.contains("forward_pass")), "{marker:?}");
    let rows = step_rows(&process);
    // Step 1 makes the gradients; each step then holds the parameters,
    // the gradients and two outputs at its peak (the previous output is
    // freed once the new one is made): peak = parameters + 4 + 2 MiB
    // activations + outputs.
    let steady_end = 2 * PARAMETERS + MIB;
    let mut expected = vec![(1, PARAMETERS + 7 * MIB, steady_end, true)];
    for step in 2..=7 {
        expected.push((step, 2 * PARAMETERS + 8 * MIB, steady_end, true));
    }
    // The last step ends before the program frees older memory: its loop
    // frees the previous output only after the step's last allocation.
    expected.push((8, 2 * PARAMETERS + 8 * MIB, steady_end + MIB, false));
    assert_eq!(rows, expected);
    assert_eq!(process["growing"], serde_json::json!([]));
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    assert!(text.contains("  growing: nothing, over 7 step ends\n"), "{text}");
    assert!(text.contains("  8 steps, found by the tensor at "), "{text}");
}

#[test]
fn a_kept_output_grows_by_its_size_a_step_though_it_is_freed_at_exit() {
    let trace = run_training("steps-leak", "training", &[("FAKE_TORCH_LEAK", "1")]);
    let (report, _) = report_json_with_stacks(&trace);
    let process = main_process(&report);
    assert_eq!(process["steps"]["count"], 8);
    let growing = process["growing"].as_array().unwrap();
    assert_eq!(growing.len(), 1, "{growing:?}");
    let site = &growing[0];
    assert_eq!(site["bytes_per_step"], MIB);
    assert_eq!(site["steps"], 7);
    assert_eq!(site["last_step"], 7);
    assert_eq!(site["live_bytes_last_step"], 7 * MIB);
    let functions: Vec<&str> = site["stack"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert!(functions.iter().any(|f| f.contains("forward_pass")), "{functions:?}");
    // Nothing is live at exit: the exit freed the list.
    assert_eq!(process["tensors"]["devices"][0]["allocated_bytes_at_exit"], 0);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    let line = text
        .lines()
        .find(|l| l.starts_with("  growing: "))
        .expect("a growing line");
    assert_eq!(
        line,
        format!(
            "  growing: {} +1.0 MiB a step over 7 steps (7.0 MiB at the end of step 7)",
            site["call_site"].as_str().unwrap()
        )
    );
}

#[test]
fn a_program_without_a_loop_gets_no_steps() {
    let trace = run_training("steps-straight", "straight", &[]);
    let (report, _) = report_json_with_stacks(&trace);
    let process = main_process(&report);
    assert_eq!(process["steps"], Value::Null);
    assert_eq!(process["growing"], Value::Null);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    assert!(text.contains("no training steps found"), "{text}");
}
