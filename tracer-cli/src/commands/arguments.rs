//! The command line: what each subcommand accepts. Parsing only; the work
//! is done by the module of each subcommand.

use clap::{Args, Parser, Subcommand};
use cudatrace_analysis::FramesShown;
use cudatrace_analysis::Moment;
use cudatrace_events::sizes::SizeError;
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
    #[command(after_long_help = crate::wording::run_lines::environment_help())]
    Run(RunArgs),
    /// Turn a folder of spools into a trace: after a crash of cudatrace, or
    /// for spools written with CUDATRACE_DIR.
    Collect(CollectArgs),
    /// Summarise a trace: per process and GPU, allocations, peak, memory live
    /// at exit, out-of-memory failures, and any events the trace lacks.
    Report(ReportArgs),
    /// Print spool files or traces as JSON lines.
    Dump(DumpArgs),
    /// Write one pickle per process in the format of PyTorch's memory
    /// snapshots, for its memory visualizer and `torch.cuda._memory_viz`.
    Snapshot(SnapshotArgs),
    /// Write a Perfetto trace (protobuf, or Chrome trace-event JSON), for
    /// Perfetto's UI.
    Perfetto(PerfettoArgs),
    /// Write one self-contained HTML report with charts and tables.
    Html(HtmlArgs),
    /// Draw device memory by call stack, at the peak or at exit, as an SVG
    /// flamegraph, or write it as folded stacks.
    Flamegraph(FlamegraphArgs),
    /// Compare two traces: bytes at the peak and at exit by call site and by
    /// owner, largest growth first. Call sites are matched by their
    /// symbolized frames.
    Diff(DiffArgs),
    /// Join the traces of several nodes (one `cudatrace run` each) into one
    /// trace: processes keep their host, and times are lined up on the
    /// hosts' wall clocks. Every command reads the merged trace.
    Merge(MergeArgs),
    /// Write traces as Parquet for DuckDB, Polars or Spark: events.parquet
    /// (every allocation, free, tensor action and out-of-memory failure of
    /// every trace, one row each) and call_sites.parquet (each call site
    /// once, its id the same in every trace) in DIR.
    Export(ExportArgs),
    /// Pause a running traced job's recording: its events are still
    /// recorded, so every byte stays accounted for, but without call
    /// stacks, until `cudatrace resume`. The trace says which spans were
    /// paused.
    Pause(PauseArgs),
    /// Resume recording call stacks in a running traced job; --stacks
    /// changes which.
    Resume(ResumeArgs),
}

/// `cudatrace pause`.
#[derive(Args, Debug)]
pub struct PauseArgs {
    /// The job: the pid of one of its processes (or of the `cudatrace run`
    /// that started it), or its spool folder [default: the job this
    /// command runs in, else the one traced job of yours started from this
    /// terminal].
    #[arg(value_name = "PID|FOLDER")]
    pub job: Option<String>,
}

/// `cudatrace resume`.
#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// Which call stacks events carry from now on [default: those the job
    /// was started with].
    #[arg(long, value_enum, value_name = "WHICH")]
    pub stacks: Option<Stacks>,
    /// The job, as for `cudatrace pause`.
    #[arg(value_name = "PID|FOLDER")]
    pub job: Option<String>,
}

/// `cudatrace merge`.
#[derive(Args, Debug)]
pub struct MergeArgs {
    /// Write the merged trace here.
    #[arg(short = 'o', long = "output", value_name = "TRACE", required = true)]
    pub output: PathBuf,
    #[command(flatten)]
    pub replace: Replace,
    /// The traces to merge, one per node (or any number of runs).
    #[arg(value_name = "TRACE", required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,
}

/// `cudatrace diff`.
#[derive(Args, Debug)]
pub struct DiffArgs {
    /// Print one JSON object instead of text (every row).
    #[arg(long)]
    pub json: bool,
    /// List every call site and owner, the unchanged ones too.
    #[arg(long)]
    pub all: bool,
    /// The first run's trace (the baseline).
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The second run's trace.
    #[arg(value_name = "B")]
    pub b: PathBuf,
}

/// `cudatrace export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Write events.parquet and call_sites.parquet into this folder
    /// (created if missing). Refused if either file is there already
    /// (unless --force).
    #[arg(short = 'o', long = "output", value_name = "DIR", required = true)]
    pub output: PathBuf,
    #[command(flatten)]
    pub replace: Replace,
    /// The traces to export: one per rank, say.
    #[arg(value_name = "TRACE", required = true)]
    pub traces: Vec<PathBuf>,
}

/// `cudatrace run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Write the trace here [default: cudatrace-<CMD>-<pid>.trace]. Refused
    /// before CMD starts if it cannot be written, another cudatrace is
    /// writing it, or a file is there already (unless --force).
    #[arg(short = 'o', long = "output", value_name = "TRACE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub replace: Replace,
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
    /// Deepest stack walked for each event, in frames (at most 256); in
    /// Python, the frames below the outermost Python call are walked once
    /// a thread and not counted [default: $CUDATRACE_MAX_DEPTH, else 64].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_depth: Option<u32>,
    /// Record PyTorch's tensors (the actions of its CUDA caching
    /// allocator) in processes that use it [default: $CUDATRACE_TENSORS,
    /// else on].
    #[arg(long, value_enum, value_name = "ON_OFF")]
    pub tensors: Option<Switch>,
    /// Start with recording paused: events are recorded without call
    /// stacks until `cudatrace resume`.
    #[arg(long)]
    pub start_paused: bool,
    /// Leave kernel launches alone: their first launches (lazily loaded
    /// kernels) go unmeasured, and later ones cost nothing at all.
    #[arg(long)]
    pub no_launch_hooks: bool,
    /// Largest the trace may grow, such as 2GiB, 256MiB or unlimited: past
    /// it, older events are folded into summaries, keeping the newest in
    /// full detail and the state at the peak and at each OOM exactly
    /// [default: $CUDATRACE_MAX_SIZE, else 2GiB].
    #[arg(long, value_name = "SIZE", value_parser = super::max_size::parse_max_size, allow_hyphen_values = true)]
    pub max_size: Option<super::max_size::MaxSize>,
    /// Make every GPU look and behave like a card with SIZE of memory, such
    /// as 24GiB (K, M, G count in 1024s; KB, MB, GB in 1000s: 24GB is 22.4
    /// GiB): memory queries report SIZE, and allocations past it fail as
    /// out of memory, across the whole process tree. The report says
    /// whether the job fit. `off` for none [default: $CUDATRACE_LIMIT, else
    /// no limit].
    #[arg(long, value_name = "SIZE", value_parser = parse_limit, allow_hyphen_values = true)]
    pub limit: Option<u64>,
    /// The command to run, and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Parses `--limit`: a size such as 24GiB, at least 1MiB; `off` or `0`
/// (returned as 0) for no limit.
pub fn parse_limit(text: &str) -> Result<u64, String> {
    if matches!(text.trim(), "off" | "0") {
        return Ok(0);
    }
    match cudatrace_events::sizes::parse_bytes(text) {
        Ok(bytes) if bytes >= 1 << 20 => Ok(bytes),
        Ok(_) => Err(format!("'{text}' is too small for a GPU: give at least 1MiB")),
        Err(SizeError::TooLarge) => Err(format!(
            "'{text}' is too large: a limit is under 16EiB; give off for no limit"
        )),
        Err(SizeError::NotASize) => Err(format!(
            "'{text}' is not a size (a number of bytes, K, M, G or T, with iB or B, such as 24GiB), nor off"
        )),
    }
}

/// On or off.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

impl Switch {
    /// The value of the environment variable.
    pub fn name(self) -> &'static str {
        match self {
            Switch::On => "on",
            Switch::Off => "off",
        }
    }
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

/// `--force`, for commands that write what `-o` names.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct Replace {
    /// Replace the output if a file is there already.
    #[arg(long)]
    pub force: bool,
}

/// `--frames`, for commands that show call stacks.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct StackView {
    /// How much of each call stack to show: runs of framework frames folded
    /// into one, or every frame.
    #[arg(long, value_enum, value_name = "HOW", default_value = "folded")]
    pub frames: Frames,
}

impl StackView {
    /// How much of each stack the outputs show.
    pub fn shown(self) -> FramesShown {
        match self.frames {
            Frames::Folded => FramesShown::Folded,
            Frames::Full => FramesShown::Full,
        }
    }
}

/// `--frames`'s values: the analysis's [`FramesShown`], as the command
/// line names them.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Frames {
    /// Runs of framework frames folded into one line each.
    #[default]
    Folded,
    /// Every frame.
    Full,
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
    /// Largest the trace may grow, such as 2GiB or unlimited: past it,
    /// older events are folded into summaries, as `run --max-size` does
    /// [default: the cap the folder's run had, else $CUDATRACE_MAX_SIZE,
    /// else 2GiB].
    #[arg(long, value_name = "SIZE", value_parser = super::max_size::parse_max_size, allow_hyphen_values = true)]
    pub max_size: Option<super::max_size::MaxSize>,
    /// Collect while the tree of this process runs (used by libcudatrace.so).
    #[arg(long, value_name = "PID", hide = true)]
    pub root_pid: Option<u32>,
    /// Return at once and collect in the background (used by libcudatrace.so).
    #[arg(long, hide = true)]
    pub detach: bool,
    /// Write the trace in this folder, named after the first image that
    /// recorded (used by libcudatrace.so when no trace was named).
    #[arg(long, value_name = "FOLDER", hide = true, conflicts_with = "output")]
    pub trace_folder: Option<PathBuf>,
}

/// `cudatrace report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Give every out-of-memory failure in detail [default: each device's
    /// first ones, and every one counted by call site].
    #[arg(long)]
    pub all_ooms: bool,
    #[command(flatten)]
    pub view: StackView,
    /// The trace to read.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
}

/// The part of a run a conversion covers.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct WindowArgs {
    /// Leave out what happened before this many seconds into the run.
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub from: Option<f64>,
    /// Leave out what happened after this many seconds into the run.
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub to: Option<f64>,
    /// Keep only the newest N events (trace entries), as PyTorch's
    /// `max_entries` does; `all` keeps every one [default: `snapshot`, the
    /// newest 100000 of each device; `perfetto`, all].
    #[arg(long, value_name = "N|all", value_parser = entry_limit)]
    pub max_events: Option<EntryLimit>,
}

/// `--max-events`: a number of entries, or every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryLimit {
    /// Every entry.
    All,
    /// Only the newest this many.
    Newest(u64),
}

impl WindowArgs {
    /// The newest entries to keep, given `default` where `--max-events` is
    /// not given; `None` for every one.
    pub fn max_events_or(&self, default: Option<u64>) -> Option<u64> {
        match self.max_events {
            None => default,
            Some(EntryLimit::All) => None,
            Some(EntryLimit::Newest(n)) => Some(n),
        }
    }
}

fn entry_limit(text: &str) -> Result<EntryLimit, String> {
    if text == "all" {
        return Ok(EntryLimit::All);
    }
    match text.parse::<u64>() {
        Ok(n) if n > 0 => Ok(EntryLimit::Newest(n)),
        _ => Err(crate::wording::output_lines::not_an_entry_limit(text)),
    }
}

fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value),
        _ => Err(crate::wording::output_lines::not_seconds(text)),
    }
}

/// `cudatrace snapshot`.
#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// The trace to read.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Name the pickles PATH's stem followed by .PID.pickle [default: the
    /// trace's].
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub replace: Replace,
    /// Only the process with this pid [default: every process with memory events].
    #[arg(long, value_name = "P")]
    pub pid: Option<u32>,
    /// `oom`: end the snapshot at the run's first out-of-memory failure, in
    /// the process that failed, so that it shows what held the memory then
    /// (`oom:N`: the Nth failure, in time order); `peak`: end it at the
    /// process's peak (one process: the only one, or --pid's); `exit` (the
    /// default): the whole run.
    #[arg(long, value_name = "WHEN", value_parser = parse_moment)]
    pub at: Option<Moment>,
    #[command(flatten)]
    pub window: WindowArgs,
}

/// `cudatrace perfetto`.
#[derive(Args, Debug)]
pub struct PerfettoArgs {
    /// The trace to read.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Write it here [default: the trace's path with .pftrace, or with
    /// .perfetto.json for --format json].
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// The file format [default: json where -o names a .json file, else
    /// protobuf].
    #[arg(long = "format", value_name = "FORMAT", value_enum)]
    pub format: Option<PerfettoFormat>,
    /// Write the protobuf's packets as they are, not deflated in batches:
    /// a larger file, for tools that read the packets themselves.
    #[arg(long = "uncompressed")]
    pub uncompressed: bool,
    #[command(flatten)]
    pub replace: Replace,
    #[command(flatten)]
    pub window: WindowArgs,
}

impl PerfettoArgs {
    /// The format to write: the one asked for, else JSON where the output
    /// is named `.json` (a user who names a JSON file wants JSON), else
    /// protobuf.
    pub fn chosen_format(&self) -> PerfettoFormat {
        let json_name = self
            .output
            .as_ref()
            .is_some_and(|path| path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")));
        self.format.unwrap_or(if json_name {
            PerfettoFormat::Json
        } else {
            PerfettoFormat::Protobuf
        })
    }
}

/// The file format of `cudatrace perfetto`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfettoFormat {
    /// Perfetto's protobuf trace format: compact, for large traces.
    Protobuf,
    /// Chrome trace-event JSON: readable, but about 14 times larger.
    Json,
}

/// `cudatrace html`.
#[derive(Args, Debug)]
pub struct HtmlArgs {
    /// The trace to read.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    #[command(flatten)]
    pub view: StackView,
    /// Write the page here [default: the trace's path with .html].
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub replace: Replace,
}

/// `cudatrace flamegraph`.
#[derive(Args, Debug)]
pub struct FlamegraphArgs {
    /// The trace to read.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Write here, `-` for stdout [default: the trace's path with .svg, or
    /// .folded].
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub replace: Replace,
    /// Which moment: each device at its peak (`peak`), what was live at
    /// exit (`exit`), or what the failing device held at the run's first
    /// out-of-memory failure (`oom`), or its Nth (`oom:N`).
    #[arg(long, value_name = "WHEN", default_value = "peak", value_parser = parse_moment)]
    pub at: Moment,
    /// Write folded stacks (`frame;frame;... bytes`, with `;`, spaces and `%`
    /// in names escaped as %3B, %20 and %25) instead of an SVG.
    #[arg(long)]
    pub folded: bool,
    /// Also show what PyTorch's cache holds in no tensor, as one frame
    /// [default: left out where tensors were recorded, so that they fill
    /// the graph; its bytes are said].
    #[arg(long)]
    pub cache: bool,
    #[command(flatten)]
    pub view: StackView,
}

/// `cudatrace dump`.
#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Dump every spool in this folder too.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Spool files or traces to dump.
    #[arg(value_name = "FILE")]
    pub spools: Vec<PathBuf>,
}

/// `flamegraph --at`: `peak`, `exit`, `oom` or `oom:N` (N from 1).
fn parse_moment(text: &str) -> Result<Moment, String> {
    match text {
        "peak" => Ok(Moment::Peak),
        "exit" => Ok(Moment::Exit),
        "oom" => Ok(Moment::Oom(1)),
        _ => text
            .strip_prefix("oom:")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .map(Moment::Oom)
            .ok_or_else(|| "expected peak, exit, oom or oom:N (N from 1)".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_a_size_of_at_least_a_mebibyte_or_off() {
        assert_eq!(parse_limit("24GiB"), Ok(24 << 30));
        assert_eq!(parse_limit("off"), Ok(0));
        assert_eq!(
            parse_limit("1000"),
            Err("'1000' is too small for a GPU: give at least 1MiB".to_string())
        );
        assert_eq!(
            parse_limit("lots"),
            Err(
                "'lots' is not a size (a number of bytes, K, M, G or T, with iB or B, such as 24GiB), nor off"
                    .to_string()
            )
        );
        // 2^24 TiB is 2^64 bytes: a size, but one too large to count.
        assert_eq!(
            parse_limit("16777216T"),
            Err("'16777216T' is too large: a limit is under 16EiB; give off for no limit".to_string())
        );
        assert_eq!(
            parse_limit("99999999999999999999"),
            Err("'99999999999999999999' is too large: a limit is under 16EiB; give off for no limit".to_string())
        );
    }
}
