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
    let mut out = Stdout::new();
    let written = if args.json && args.all_ooms {
        // Every failure: written one at a time, not held as one text.
        let report = outputs::json::report_object::report(&index, &summary, true);
        outputs::json::oom_object::write_with_every_oom(&index, &summary, &report, &mut out)?
    } else if args.json {
        let report = outputs::json::report_object::report(&index, &summary, false);
        out.write(&format!("{report}\n"))?
    } else if args.all_ooms {
        let text = outputs::report_text::report(&index, &summary, args.view.shown(), true);
        outputs::report_text::write_with_every_oom(&index, &summary, &text, args.view.shown(), &mut out)?
    } else {
        out.write(&outputs::report_text::report(
            &index,
            &summary,
            args.view.shown(),
            false,
        ))?
    };
    if !written || !out.finish()? {
        return Ok(0);
    }
    Ok(outputs::say_what_the_trace_lacks(&index, &summary.stream_errors))
}
