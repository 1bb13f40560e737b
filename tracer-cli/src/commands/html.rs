//! `cudatrace html`: the trace as one self-contained HTML page (see
//! [`crate::outputs::html_page`]).

use crate::commands::arguments::HtmlArgs;
use crate::outputs::{html_page, say_what_the_trace_lacks};
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::terminal::{print_line, say};
use crate::wording::output_lines;
use cudatrace_analysis::Progress;
use std::io::Write;

/// `cudatrace html`; 1 if the trace is damaged.
pub fn command(args: HtmlArgs) -> Result<u8, Failure> {
    let (index, counts) = super::open_trace::read_trace_counting_steps(&args.trace)?;
    let path = args.output.clone().unwrap_or_else(|| args.trace.with_extension("html"));
    let progress = Progress::new("html", index.events);
    let (page, stream_errors) = html_page::page(&index, counts, args.view.shown(), &progress);
    drop(progress);
    let mut output = OutputFile::create(&path, is_private(&args.trace), args.replace.force)?;
    if let Err(e) = output.file().write_all(page.as_bytes()) {
        output.abandon();
        return Err(output_lines::cannot_write(&path, e).into());
    }
    output.finish()?;
    print_line(&path.display().to_string())?;
    say(output_lines::OPEN_HTML);
    Ok(say_what_the_trace_lacks(&index, &stream_errors))
}
