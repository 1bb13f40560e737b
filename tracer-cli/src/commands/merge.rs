//! `cudatrace merge`: the traces of several nodes as one (see
//! [`crate::outputs::merged_trace`]).

use crate::analysis::check_regular_file;
use crate::commands::arguments::MergeArgs;
use crate::outputs::merged_trace::{self, InputFault, MergeFailure, MergeInput};
use crate::outputs::wording::{merge_lines, not_regular_text, output_lines, problem_text};
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::terminal::{print_line, say};
use std::io::{BufWriter, Write};
use std::path::Path;

/// Why an input cannot be read, in one line.
fn input_fault_text(path: &Path, fault: InputFault) -> String {
    match fault {
        InputFault::CannotOpen(error) => output_lines::cannot_open(path, error),
        InputFault::Damaged(damage) => output_lines::unreadable_input(path, problem_text(&damage.problem)),
        InputFault::NoHeader => merge_lines::no_header(path),
    }
}

/// `cudatrace merge`; 1 if an input was damaged or incomplete.
pub fn command(args: MergeArgs) -> Result<u8, Failure> {
    let output = std::path::absolute(&args.output).unwrap_or_else(|_| args.output.clone());
    let mut inputs: Vec<MergeInput> = Vec::new();
    let mut seen = Vec::new();
    for path in &args.traces {
        check_regular_file(path).map_err(|what| Failure::from(not_regular_text(path, what)))?;
        let canonical = std::fs::canonicalize(path).ok();
        if canonical.is_some() && canonical == std::fs::canonicalize(&output).ok() {
            return Err(merge_lines::output_is_an_input(&args.output).into());
        }
        // The same run twice would count every byte twice.
        if let Some(canonical) = canonical {
            if let Some(first) = seen.iter().position(|c| *c == canonical) {
                return Err(merge_lines::given_twice(&args.traces[first], path).into());
            }
            seen.push(canonical);
        }
        inputs.push(MergeInput::open(path).map_err(|fault| Failure::from(input_fault_text(path, fault)))?);
    }
    let private = args.traces.iter().any(|path| is_private(path));
    let mut file = OutputFile::create(&args.output, private, args.replace.force)?;
    let mut out = BufWriter::with_capacity(1 << 20, file.file());
    let merged = merged_trace::write(&inputs, &mut out)
        .and_then(|summary| out.flush().map(|()| summary).map_err(MergeFailure::Output));
    drop(out);
    let summary = match merged {
        Ok(summary) => summary,
        Err(failure) => {
            file.abandon();
            return Err(match failure {
                MergeFailure::Output(error) => output_lines::cannot_write(&args.output, error),
                MergeFailure::Input(path, fault) => input_fault_text(&path, fault),
            }
            .into());
        }
    };
    file.finish()?;
    for line in merge_lines::summary_lines(&args.traces, &summary) {
        say(&line);
    }
    print_line(&args.output.display().to_string())?;
    // No footer: an input was damaged, cut short or not placed in full.
    Ok(if summary.footer_written { 0 } else { 1 })
}
