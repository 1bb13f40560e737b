//! `cudatrace`: the tools that run outside the traced processes.
//!
//! The command is built in layers; each uses only the layers below it, and
//! the collector and the outputs, side by side, use neither each other
//! (`tests/layers.rs` checks it):
//!
//! | layer | job |
//! | --- | --- |
//! | [`commands`] | one module per subcommand: its arguments, the calls below, what it says on stderr |
//! | [`collector`] and [`outputs`] | following live spools into a trace while a tree runs, and merging what a stopped collector left; beside it, one writer per format (report text and JSON, snapshot pickles, Perfetto protobuf and JSON, the HTML page, folded stacks, diff tables, Parquet) |
//! | [`wording`] | the words every sentence is made of: what the commands and the collector say, and the words several outputs share |
//! | [`system`] | the terminal, files written safely, failures and their exit codes, system error names, the traced jobs and their switches |
//!
//! Below them all stands the crate [`cudatrace_analysis`]: the trace model,
//! the one replay engine every output and analysis is a consumer of, and the
//! symbolization of a collected run's stacks (with the progress bar of a
//! pass over a trace).
//!
//! The subcommands:
//! - `run` runs a command with `libcudatrace.so` preloaded and collects every
//!   process of its tree into one trace;
//! - `collect` turns a folder of spools into a trace, merging what a stopped
//!   collector had written;
//! - `report` summarises a trace, for people or as JSON;
//! - `dump` prints spool files as JSON lines;
//! - `snapshot`, `perfetto`, `html` and `flamegraph` write a trace for viewers;
//! - `diff` compares two traces;
//! - `export` writes traces as Parquet, for queries across many ranks.

mod collector;
mod commands;
mod outputs;
mod system;
mod wording;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // A trace growing past the file size limit must fail with EFBIG, which
    // cudatrace reports, not kill it (and the trace) with SIGXFSZ. Commands
    // it runs get the default back (see `run`).
    // SAFETY: setting a disposition before any thread exists.
    let inherited = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    commands::run::INHERITED_SIGXFSZ.store(inherited, std::sync::atomic::Ordering::Relaxed);
    let cli = match commands::arguments::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return commands::parse_failure::parse_error(&error),
    };
    let result = commands::dispatch(cli.command);
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            system::terminal::say(&wording::said(&failure.message));
            ExitCode::from(failure.code)
        }
    }
}
