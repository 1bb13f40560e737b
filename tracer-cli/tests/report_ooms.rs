//! A program that fails allocations in a loop: `report --json` stays
//! bounded, the first failures in detail and every one counted by call
//! site; `--all-ooms` gives each, in JSON and in text.

mod common;

use common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn innermost_function(stack: &Value) -> String {
    stack
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("?"))
        .find(|f| f.contains("retry_"))
        .unwrap_or("none")
        .to_owned()
}

#[test]
fn repeated_failures_are_counted_by_call_site_with_the_first_in_detail() {
    let (trace, out) = traced_scenario("report-ooms", "oom-retries", &[("FAKE_CUDA_CAPACITY", "1048576")]);
    assert!(out.contains("retried 40\n"), "{out}");
    let (report, _) = report_json_with_stacks(&trace);
    let device = &report["processes"][0]["devices"][0];
    assert_eq!(device["ooms_total"], 40);
    assert_eq!(device["ooms_left_out"], 24);
    let listed = device["ooms"].as_array().unwrap();
    assert_eq!(listed.len(), 16);
    let asked: Vec<u64> = listed.iter().map(|o| o["requested_bytes"].as_u64().unwrap()).collect();
    let first16: Vec<u64> = (0..16).map(|i| MIB + i * 4096).collect();
    assert_eq!(asked, first16);
    assert!(listed.iter().all(|o| o["held"]["live_bytes"] == 512 * 1024));

    let sites = device["ooms_by_call_site"].as_array().unwrap();
    let summary: Vec<(u64, String, u64, u64, bool)> = sites
        .iter()
        .map(|s| {
            (
                s["count"].as_u64().unwrap(),
                s["api"].as_str().unwrap().to_owned(),
                s["smallest_requested_bytes"].as_u64().unwrap(),
                s["largest_requested_bytes"].as_u64().unwrap(),
                s["refused_by_limit"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (30, "cudaMalloc".to_owned(), MIB, MIB + 29 * 4096, false),
            (10, "cudaMalloc".to_owned(), 2 * MIB, 2 * MIB, false),
        ]
    );
    let functions: Vec<String> = sites.iter().map(|s| innermost_function(&s["stack"])).collect();
    assert_eq!(functions, vec!["retry_growing", "retry_double"]);
    assert!(sites[0]["first_time_s"].as_f64().unwrap() <= sites[0]["last_time_s"].as_f64().unwrap());
    assert!(sites[0]["last_time_s"].as_f64().unwrap() <= sites[1]["first_time_s"].as_f64().unwrap());

    // --all-ooms: each one, in order; the counts stay.
    let all = cudatrace(&["report", "--json", "--all-ooms", trace.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(all.status.success(), "{}", stderr(&all));
    let all: Value = serde_json::from_slice(&all.stdout).unwrap();
    let device_all = &all["processes"][0]["devices"][0];
    let asked: Vec<u64> = device_all["ooms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["requested_bytes"].as_u64().unwrap())
        .collect();
    let every: Vec<u64> = (0..30).map(|i| MIB + i * 4096).chain([2 * MIB; 10]).collect();
    assert_eq!(asked, every);
    assert_eq!(device_all["ooms_left_out"], 0);
    assert_eq!(device_all["ooms_by_call_site"], device["ooms_by_call_site"]);

    // The text report lists the first few and points to --all-ooms.
    let text = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    let text = stdout(&text);
    let more: Vec<&str> = text.lines().filter(|l| l.contains("more out-of-memory")).collect();
    assert_eq!(
        more,
        vec!["    ... and 30 more out-of-memory failures (`report --all-ooms` lists each)"]
    );
    let all_text = cudatrace(&["report", "--all-ooms", trace.to_str().unwrap()])
        .output()
        .unwrap();
    let all_text = stdout(&all_text);
    assert!(!all_text.contains("more out-of-memory"), "{all_text}");
    let failed = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with("    OUT OF MEMORY: cudaMalloc"))
            .count()
    };
    assert_eq!((failed(&text), failed(&all_text)), (10, 40));
}

#[test]
fn the_page_lists_the_first_hundred_failures_and_counts_every_one_by_call_site() {
    let (mut command, trace) = run_command("page-ooms", "oom-retries", &[]);
    let output = command
        .arg("250")
        .env("FAKE_CUDA_CAPACITY", "1048576")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("retried 260\n"));
    let page = trace.with_extension("html");
    let made = cudatrace(&["html", trace.to_str().unwrap(), "-o", page.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    let page = std::fs::read_to_string(&page).unwrap();
    // The first 100 failures, each in a row of its own.
    let failures_table = page.split("<h3>Out-of-memory failures</h3>").nth(1).unwrap();
    let first_table = failures_table.split("</table>").next().unwrap();
    assert_eq!(first_table.matches("<tr><td class=\"num\">").count(), 100);
    assert!(
        page.contains("The first 100 of 260 failures are listed above"),
        "{}",
        &failures_table[..2000.min(failures_table.len())]
    );
    let sites_table = failures_table.split("every one, by call site:</p>").nth(1).unwrap();
    let sites_table = sites_table.split("</table>").next().unwrap();
    let counts: Vec<&str> = sites_table
        .split("<tr><td class=\"num\">")
        .skip(1)
        .map(|row| row.split('<').next().unwrap())
        .collect();
    assert_eq!(counts, vec!["250", "10"]);
    // 1 MiB + 249 x 4 KiB at most: 1.97 MiB.
    assert!(
        sites_table.contains("<td class=\"num\">1.0 MiB to 2.0 MiB</td>"),
        "{sites_table}"
    );
    assert!(sites_table.contains("<td class=\"num\">2.0 MiB</td>"), "{sites_table}");

    let (report, _) = report_json_with_stacks(&trace);
    let device = &report["processes"][0]["devices"][0];
    assert_eq!(
        (device["ooms_total"].as_u64(), device["ooms_left_out"].as_u64()),
        (Some(260), Some(244))
    );
}
