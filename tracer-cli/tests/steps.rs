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

/// The lines of a text report's step table for GPU 0, summed-up runs of
/// steps (`...`) included.
fn step_table_rows(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|l| !l.starts_with("    steps on GPU 0:"))
        .skip(2)
        .take_while(|l| l.starts_with("    "))
        .collect()
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

/// The function names of a JSON stack, innermost first.
fn functions(stack: &Value) -> Vec<&str> {
    stack
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str())
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
    let marker = functions(&process["steps"]["marker"]);
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
    let pid = process["pid"].as_u64().unwrap();
    let heading = "8 steps; growth measured at the ends of steps 1 to 7 (the last step has no end); nothing grows\n";
    let opening = text.lines().nth(2).unwrap_or_default();
    assert!(opening.starts_with(&format!("pid {pid} ")), "{text}");
    assert!(text.contains(heading), "{text}");
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
    assert_eq!(site["steps"], 6);
    assert_eq!(
        (site["first_step"].as_u64(), site["last_step"].as_u64()),
        (Some(1), Some(7))
    );
    assert_eq!(site["live_bytes_first_step"], MIB);
    assert_eq!(site["live_bytes_last_step"], 7 * MIB);
    let names = functions(&site["stack"]);
    assert!(names.iter().any(|f| f.contains("forward_pass")), "{names:?}");
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
            "  growing: {} +1.0 MiB a step from the end of step 1 to the end of step 7 (1.0 MiB to 7.0 MiB)",
            site["call_site"].as_str().unwrap()
        )
    );
}

#[test]
fn a_program_without_a_loop_gets_no_steps() {
    // Too few allocations to compare low points either: nothing measured.
    let trace = run_training("steps-straight", "straight", &[]);
    let (report, _) = report_json_with_stacks(&trace);
    let process = main_process(&report);
    assert_eq!(process["steps"], Value::Null);
    assert_eq!(process["low_points"], Value::Null);
    assert_eq!(process["growing"], Value::Null);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    // No heading of steps or growth: the only line naming the pid is the
    // process's own section.
    let pid = process["pid"].as_u64().unwrap();
    let headings: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("pid {pid} "))).collect();
    assert_eq!(headings.len(), 1, "{text}");
    assert!(headings[0].contains(" — exit 0"), "{text}");
}

#[test]
fn the_page_marks_each_step_and_lists_what_grows() {
    let trace = run_training("steps-page", "training", &[("FAKE_TORCH_LEAK", "1")]);
    let page = html_page(&trace);
    // The tensors' chart, the driver's and the footprint's: each marks 8 steps.
    assert_eq!(page.matches("data-steps=\"8\"").count(), 3, "{page}");
    for step in 1..=8 {
        assert_eq!(page.matches(&format!("<title>step {step}</title>")).count(), 3);
    }
    assert!(page.contains("grey lines: the starts of 8 steps"));
    let growing_rows = page.split("<table class=\"growing\">").nth(1).expect("a growing table");
    let growing_rows = growing_rows.split("</table>").next().unwrap();
    assert_eq!(growing_rows.matches("<tr><td>").count(), 1, "{growing_rows}");
    assert!(
        growing_rows.contains(
            "<td class=\"num\">+1.0 MiB a step</td><td class=\"num\">from the end of step 1 to the end of step 7</td><td class=\"num\">1.0 MiB to 7.0 MiB</td>"
        ),
        "{growing_rows}"
    );
}

#[test]
fn diff_gives_each_call_site_its_change_a_step_in_both_runs() {
    let clean = run_training("steps-diff-a", "training", &[]);
    let leak = run_training("steps-diff-b", "training", &[("FAKE_TORCH_LEAK", "1")]);
    let output = cudatrace(&["diff", "--json", clean.to_str().unwrap(), leak.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let diff: Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = diff["tensor_call_sites"].as_array().unwrap();
    let (report, _) = report_json_with_stacks(&leak);
    let output_site = main_process(&report)["growing"][0]["call_site"]
        .as_str()
        .unwrap()
        .to_string();
    let row = rows
        .iter()
        .find(|r| r["name"] == output_site.as_str())
        .expect("the output's row");
    assert_eq!(row["per_step_bytes"], serde_json::json!({"a": 0, "b": MIB}));
    // The exit frees the kept outputs: at exit, both runs hold none.
    assert_eq!(row["exit_bytes"], serde_json::json!({"a": 0, "b": 0, "growth": 0}));
    let text = stdout(
        &cudatrace(&["diff", clean.to_str().unwrap(), leak.to_str().unwrap()])
            .output()
            .unwrap(),
    );
    let tensor_table = text
        .split("PyTorch's tensors by call site")
        .nth(1)
        .expect("the tensors' table");
    let line = tensor_table
        .lines()
        .find(|l| l.ends_with(&format!("  {output_site}")))
        .expect("the output's line");
    let columns: Vec<&str> = line.split_whitespace().collect();
    // peak A, peak B, growth, exit A, exit B, growth, a step A, a step B.
    assert_eq!(&columns[12..16], &["0", "B", "+1.0", "MiB"], "{line}");
}

#[test]
fn without_steps_growth_is_measured_at_the_memory_curves_low_points() {
    // 256 requests, 5 ms apart: over a second, as low points need.
    let leak = run_training(
        "steps-serving-leak",
        "serving",
        &[("FAKE_TORCH_LEAK", "1"), ("FAKE_TORCH_REQUEST_US", "5000")],
    );
    let (report, _) = report_json_with_stacks(&leak);
    let process = main_process(&report);
    assert_eq!(process["steps"], Value::Null);
    assert_eq!(process["low_points"]["points"], 32);
    let growing = process["growing"].as_array().unwrap();
    assert_eq!(growing.len(), 1, "{growing:?}");
    let site = &growing[0];
    assert_eq!(site["measured_on"], "low points");
    assert_eq!(site["steps"], Value::Null);
    assert!(site["over_s"].as_f64().unwrap() > 1.0, "{site}");
    assert!(site["bytes_per_second"].as_f64().unwrap() > 0.0, "{site}");
    let names = functions(&site["stack"]);
    assert!(names.iter().any(|f| f.contains("handle_upload")), "{names:?}");
    // Whole kept buffers, and not the exit's: the last low point comes
    // before the last allocation.
    let last = site["live_bytes_last_step"].as_u64().unwrap();
    assert_eq!(last % (64 * 1024), 0);
    assert!(last > 0);
    let text = stdout(&cudatrace(&["report", leak.to_str().unwrap()]).output().unwrap());
    assert!(
        text.contains(
            "no repeating loop found; growth measured at the lowest moment of each of 32 equal slices of its run ("
        ),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("  growing: "))
        .expect("a growing line");
    assert!(
        line.contains(" a second over ") && line.contains(" of low points ("),
        "{line}"
    );

    let clean = run_training("steps-serving-clean", "serving", &[("FAKE_TORCH_REQUEST_US", "5000")]);
    let (report, _) = report_json_with_stacks(&clean);
    assert_eq!(main_process(&report)["growing"], serde_json::json!([]));
}

#[test]
fn a_long_run_shows_its_first_and_last_steps_and_sums_up_the_rest() {
    let trace = run_training("steps-long", "training", &[("FAKE_TORCH_STEPS", "100")]);
    let (report, _) = report_json_with_stacks(&trace);
    let process = main_process(&report);
    assert_eq!(process["steps"]["count"], 100);
    assert_eq!(process["steps"]["steps"].as_array().unwrap().len(), 100);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    // The first five and the last five; the peak, first reached at step 2,
    // is among them; the steps between are one line.
    let rows: Vec<&str> = step_table_rows(&text)
        .into_iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        rows,
        vec!["1", "2", "3", "4", "5", "...", "96", "97", "98", "99", "100"],
        "{text}"
    );
    let summed = text.lines().find(|l| l.starts_with("    ... steps")).unwrap();
    assert_eq!(summed, "    ... steps 6 to 95: peak 11.0 MiB, at end 4.0 MiB");
}

#[test]
fn a_run_that_fails_every_step_shows_the_steps_around_its_first_ten_failures() {
    // A leak that fills the fake device: 500 of the 1,500 steps fail.
    let trace = run_training(
        "steps-failing",
        "training",
        &[("FAKE_TORCH_STEPS", "1500"), ("FAKE_TORCH_LEAK", "1")],
    );
    let (report, _) = report_json_with_stacks(&trace);
    let process = main_process(&report);
    assert_eq!(process["steps"]["count"], 1500);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    let rows: Vec<&str> = step_table_rows(&text)
        .into_iter()
        .filter(|l| !l.starts_with("    ..."))
        .collect();
    // 5 first, 5 last, and at most 3 around the peak and around each of
    // the first 10 failures: 45 at the most, not one a failing step.
    assert!(rows.len() <= 45, "{} rows:\n{text}", rows.len());
    assert!(rows.len() > 10, "{} rows:\n{text}", rows.len());
}

#[test]
fn a_loop_too_short_to_tell_says_so_rather_than_nothing_grows() {
    let trace = run_training(
        "steps-short",
        "training",
        &[("FAKE_TORCH_STEPS", "4"), ("FAKE_TORCH_LEAK", "1")],
    );
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    assert!(
        text.contains(": 4 steps: too few to judge growth (it needs the ends of 4 steps; the last step has no end)\n"),
        "{text}"
    );
    assert!(!text.contains("nothing grows"), "{text}");
}
