//! `cudatrace diff`: what grew between two runs or commits, by call site
//! and by owner.

use crate::commands::arguments::DiffArgs;
use crate::outputs;
use crate::system::failure::Failure;
use crate::system::terminal::{say, Stdout};
use crate::wording::{category_name, said, switch_lines};
use cudatrace_analysis::{OomsKept, Progress};
use cudatrace_analysis::{RunFigures, Summary};

/// `cudatrace diff`; 1 if either trace is damaged.
pub fn command(args: DiffArgs) -> Result<u8, Failure> {
    let mut figures = Vec::new();
    let mut status = 0;
    for path in [&args.a, &args.b] {
        let (index, counts) = super::open_trace::read_trace_counting_steps(path)?;
        let summary = Summary::build_counted_alone(
            &index,
            counts,
            &Progress::new("reading", index.events),
            OomsKept::default(),
        );
        figures.push(RunFigures::of(&index, &summary, &|c| category_name(c).to_string()));
        status = status.max(outputs::say_what_the_trace_lacks(&index, &summary.stream_errors));
        // A run paused for a while has part of its bytes at the paused
        // mark: its call sites cannot be compared one for one there.
        if let Some(line) = switch_lines::paused_line(&index) {
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
