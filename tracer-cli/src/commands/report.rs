//! `cudatrace report`: per process and device, what was allocated, the peak,
//! what was still live at exit, and every out-of-memory failure.

use crate::commands::arguments::ReportArgs;
use crate::outputs;
use crate::system::failure::Failure;
use crate::system::terminal::Stdout;
use cudatrace_analysis::Summary;
use cudatrace_analysis::{OomsKept, Progress};

/// `cudatrace report`; 1 if the trace is damaged.
pub fn command(args: ReportArgs) -> Result<u8, Failure> {
    let (index, counts) = super::open_trace::read_trace_counting_steps(&args.trace)?;
    let summary = Summary::build_counted_alone(
        &index,
        counts,
        &Progress::new("reading", index.events),
        if args.all_ooms {
            OomsKept::EVERY
        } else {
            OomsKept::default()
        },
    );
    let text = if args.json {
        format!(
            "{}\n",
            outputs::json::report_object::report(&index, &summary, args.all_ooms)
        )
    } else {
        outputs::report_text::report(&index, &summary, args.view.shown(), args.all_ooms)
    };
    let mut out = Stdout::new();
    if !out.write(&text)? || !out.finish()? {
        return Ok(0);
    }
    Ok(outputs::say_what_the_trace_lacks(&index, &summary.stream_errors))
}
