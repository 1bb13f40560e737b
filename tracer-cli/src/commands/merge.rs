//! `cudatrace merge`: the traces of several nodes as one (see
//! [`crate::outputs::merged_trace`]).

use crate::commands::arguments::MergeArgs;
use crate::outputs::merged_trace::{self, InputFault, MergeFailure, MergeInput};
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::terminal::{print_line, say};
use crate::wording::{merge_lines, not_regular_text, output_lines, problem_text};
use cudatrace_analysis::check_regular_file;
use std::io::{BufWriter, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why an input cannot be read, in one line.
fn input_fault_text(path: &Path, fault: InputFault) -> String {
    match fault {
        InputFault::CannotOpen(error) => output_lines::cannot_open(path, error),
        InputFault::Damaged(damage) => output_lines::unreadable_input(path, problem_text(&damage.problem)),
        InputFault::NoHeader => merge_lines::no_header(path),
    }
}

/// The device and inode of the file at `path` (a link followed), which
/// name it whatever path, link or hard link leads to it.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|meta| (meta.dev(), meta.ino()))
}

/// `cudatrace merge`; 1 if an input was damaged or incomplete.
pub fn command(args: MergeArgs) -> Result<u8, Failure> {
    let output = file_identity(&args.output);
    let mut seen: Vec<(u64, u64)> = Vec::new();
    for path in &args.traces {
        check_regular_file(path).map_err(|what| Failure::from(not_regular_text(path, what)))?;
        let Some(identity) = file_identity(path) else {
            continue; // opening it says why not
        };
        if output == Some(identity) {
            return Err(merge_lines::output_is_an_input(&args.output).into());
        }
        // The same run twice would count every byte twice.
        if let Some(first) = seen.iter().position(|&other| other == identity) {
            return Err(merge_lines::given_twice(&args.traces[first], path).into());
        }
        seen.push(identity);
    }
    let mut inputs: Vec<MergeInput> = Vec::new();
    for path in &args.traces {
        inputs.push(MergeInput::open(path).map_err(|fault| Failure::from(input_fault_text(path, fault)))?);
    }
    // Two files of one run: a copy, the spools collected twice, or a
    // merged trace that holds the other input already.
    if let Some(same) = merged_trace::same_run(&inputs) {
        return Err(merge_lines::same_run(
            &args.traces[same.first],
            &args.traces[same.again],
            same.process.as_ref(),
        )
        .into());
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
