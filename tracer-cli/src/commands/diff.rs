//! `cudatrace diff`: what grew between two runs or commits, by call site
//! and by owner.

use crate::commands::arguments::DiffArgs;
use crate::outputs;
use crate::system::failure::Failure;
use crate::system::terminal::{say, Stdout};
use crate::wording::{category_name, said, switch_lines};
use cudatrace_analysis::{each_on_a_thread, OomsKept, Progress, UnreadBlock};
use cudatrace_analysis::{RunFigures, Summary};

/// `cudatrace diff`; 1 if either trace is damaged.
pub fn command(args: DiffArgs) -> Result<u8, Failure> {
    // The indexes are read one after the other, so that a trace that
    // cannot be read fails the command before the other is read past it;
    // the replays then run at once, each on a thread of its own: one
    // trace's replay keeps one core busy, and the machine has another.
    let (index_a, counts_a) = super::open_trace::read_trace_counting_steps(&args.a)?;
    let (index_b, counts_b) = match super::open_trace::read_trace_counting_steps(&args.b) {
        Ok(read) => read,
        Err(failure) => {
            // What is wrong with the first trace is still said first.
            let progress = Progress::new("reading", index_a.events);
            let summary = Summary::build_counted_alone(&index_a, counts_a, &progress, OomsKept::default());
            drop(progress);
            say_notes(&args.a, &index_a, &summary.stream_errors);
            return Err(failure);
        }
    };
    let read = [index_a, index_b];
    let progress = Progress::new("reading", read.iter().map(|index| index.events).sum());
    let inputs = read
        .iter()
        .zip([counts_a, counts_b])
        .zip([progress.share(), progress.share()])
        .collect();
    let summaries = each_on_a_thread(inputs, |((index, counts), share)| {
        let summary = Summary::build_counted_alone(index, counts, &share, OomsKept::default());
        let figures = RunFigures::of(index, &summary, &|c| category_name(c).to_string());
        (summary.stream_errors, figures)
    });
    // The bar goes before anything is said or written.
    drop(progress);
    let mut figures = Vec::new();
    let mut status = 0;
    for ((path, index), (stream_errors, run)) in [&args.a, &args.b].into_iter().zip(&read).zip(summaries) {
        figures.push(run);
        status = status.max(say_notes(path, index, &stream_errors));
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

/// Says what a trace lacks, and whether it was paused; returns 1 when it is
/// damaged.
fn say_notes(path: &std::path::Path, index: &cudatrace_analysis::TraceIndex, stream_errors: &[UnreadBlock]) -> u8 {
    let status = outputs::say_what_the_trace_lacks(index, stream_errors);
    // A run paused for a while has part of its bytes at the paused
    // mark: its call sites cannot be compared one for one there.
    if let Some(line) = switch_lines::paused_line(index) {
        say(&said(format!("{}: {line}", path.display())));
    }
    status
}
