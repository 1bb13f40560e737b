//! `cudatrace flamegraph`: device bytes by call stack at the peak or at
//! exit, as an SVG or as folded stacks for other tools.

use crate::analysis::Moment;
use crate::analysis::Summary;
use crate::commands::arguments::FlamegraphArgs;
use crate::outputs::folded_stacks::{folded_stacks, folded_text, svg, total_bytes};
use crate::outputs::wording::bytes;
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::progress::Progress;
use std::io::Write;

/// `cudatrace flamegraph`; 1 if the trace is damaged.
pub fn command(args: FlamegraphArgs) -> Result<u8, Failure> {
    let index = super::open_trace::read_trace(&args.trace)?;
    let extension = if args.folded { "folded" } else { "svg" };
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| args.trace.with_extension(extension));
    let summary = Summary::build(&index, &Progress::new("reading", index.events));
    let (stacks, cache) = folded_stacks(&index, &summary, args.at.moment(), args.view.frames, args.cache);
    let moment = match args.at.moment() {
        Moment::Peak => "at each device's peak",
        Moment::Exit => "live at exit",
    };
    let left_out = if cache > 0 && !args.cache {
        let said = format!(
            "PyTorch's cache, {} reserved in no tensor, is left out (--cache shows it)",
            bytes(cache)
        );
        crate::system::terminal::say(&format!("cudatrace: {said}"));
        format!("; {said}")
    } else {
        String::new()
    };
    let content = if args.folded {
        folded_text(&stacks).into_bytes()
    } else {
        let title = format!("GPU memory {moment}: {}{left_out}", bytes(total_bytes(&stacks)));
        svg(&stacks, &title).map_err(|e| format!("{}: {e}", args.trace.display()))?
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
        return Err(format!("cannot write {}: {e}", path.display()).into());
    }
    output.finish()?;
    println!("{}", path.display());
    if !args.folded {
        crate::system::terminal::say("cudatrace: open the SVG in a browser: hover names a frame, click zooms");
    }
    Ok(crate::outputs::say_what_the_trace_lacks(&index, &summary.stream_errors))
}
