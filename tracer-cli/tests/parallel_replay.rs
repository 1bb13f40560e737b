//! Commands that replay a trace's processes in parallel, one group of
//! processes a core (report, diff, html, snapshot), write exactly what one
//! replay on one core writes.

mod common;

use common::*;
use std::path::Path;
use std::process::Output;

/// The output of `cudatrace ARGS`, on every core or pinned to the first.
fn run(args: &[&str], pinned: bool) -> Output {
    let mut command = if pinned {
        let mut taskset = std::process::Command::new("taskset");
        taskset.args(["-c", "0", cli().to_str().unwrap()]).args(args);
        taskset
    } else {
        cudatrace(args)
    };
    let output = command.output().unwrap();
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    output
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_trace_of_several_processes_reads_the_same_on_every_core_as_on_one() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // On one core there is nothing to compare: both runs take one replay.
    if cores < 2 {
        eprintln!("one core: the parallel replay cannot be compared here");
        return;
    }
    let dir = scratch_dir("parallel-replay");
    let trace = dir.join("five.trace");
    let file = std::fs::File::create(&trace).unwrap();
    cudatrace_trace::synthetic::write_synthetic(std::io::BufWriter::new(file), 300_000, 5, 5).unwrap();
    let trace = trace.to_str().unwrap();

    for args in [
        vec!["report", trace],
        vec!["report", "--json", trace],
        vec!["diff", "--json", "--all", trace, trace],
    ] {
        let (spread, pinned) = (run(&args, false), run(&args, true));
        assert!(spread.stdout.len() > 1000, "{args:?}: {} bytes", spread.stdout.len());
        assert_eq!(
            String::from_utf8_lossy(&spread.stdout),
            String::from_utf8_lossy(&pinned.stdout),
            "{args:?}"
        );
        assert_eq!(stderr(&spread), stderr(&pinned), "{args:?}");
    }
    let report: serde_json::Value = serde_json::from_slice(&run(&["report", "--json", trace], false).stdout).unwrap();
    let processes = report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 5);
    for process in processes {
        let allocations = process["devices"][0]["allocations"].as_u64().unwrap();
        assert!(allocations > 10_000, "{allocations} allocations");
    }

    let (page, pinned_page) = (dir.join("spread.html"), dir.join("pinned.html"));
    run(&["html", trace, "-o", page.to_str().unwrap()], false);
    run(&["html", trace, "-o", pinned_page.to_str().unwrap()], true);
    let page = read(&page);
    assert!(page.len() > 100_000, "{} bytes", page.len());
    assert!(page == read(&pinned_page), "the pages differ");

    // Each process's pickle, with each device's newest entries (the
    // default) and with every one.
    for (name, limit) in [("newest", None), ("all", Some("all"))] {
        let (spread_stem, pinned_stem) = (dir.join(format!("spread-{name}")), dir.join(format!("pinned-{name}")));
        for (stem, pinned) in [(&spread_stem, false), (&pinned_stem, true)] {
            let mut args = vec!["snapshot", trace, "-o", stem.to_str().unwrap()];
            args.extend(limit.map(|limit| ["--max-events", limit]).into_iter().flatten());
            run(&args, pinned);
        }
        let pickles: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|file| file.starts_with(&format!("spread-{name}.")))
            .collect();
        assert_eq!(pickles.len(), 5, "{pickles:?}");
        for file in pickles {
            let spread = read(&dir.join(&file));
            assert!(spread.len() > 100_000, "{file}: {} bytes", spread.len());
            let pinned = read(&dir.join(file.replacen("spread", "pinned", 1)));
            assert!(spread == pinned, "{file} differs from the pinned replay's");
        }
    }
}
