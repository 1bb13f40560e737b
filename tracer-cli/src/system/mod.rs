//! What every other layer stands on: the terminal, progress bars, files
//! written safely, failures and their exit codes, and system error names.

pub mod beside_file;
pub mod errno;
pub mod failure;
pub mod output_file;
pub mod progress;
pub mod terminal;
pub mod trace_file;
pub mod write_failure;
