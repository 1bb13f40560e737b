//! `cudatrace snapshot`'s default limit: each device's newest 100,000 trace
//! entries, said on stderr and in the pickle, and `--max-events all`.

mod common;

use common::viewer::unpickle;
use common::*;
use serde_json::Value;
use std::path::Path;

fn entries(path: &Path) -> Vec<Value> {
    let bytes = std::fs::read(path).unwrap();
    let (snapshot, _) = unpickle(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    snapshot["device_traces"][0].as_array().unwrap().clone()
}

fn notes(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let (snapshot, _) = unpickle(&bytes).unwrap();
    snapshot["allocator_settings"]["cudatrace_notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_long_trace_keeps_each_devices_newest_hundred_thousand_entries_unless_all_are_asked_for() {
    let dir = scratch_dir("snapshot-default-limit");
    let trace = dir.join("long.trace");
    // One process on device 0: 60,000 events give about 150,000 entries
    // (an allocation is two, a free three).
    let file = std::fs::File::create(&trace).unwrap();
    cudatrace_trace::synthetic::write_synthetic(std::io::BufWriter::new(file), 60_000, 1, 7).unwrap();
    let trace_arg = trace.to_str().unwrap();
    let pickle = dir.join("long.1000.pickle");

    let all = cudatrace(&["snapshot", trace_arg, "--max-events", "all"])
        .output()
        .unwrap();
    assert!(all.status.success(), "{}", stderr(&all));
    assert_eq!(
        stderr(&all),
        "cudatrace: drop a pickle onto pytorch.org/memory_viz, or run `python -m torch.cuda._memory_viz trace_plot PICKLE -o PAGE.html`\n"
    );
    let every = entries(&pickle);
    assert!(every.len() > 100_000, "{} entries", every.len());
    assert!(!notes(&pickle).iter().any(|n| n.contains("--max-events")));

    let default = cudatrace(&["snapshot", trace_arg, "--force"]).output().unwrap();
    assert!(default.status.success(), "{}", stderr(&default));
    let newest = entries(&pickle);
    // Whole events: the oldest kept starts an allocation or a free, and at
    // most two entries short of the limit.
    assert!((99_998..=100_000).contains(&newest.len()), "{} entries", newest.len());
    assert_eq!(newest[..], every[every.len() - newest.len()..]);
    let first = newest[0]["action"].as_str().unwrap();
    assert!(["segment_alloc", "free_requested", "oom"].contains(&first), "{first}");
    let left_out = every.len() - newest.len();
    assert_eq!(
        stderr(&default).lines().next().unwrap(),
        format!(
            "cudatrace: {} keeps each device's newest 100,000 trace entries, which the memory visualizer opens; left out the oldest {} (--max-events all writes every one)",
            pickle.display(),
            thousands(left_out)
        )
    );
    assert_eq!(
        notes(&pickle).last().unwrap(),
        &format!("left out: the oldest {left_out} entries, past each device's newest 100000 (--max-events all keeps every one)")
    );

    // A limit given is not said again on stderr: it was asked for.
    let given = cudatrace(&["snapshot", trace_arg, "--force", "--max-events", "10"])
        .output()
        .unwrap();
    assert!(given.status.success(), "{}", stderr(&given));
    assert!(!stderr(&given).contains("keeps each device's"), "{}", stderr(&given));
    let ten = entries(&pickle);
    assert!((8..=10).contains(&ten.len()), "{} entries", ten.len());
    assert_eq!(ten[..], every[every.len() - ten.len()..]);
}

#[test]
fn max_events_takes_a_count_above_zero_or_all() {
    for bad in ["0", "1.5", "many", ""] {
        let out = cudatrace(&["snapshot", "missing.trace", "--max-events", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let text = stderr(&out);
        assert!(
            text.contains(&format!("{bad:?} is not a number of entries above 0, nor `all`")),
            "{bad}: {text}"
        );
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (at, digit) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
