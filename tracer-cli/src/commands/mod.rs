//! One module per subcommand: each reads its arguments, calls the layers
//! below and says what happened.

pub mod arguments;
mod collect;
mod diff;
mod dump;
mod export;
mod flamegraph;
mod html;
pub mod max_size;
mod merge;
mod open_trace;
pub mod parse_failure;
mod perfetto;
mod report;
pub mod run;
mod snapshot;
mod switch;

use crate::system::failure::Failure;
use arguments::Command;

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
