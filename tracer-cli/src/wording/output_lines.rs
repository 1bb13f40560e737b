//! What the commands that write an output (`html`, `perfetto`, `snapshot`,
//! `flamegraph`, `dump`, `export`) say on stderr, and why they fail.

use super::numbers::{bytes, count, thousands};
use cudatrace_analysis::DeviceKey;
use std::fmt::Display;
use std::path::Path;

/// An output file that could not be written.
pub fn cannot_write(path: &Path, error: impl Display) -> String {
    format!("cannot write {}: {error}", path.display())
}

/// An input file that could not be opened.
pub fn cannot_open(path: &Path, error: impl Display) -> String {
    format!("cannot open {}: {error}", path.display())
}

/// An input that is not what the command reads, and why.
pub fn unreadable_input(path: &Path, why: impl Display) -> String {
    format!("{}: {why}", path.display())
}

/// How to look at the page.
pub const OPEN_HTML: &str = "cudatrace: open the page in a browser; it needs no network";

/// How to look at the flame graph.
pub const OPEN_SVG: &str = "cudatrace: open the SVG in a browser: hover names a frame, click zooms";

/// How to look at the Perfetto file.
pub const OPEN_PERFETTO: &str = "cudatrace: open it at ui.perfetto.dev with \"Open trace file\"";

/// How to look at the pickles.
pub const OPEN_SNAPSHOT: &str = "cudatrace: drop a pickle onto pytorch.org/memory_viz, or run `python -m torch.cuda._memory_viz trace_plot PICKLE -o PAGE.html`";

/// `export -o DIR` where DIR is something other than a folder.
pub fn not_a_folder(path: &Path) -> String {
    format!("cannot export into {}: it is not a folder", path.display())
}

/// `export -o DIR` where DIR is a symbolic link to nothing.
pub fn link_to_nothing(path: &Path, target: &Path) -> String {
    format!(
        "cannot export into {}: it is a symbolic link to {}, which does not exist",
        path.display(),
        target.display()
    )
}

/// What `export` wrote, and how to read it.
pub fn exported(events: u64, call_sites: u64, traces: u64) -> String {
    format!(
        "cudatrace: {} and {} from {}; query them with DuckDB, Polars or Spark (docs/usage.md has examples)",
        count(events, "event", "events"),
        count(call_sites, "call site", "call sites"),
        count(traces, "trace", "traces")
    )
}

/// `--uncompressed` given for JSON, which is never compressed.
pub const JSON_UNCOMPRESSED: &str = "--uncompressed is for the protobuf format: JSON is never compressed";

/// A Perfetto JSON file larger than its UI opens.
pub fn perfetto_too_large(path: &Path, written: u64) -> String {
    format!(
        "cudatrace: {} is {}: Perfetto's UI may fail to open JSON this large; narrow it with --from/--to or --max-events, or leave out --format json",
        path.display(),
        bytes(written)
    )
}

/// A Perfetto protobuf file larger than its UI opens in a browser's memory.
pub fn perfetto_protobuf_too_large(path: &Path, written: u64) -> String {
    format!(
        "cudatrace: {} is {}: Perfetto's UI may run out of memory on a trace this large; narrow it with --from/--to or --max-events",
        path.display(),
        bytes(written)
    )
}

/// `--max-events` given something other than a count or `all`.
pub fn not_an_entry_limit(text: &str) -> String {
    format!("{text:?} is not a number of entries above 0, nor `all`")
}

/// The default limit left out some of a pickle's entries.
pub fn snapshot_kept_newest(path: &Path, kept_per_device: u64, left_out: u64) -> String {
    format!(
        "cudatrace: {} keeps each device's newest {} trace entries, which the memory visualizer opens; left out the oldest {} (--max-events all writes every one)",
        path.display(),
        thousands(kept_per_device),
        thousands(left_out)
    )
}

/// A pickle larger than the memory visualizer handles well.
pub fn snapshot_too_large(path: &Path, written: u64) -> String {
    format!(
        "cudatrace: {} is {}: the memory visualizer may lag or crash past 200 MiB; narrow it with --from/--to or --max-events",
        path.display(),
        bytes(written)
    )
}

/// The folder the snapshot's pickles are made in could not take them.
pub fn cannot_write_snapshot_in(folder: &Path, error: impl Display) -> String {
    format!("cannot write a snapshot in {}: {error}", folder.display())
}

/// Some pickles could not be written: why, and which were.
pub fn pickles_not_all_written(reasons: &[&str], written: &[&Path], not_written: &[&Path]) -> String {
    let list = |paths: &[&Path]| {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    };
    format!(
        "{}; written: {}; not written: {}",
        reasons.join("; "),
        list(written),
        list(not_written)
    )
}

/// `--pid` names no process of the trace.
pub fn no_such_process(trace: &Path, pid: u32) -> String {
    format!("{} has no process {pid}", trace.display())
}

/// Nothing to snapshot; `damage` names where the trace is damaged, if it is
/// (`skipped`: its damaged frames were skipped, the first named).
pub fn nothing_to_snapshot(trace: &Path, damage: Option<(&str, bool)>) -> String {
    let trace = trace.display();
    match damage {
        Some((damage, false)) => {
            format!("{trace} has no memory events to snapshot before its damage: it is damaged {damage}")
        }
        Some((first, true)) => {
            format!("{trace} has no memory events to snapshot outside its damaged frames (the first {first})")
        }
        None => format!("{trace} has no memory events to snapshot"),
    }
}

/// PyTorch's cache left out of the flame graph.
pub fn cache_left_out(cache: u64) -> String {
    format!(
        "PyTorch's cache, {} reserved in no tensor, is left out (--cache shows it)",
        bytes(cache)
    )
}

/// The flame graph's title: `moment` (at the peak or at exit), its total,
/// and what it leaves out.
pub fn flamegraph_title(
    failure: Option<(usize, u32, DeviceKey)>,
    at_peak: bool,
    total: u64,
    left_out: Option<&str>,
) -> String {
    let moment = match failure {
        Some((n, pid, device)) => format!(
            "held at out-of-memory failure {n} (pid {pid}, {})",
            super::devices::device_label(device)
        ),
        None if at_peak => "at each device's peak".to_string(),
        None => "live at exit".to_string(),
    };
    let left_out = left_out.map_or_else(String::new, |said| format!("; {said}"));
    format!("GPU memory {moment}: {}{left_out}", bytes(total))
}

/// `--at oom:N` past the failures the trace has.
pub fn no_such_oom(trace: &Path, n: usize, ooms: usize) -> String {
    match ooms {
        0 => format!("{} has no out-of-memory failure", trace.display()),
        _ => format!(
            "{} has {}; --at oom:{n} names none",
            trace.display(),
            super::numbers::count(ooms as u64, "out-of-memory failure", "out-of-memory failures")
        ),
    }
}

/// `--at oom:N` of a failure whose state the replay did not keep.
pub fn oom_state_not_kept(n: usize, kept: usize) -> String {
    format!("what held the device at out-of-memory failure {n} was not kept: only the first {kept} failures of a device keep it")
}

/// `snapshot --at oom` with `--to`, or with `--from` past the failure.
pub const AT_OOM_WINDOW: &str =
    "--at oom ends the snapshot at the failure: give no --to, and a --from before the failure";

/// `snapshot --at peak` of several processes.
pub const AT_PEAK_NEEDS_ONE_PROCESS: &str = "--at peak is one process's peak: name the process with --pid";

/// `snapshot --at peak` with `--to`, or with `--from` past the peak.
pub const AT_PEAK_WINDOW: &str = "--at peak ends the snapshot at the peak: give no --to, and a --from before the peak";

/// `snapshot` of a folded trace, no window given: what it covers.
pub fn snapshot_of_detail(from: f64, end: f64) -> String {
    format!(
        "cudatrace: the trace was folded to stay under its size cap: the snapshot shows its detail, from {from:.3} s \
         to the end ({end:.3} s), starting from the memory live then"
    )
}

/// `snapshot` of a folded trace, over a span that starts before its detail.
pub fn snapshot_reaches_before_detail(from: f64) -> String {
    format!(
        "cudatrace: the trace was folded to stay under its size cap: before {from:.3} s the snapshot's history holds \
         only what folding kept (the memory live at the peaks, the OOMs and {from:.3} s), not every event"
    )
}

/// `snapshot --from` of a folded trace, within its detail.
pub fn snapshot_within_detail(from: f64) -> String {
    format!("cudatrace: the trace was folded to stay under its size cap; its detail starts at {from:.3} s")
}

/// `snapshot --at peak`: which moment it ends at.
pub fn snapshot_at_peak(pid: u32, peak: u64, seconds: f64) -> String {
    format!(
        "cudatrace: the peak of pid {pid}, {} at {seconds:.3} s: the snapshot ends there",
        bytes(peak)
    )
}

/// `snapshot --at oom:N --pid P` where the failure is another process's.
pub fn oom_of_another_process(n: usize, pid: u32) -> String {
    format!("out-of-memory failure {n} is pid {pid}'s; leave out --pid, or name {pid}")
}

/// `snapshot --at oom:N`: which failure, of which process, it shows.
pub fn snapshot_at_oom(n: usize, pid: u32, seconds: f64) -> String {
    format!("cudatrace: out-of-memory failure {n} (pid {pid}, at {seconds:.3} s): the snapshot ends there")
}

/// A file given to `dump` that is empty and not named as a spool.
pub const EMPTY_FILE: &str = "an empty file, neither a cudatrace spool nor a trace";

/// `dump` with nothing to dump.
pub const DUMP_NEEDS_INPUT: &str = "dump needs spool files or traces, or --dir DIR (see --help)";

/// A time that is not a number of seconds.
pub fn not_seconds(text: &str) -> String {
    format!("`{text}` is not a number of seconds (0 or more)")
}
