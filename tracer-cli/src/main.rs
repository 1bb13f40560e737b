//! `cudatrace`: the tools that run outside the traced processes.
//!
//! - `run` runs a command with `libcudatrace.so` preloaded and collects every
//!   process of its tree into one trace;
//! - `collect` turns a folder of spools into a trace, merging what a stopped
//!   collector had written;
//! - `report` summarises a trace, for people or as JSON;
//! - `dump` prints spool files as JSON lines;
//! - `snapshot`, `perfetto`, `html` and `flamegraph` write a trace for viewers.
//! - `diff` compares two traces.

mod analysis;
mod cli;
mod collect;
mod collector;
mod diff;
mod dump;
mod errno;
mod failure;
mod flamegraph;
mod liveness;
mod notice_file;
mod output;
mod output_file;
mod outputs;
mod progress;
mod python_lines;
mod recover;
mod report;
mod run;
mod spool_dir;
mod spool_tail;
mod symbolize;
mod terminal;
mod wording;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // A trace growing past the file size limit must fail with EFBIG, which
    // cudatrace reports, not kill it (and the trace) with SIGXFSZ. Commands
    // it runs get the default back (see `run`).
    // SAFETY: setting a disposition before any thread exists.
    let inherited = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    run::INHERITED_SIGXFSZ.store(inherited, std::sync::atomic::Ordering::Relaxed);
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return terminal::parse_error(&error),
    };
    let result = match cli.command {
        cli::Command::Run(args) => run::run(args),
        cli::Command::Collect(args) => collect::collect(args),
        cli::Command::Report(args) => report::command(args),
        cli::Command::Dump(args) => dump::command(args),
        cli::Command::Snapshot(args) => outputs::snapshot::command(args),
        cli::Command::Perfetto(args) => outputs::perfetto::command(args),
        cli::Command::Html(args) => outputs::html::command(args),
        cli::Command::Flamegraph(args) => flamegraph::command(args),
        cli::Command::Diff(args) => diff::command(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            terminal::say(&format!("cudatrace: {}", failure.message));
            ExitCode::from(failure.code)
        }
    }
}
