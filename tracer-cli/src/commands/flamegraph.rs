//! `cudatrace flamegraph`: device bytes by call stack at the peak, at exit
//! or at an out-of-memory failure, as an SVG or as folded stacks for other
//! tools.

use crate::commands::arguments::FlamegraphArgs;
use crate::outputs::folded_stacks::{folded_stacks, folded_text, svg, total_bytes};
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::terminal::print_line;
use crate::wording::output_lines;
use crate::wording::said;
use cudatrace_analysis::Moment;
use cudatrace_analysis::Progress;
use cudatrace_analysis::{Summary, OOM_STATES_KEPT};
use std::io::Write;

/// `cudatrace flamegraph`; 1 if the trace is damaged.
pub fn command(args: FlamegraphArgs) -> Result<u8, Failure> {
    let index = super::open_trace::read_trace(&args.trace)?;
    let extension = if args.folded { "folded" } else { "svg" };
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| args.trace.with_extension(extension));
    let summary = Summary::build_without_steps(&index, &Progress::new("reading", index.events));
    let failure = match args.at {
        Moment::Oom(n) => {
            let (process, device, oom) = summary
                .oom(n)
                .map_err(|count| Failure::from(output_lines::no_such_oom(&args.trace, n, count)))?;
            if oom.held.is_none() {
                return Err(output_lines::oom_state_not_kept(n, OOM_STATES_KEPT).into());
            }
            Some((n, index.processes[process].start.pid, device))
        }
        _ => None,
    };
    let (stacks, cache) = folded_stacks(&index, &summary, args.at, args.view.shown(), args.cache);
    let left_out = (cache > 0 && !args.cache).then(|| {
        let left_out = output_lines::cache_left_out(cache);
        crate::system::terminal::say(&said(&left_out));
        left_out
    });
    let content = if args.folded {
        folded_text(&stacks).into_bytes()
    } else {
        let title = output_lines::flamegraph_title(
            failure,
            args.at == Moment::Peak,
            total_bytes(&stacks),
            left_out.as_deref(),
        );
        svg(&stacks, &title).map_err(|e| output_lines::unreadable_input(&args.trace, e))?
    };
    if path.as_os_str() == "-" {
        let mut out = crate::system::terminal::Stdout::new();
        let text = String::from_utf8_lossy(&content);
        if out.write(&text)? {
            out.finish()?;
        }
        return Ok(crate::outputs::say_what_the_trace_lacks(&index, &summary.stream_errors));
    }
    let mut output = OutputFile::create(&path, is_private(&args.trace), args.replace.force)?;
    if let Err(e) = output.file().write_all(&content) {
        output.abandon();
        return Err(output_lines::cannot_write(&path, e).into());
    }
    output.finish()?;
    print_line(&path.display().to_string())?;
    if !args.folded {
        crate::system::terminal::say(output_lines::OPEN_SVG);
    }
    Ok(crate::outputs::say_what_the_trace_lacks(&index, &summary.stream_errors))
}
