//! The command line: what each subcommand accepts. Parsing only; the work
//! is done by the module of each subcommand.

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// Records every CUDA memory allocation of a program and its children, and
/// reports where GPU memory went.
#[derive(Parser, Debug)]
#[command(name = "cudatrace", version, propagate_version = true, arg_required_else_help = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command with libcudatrace.so preloaded and record it, and every
    /// process it starts, into one trace. Exits with the command's status.
    Run(RunArgs),
    /// Turn a folder of spools into a trace: after a crash of cudatrace, or
    /// for spools written with CUDATRACE_DIR.
    Collect(CollectArgs),
    /// Summarise a trace: per process and GPU, allocations, peak, memory live
    /// at exit, out-of-memory failures, and any events the trace lacks.
    Report(ReportArgs),
    /// Print spool files as JSON lines.
    Dump(DumpArgs),
}

/// `cudatrace run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Write the trace here [default: cudatrace-<CMD>-<pid>.trace]. Refused
    /// before CMD starts if it cannot be written or another cudatrace is
    /// writing it; a finished trace there is replaced.
    #[arg(short = 'o', long = "output", value_name = "TRACE")]
    pub output: Option<PathBuf>,
    /// The library to preload [default: $CUDATRACE_PRELOAD, else the
    /// libcudatrace.so next to cudatrace].
    #[arg(long, value_name = "LIB")]
    pub preload: Option<PathBuf>,
    /// Keep the per-process spool files, with every record, after the trace
    /// is written.
    #[arg(long)]
    pub keep_spools: bool,
    /// Which call stacks each event carries [default: $CUDATRACE_STACKS, else all].
    #[arg(long, value_enum, value_name = "WHICH")]
    pub stacks: Option<Stacks>,
    /// Deepest stack recorded, in frames (at most 256) [default:
    /// $CUDATRACE_MAX_DEPTH, else 64].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_depth: Option<u32>,
    /// The command to run, and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Which frames stacks hold.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stacks {
    /// No stacks.
    None,
    /// Native (C, C++, Rust) frames.
    Native,
    /// Python frames.
    Python,
    /// Both, interleaved.
    All,
}

impl Stacks {
    /// The value of `CUDATRACE_STACKS`.
    pub fn name(self) -> &'static str {
        match self {
            Stacks::None => "none",
            Stacks::Native => "native",
            Stacks::Python => "python",
            Stacks::All => "all",
        }
    }
}

/// `cudatrace collect`.
#[derive(Args, Debug)]
pub struct CollectArgs {
    /// The folder of spool files.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Write the trace here [default: the trace the folder's collector was
    /// writing, merged and completed; else DIR.trace].
    #[arg(short = 'o', long = "output", value_name = "TRACE")]
    pub output: Option<PathBuf>,
    /// Replace TRACE if it exists (it may be the only copy of a recovery).
    #[arg(long)]
    pub force: bool,
    /// Keep the spool files after the trace is written.
    #[arg(long)]
    pub keep_spools: bool,
    /// Collect while the tree of this process runs (used by libcudatrace.so).
    #[arg(long, value_name = "PID", hide = true)]
    pub root_pid: Option<u32>,
    /// Return at once and collect in the background (used by libcudatrace.so).
    #[arg(long, hide = true)]
    pub detach: bool,
}

/// `cudatrace report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// The trace to read.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
}

/// `cudatrace dump`.
#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Dump every spool in this folder too.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Spool files to dump.
    #[arg(value_name = "SPOOL")]
    pub spools: Vec<PathBuf>,
}
