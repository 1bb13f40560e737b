//! What every other layer stands on: the terminal, files
//! written safely, failures and their exit codes, system error names, and
//! the running traced jobs with their recording switches.

pub mod beside_file;
pub mod errno;
pub mod failure;
pub mod output_file;
pub mod procfs;
pub mod switch_file;
pub mod terminal;
pub mod trace_file;
pub mod traced_jobs;
pub mod write_failure;
