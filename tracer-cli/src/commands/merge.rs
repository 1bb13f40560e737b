//! `cudatrace merge`: the traces of several nodes as one (see
//! [`crate::outputs::merged_trace`]).

use crate::analysis::check_regular_file;
use crate::commands::arguments::MergeArgs;
use crate::outputs::merged_trace::{self, InputFault, MergeInput};
use crate::outputs::wording::{merge_lines, not_regular_text, output_lines, problem_text};
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::terminal::say;
use std::io::{BufWriter, Write};

/// `cudatrace merge`; 1 if an input was damaged or incomplete.
pub fn command(args: MergeArgs) -> Result<u8, Failure> {
    let output = std::path::absolute(&args.output).unwrap_or_else(|_| args.output.clone());
    let mut inputs = Vec::new();
    for path in &args.traces {
        check_regular_file(path).map_err(|what| Failure::from(not_regular_text(path, what)))?;
        let same = std::fs::canonicalize(path).ok() == std::fs::canonicalize(&output).ok();
        if same && std::fs::metadata(&output).is_ok() {
            return Err(merge_lines::output_is_an_input(&args.output).into());
        }
        let input = MergeInput::open(path).map_err(|fault| {
            Failure::from(match fault {
                InputFault::CannotOpen(error) => output_lines::cannot_open(path, error),
                InputFault::Damaged(damage) => output_lines::unreadable_input(path, problem_text(&damage.problem)),
                InputFault::NoHeader => merge_lines::no_header(path),
            })
        })?;
        inputs.push(input);
    }
    let private = args.traces.iter().any(|path| is_private(path));
    let mut file = OutputFile::create(&args.output, private, args.replace.force)?;
    let mut out = BufWriter::with_capacity(1 << 20, file.file());
    let merged = merged_trace::write(inputs, &mut out).and_then(|summary| out.flush().map(|()| summary));
    drop(out);
    let summary = match merged {
        Ok(summary) => summary,
        Err(error) => {
            file.abandon();
            return Err(output_lines::cannot_write(&args.output, error).into());
        }
    };
    file.finish()?;
    for line in merge_lines::summary_lines(&args.traces, &summary) {
        say(&line);
    }
    println!("{}", args.output.display());
    let whole = summary.footer_written && summary.damage.iter().all(Vec::is_empty);
    Ok(if whole { 0 } else { 1 })
}
