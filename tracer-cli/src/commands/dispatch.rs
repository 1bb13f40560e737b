//! From the parsed command line to the subcommand's entry point.

use super::arguments::Command;
use super::{collect, diff, dump, export, flamegraph, html, merge, perfetto, report, run, snapshot, switch};
use crate::system::failure::Failure;

/// Runs one subcommand; its exit code, or why it failed.
pub fn dispatch(command: Command) -> Result<u8, Failure> {
    match command {
        Command::Run(args) => run::command(args),
        Command::Collect(args) => collect::command(args),
        Command::Report(args) => report::command(args),
        Command::Dump(args) => dump::command(args),
        Command::Snapshot(args) => snapshot::command(args),
        Command::Perfetto(args) => perfetto::command(args),
        Command::Html(args) => html::command(args),
        Command::Flamegraph(args) => flamegraph::command(args),
        Command::Diff(args) => diff::command(args),
        Command::Merge(args) => merge::command(args),
        Command::Export(args) => export::command(args),
        Command::Pause(args) => switch::pause(args),
        Command::Resume(args) => switch::resume(args),
    }
}
