//! `cudatrace diff`: what grew between two runs or commits, by call site
//! and by owner.

use crate::commands::arguments::DiffArgs;
use crate::outputs;
use crate::system::failure::Failure;
use crate::system::terminal::{say, Stdout};
use crate::wording::{category_name, said, switch_lines};
use cudatrace_analysis::{each_on_a_thread, OomsKept, Progress};
use cudatrace_analysis::{RunFigures, Summary};

/// `cudatrace diff`; 1 if either trace is damaged.
pub fn command(args: DiffArgs) -> Result<u8, Failure> {
    // The two traces are read at once, each on a thread of its own: one
    // trace's replay keeps one core busy, and the machine has another.
    let indexes = each_on_a_thread(vec![&args.a, &args.b], |path| {
        super::open_trace::read_trace_counting_steps(path)
    });
    let mut read = Vec::new();
    let mut counted = Vec::new();
    for result in indexes {
        let (index, counts) = result?;
        read.push(index);
        counted.push(counts);
    }
    let progress = Progress::new("reading", read.iter().map(|index| index.events).sum());
    let inputs = read
        .iter()
        .zip(counted)
        .zip([progress.share(), progress.share()])
        .collect();
    let summaries = each_on_a_thread(inputs, |((index, counts), share)| {
        let summary = Summary::build_counted_alone(index, counts, &share, OomsKept::default());
        let figures = RunFigures::of(index, &summary, &|c| category_name(c).to_string());
        (summary.stream_errors, figures)
    });
    let mut figures = Vec::new();
    let mut status = 0;
    for ((path, index), (stream_errors, run)) in [&args.a, &args.b].into_iter().zip(&read).zip(summaries) {
        figures.push(run);
        status = status.max(outputs::say_what_the_trace_lacks(index, &stream_errors));
        // A run paused for a while has part of its bytes at the paused
        // mark: its call sites cannot be compared one for one there.
        if let Some(line) = switch_lines::paused_line(index) {
            say(&said(format!("{}: {line}", path.display())));
        }
    }
    let paths = [args.a.as_path(), args.b.as_path()];
    let text = if args.json {
        format!(
            "{}\n",
            outputs::json::diff_object::diff_json(paths, &figures[0], &figures[1], args.all)
        )
    } else {
        outputs::diff_tables::text(paths, &figures[0], &figures[1], args.all)
    };
    let mut out = Stdout::new();
    if out.write(&text)? {
        out.finish()?;
    }
    Ok(status)
}
