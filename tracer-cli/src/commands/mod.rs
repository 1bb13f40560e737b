//! One module per subcommand: each reads its arguments, calls the layers
//! below and says what happened.

pub mod arguments;
mod collect;
mod diff;
mod dispatch;
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

pub use dispatch::dispatch;
