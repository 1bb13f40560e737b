//! A program that leaks in a loop: `report --json` lists each device's
//! largest 10,000 allocations live at exit and counts the rest, so that
//! its report stays small.

mod common;

use common::*;
use std::collections::BTreeMap;

#[test]
fn a_leak_in_a_loop_lists_the_largest_ten_thousand_live_allocations_and_counts_every_one() {
    // The loop keeps every other allocation: 15,000 of 4 KiB x (1 + 7i mod 8)
    // for even i, so 3,750 each of 4, 28, 20 and 12 KiB.
    let (mut command, trace) = run_command("report-live", "loop", &[]);
    let output = command.arg("30000").output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let (report, _) = report_json_with_stacks(&trace);
    let device = &report["processes"][0]["devices"][0];
    assert_eq!(device["live_at_exit_total"], 15_000);
    assert_eq!(device["live_at_exit_left_out"], 5_000);
    let listed = device["live_at_exit"].as_array().unwrap();
    assert_eq!(listed.len(), 10_000);
    let addresses: Vec<u64> = listed.iter().map(|a| a["address"].as_u64().unwrap()).collect();
    assert!(addresses.windows(2).all(|w| w[0] < w[1]), "listed by address");
    let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
    for allocation in listed {
        *sizes.entry(allocation["size"].as_u64().unwrap()).or_default() += 1;
    }
    // The largest: every 28 and 20 KiB one, and 2,500 of the 12 KiB ones.
    assert_eq!(
        sizes,
        BTreeMap::from([(12 << 10, 2_500), (20 << 10, 3_750), (28 << 10, 3_750)])
    );
    // Every one is counted by call site.
    let sites = device["live_at_exit_by_call_site"].as_array().unwrap();
    let counted: u64 = sites.iter().map(|s| s["allocations"].as_u64().unwrap()).sum();
    assert_eq!(counted, 15_000);
    assert_eq!(device["live_bytes_at_exit"], (3_750 * (4 + 28 + 20 + 12)) << 10);
}
