//! `cudatrace snapshot`: one pickle per process in the format of PyTorch's
//! memory snapshots (see [`crate::outputs::torch_snapshot`]).

use crate::commands::arguments::SnapshotArgs;
use crate::outputs::{say_what_the_trace_lacks, torch_snapshot};
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::terminal::{print_line, say};
use crate::system::write_failure::WriteFailure;
use crate::wording::damage_text;
use crate::wording::output_lines;
use crate::wording::write_failure_text;
use cudatrace_analysis::Progress;
use cudatrace_analysis::{Moment, OomsKept, Summary, TraceIndex, Window};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Past this size a snapshot lags or crashes the viewer's browser tab.
const WARN_BYTES: u64 = 200 << 20;

/// `cudatrace snapshot`; 1 if the trace is damaged.
pub fn command(args: SnapshotArgs) -> Result<u8, Failure> {
    let index = super::open_trace::read_trace(&args.trace)?;
    let mut selected = selected_processes(&index, &args)?;
    let mut window = Window::seconds(index.start_ns(), args.window.from, args.window.to);
    if let Some((process, end_ns, said, window_refused)) = moment_end(&index, &args, &selected)? {
        // The moment ends the snapshot: a window ending earlier, or starting
        // after it, would not show it.
        if args.window.to.is_some() || window.is_before(end_ns) {
            return Err(window_refused.into());
        }
        selected = vec![process];
        window.to_ns = Some(end_ns);
        say(&said);
    }
    // Each process's detail starts at its own fold's cut: one cut in a
    // trace of one collector, one a host in a merged trace. The processes
    // of each cut are snapshot together, with that cut's window.
    let mut by_cut: Vec<(Option<u64>, Vec<usize>)> = Vec::new();
    for &process in &selected {
        let cut = index.processes[process].fold.as_ref().map(|f| f.detail_from_ns);
        match by_cut.iter_mut().find(|(c, _)| *c == cut) {
            Some((_, group)) => group.push(process),
            None => by_cut.push((cut, vec![process])),
        }
    }
    let stem = output_stem(&args.trace, args.output.as_deref());
    let names = pickle_names(&index, &selected, &stem);
    let folder = stem
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let max_events = args.window.max_events_or(Some(torch_snapshot::DEFAULT_MAX_EVENTS));
    let mut made = Vec::new();
    for (cut, group) in by_cut {
        let mut window = window;
        if let Some(detail_from_ns) = cut {
            say(&folded_span(&index, &mut window, detail_from_ns));
        }
        let passes = torch_snapshot::passes(&index, &group);
        let progress = Progress::new("snapshot", index.events * passes);
        let targets = group.iter().map(|&p| (p, names[&p].clone())).collect();
        made.push(
            torch_snapshot::make(&index, targets, window, max_events, folder, &progress)
                .map_err(|e| output_lines::cannot_write_snapshot_in(folder, e))?,
        );
    }
    // Nothing is written if any pickle would replace a file.
    if !args.replace.force {
        if let Some(existing) = made.iter().flat_map(|m| &m.pickles).find(|s| s.path().is_file()) {
            return Err(WriteFailure::Exists(existing.path().to_owned()).into());
        }
    }
    // Only the default limit is said: a limit given was asked for.
    let default_limit = args
        .window
        .max_events
        .is_none()
        .then_some(torch_snapshot::DEFAULT_MAX_EVENTS);
    let mut status = 0;
    for made in made {
        status = status.max(write_pickles(&index, made, is_private(&args.trace), default_limit)?);
    }
    Ok(status)
}

/// Each selected process's pickle: `STEM.PID.pickle` (`STEM.PID-IMAGE` after
/// an `exec`). A merged trace's hosts may reuse each other's pids
/// (containers number theirs from 1), so where a trace has several hosts
/// the name has the host too; a name that would still repeat (one host's
/// trace merged with a copy of itself) gets the process's index.
fn pickle_names(index: &TraceIndex, selected: &[usize], stem: &Path) -> HashMap<usize, PathBuf> {
    let several_hosts = index.several_hosts();
    let mut names: HashMap<usize, PathBuf> = HashMap::new();
    let mut taken: HashSet<PathBuf> = HashSet::new();
    for &process in selected {
        let start = &index.processes[process].start;
        let host = if several_hosts {
            // A host name is the recorder's word, not a path: no separators.
            let safe: String = start
                .place
                .host
                .chars()
                .map(|c| if c == '/' || c.is_control() { '_' } else { c })
                .collect();
            format!(".{}", safe.trim_start_matches('.'))
        } else {
            String::new()
        };
        let image = if start.image == 0 {
            String::new()
        } else {
            format!("-{}", start.image)
        };
        let mut name = PathBuf::from(format!("{}{host}.{}{image}.pickle", stem.display(), start.pid));
        if taken.contains(&name) {
            name = PathBuf::from(format!(
                "{}{host}.{}{image}.p{process}.pickle",
                stem.display(),
                start.pid
            ));
        }
        taken.insert(name.clone());
        names.insert(process, name);
    }
    names
}

/// A folded trace's snapshot covers its detailed span unless a window or
/// a moment before it is asked for; the line that says which.
fn folded_span(index: &TraceIndex, window: &mut Window, detail_from_ns: u64) -> String {
    let seconds = |ns: u64| ns.saturating_sub(index.start_ns()) as f64 / 1e9;
    let ends_before_detail = window.to_ns.is_some_and(|to| to < detail_from_ns);
    if window.from_ns.is_none() && !ends_before_detail {
        window.from_ns = Some(detail_from_ns);
        return output_lines::snapshot_of_detail(seconds(detail_from_ns), seconds(index.end_ns()));
    }
    if window.from_ns.is_none_or(|from| from < detail_from_ns) {
        return output_lines::snapshot_reaches_before_detail(seconds(detail_from_ns));
    }
    output_lines::snapshot_within_detail(seconds(detail_from_ns))
}

/// Where `--at` ends the snapshot: (the one process written, the end, the
/// line that says so, why a window that would hide it is refused); `None`
/// for the whole run.
fn moment_end(
    index: &TraceIndex,
    args: &SnapshotArgs,
    selected: &[usize],
) -> Result<Option<(usize, u64, String, &'static str)>, Failure> {
    let seconds = |ns: u64| ns.saturating_sub(index.start_ns()) as f64 / 1e9;
    let summary = || Summary::build_without_steps(index, &Progress::new("reading", index.events));
    match args.at {
        None | Some(Moment::Exit) => Ok(None),
        // The failing process only, up to its failure.
        Some(Moment::Oom(n)) => {
            // The run's nth failure is among each device's first n.
            let kept = OomsKept(n.max(OomsKept::default().0));
            let summary = Summary::build_without_steps_keeping(index, &Progress::new("reading", index.events), kept);
            let (process, _, oom) = summary
                .oom(n)
                .map_err(|count| Failure::from(output_lines::no_such_oom(&args.trace, n, count)))?;
            let pid = index.processes[process].start.pid;
            if args.pid.is_some_and(|named| named != pid) {
                return Err(output_lines::oom_of_another_process(n, pid).into());
            }
            let said = output_lines::snapshot_at_oom(n, pid, seconds(oom.time_ns));
            Ok(Some((process, oom.time_ns, said, output_lines::AT_OOM_WINDOW)))
        }
        // One process's peak: the one `--pid` names, or the only one.
        Some(Moment::Peak) => {
            let [process] = selected[..] else {
                return Err(output_lines::AT_PEAK_NEEDS_ONE_PROCESS.into());
            };
            let pid = index.processes[process].start.pid;
            let summary = summary();
            let Some(peak) = summary.processes[process].devices.values().max_by_key(|d| d.peak) else {
                return Err(output_lines::no_such_process(&args.trace, pid).into());
            };
            let said = output_lines::snapshot_at_peak(pid, peak.peak, seconds(peak.peak_time_ns));
            Ok(Some((process, peak.peak_time_ns, said, output_lines::AT_PEAK_WINDOW)))
        }
    }
}

/// The processes to snapshot: the one `--pid` names, or every one with
/// memory events.
fn selected_processes(index: &TraceIndex, args: &SnapshotArgs) -> Result<Vec<usize>, Failure> {
    let selected: Vec<usize> = (0..index.processes.len())
        .filter(|&i| {
            let p = &index.processes[i];
            args.pid.map_or(p.memory_events > 0, |pid| p.start.pid == pid)
        })
        .collect();
    if !selected.is_empty() {
        return Ok(selected);
    }
    let trace = &args.trace;
    Err(match args.pid {
        Some(pid) => output_lines::no_such_process(trace, pid).into(),
        None => {
            // Damage may be why: name it, rather than blame the program.
            let damage = match (&index.damage, index.skipped.first()) {
                (Some(damage), _) => Some((damage_text(damage), false)),
                (None, Some(first)) => Some((damage_text(first), true)),
                (None, None) => None,
            };
            output_lines::nothing_to_snapshot(trace, damage.as_ref().map(|(text, skipped)| (text.as_str(), *skipped)))
                .into()
        }
    })
}

/// Puts every pickle together; every one is tried, whatever became of the
/// others.
fn write_pickles(
    index: &TraceIndex,
    made: torch_snapshot::Snapshots,
    private: bool,
    default_limit: Option<u64>,
) -> Result<u8, Failure> {
    let torch_snapshot::Snapshots { pickles, stream_errors } = made;
    let (mut written_paths, mut failures) = (Vec::new(), Vec::new());
    for mut snapshot in pickles {
        let path = snapshot.path().to_owned();
        let mut memo = snapshot.take_memo();
        let over_limit = snapshot.over_max_events();
        let mut output = match OutputFile::create(&path, private, true) {
            Ok(output) => output,
            Err(failure) => {
                failures.push((path, write_failure_text(&failure)));
                continue;
            }
        };
        let written = match torch_snapshot::finish(index, snapshot, &mut memo, output.file()) {
            Ok(written) => output.finish().map(|()| written).map_err(|f| write_failure_text(&f)),
            Err(e) => {
                output.abandon();
                Err(output_lines::cannot_write(&path, e))
            }
        };
        let written = match written {
            Ok(written) => written,
            Err(reason) => {
                failures.push((path, reason));
                continue;
            }
        };
        print_line(&path.display().to_string())?;
        if let Some(limit) = default_limit.filter(|_| over_limit > 0) {
            say(&output_lines::snapshot_kept_newest(&path, limit, over_limit));
        }
        if written > WARN_BYTES {
            say(&output_lines::snapshot_too_large(&path, written));
        }
        written_paths.push(path);
    }
    if failures.is_empty() && !written_paths.is_empty() {
        say(output_lines::OPEN_SNAPSHOT);
    }
    if !failures.is_empty() {
        let reasons: Vec<&str> = failures.iter().map(|(_, reason)| reason.as_str()).collect();
        let written: Vec<&Path> = written_paths.iter().map(PathBuf::as_path).collect();
        let not_written: Vec<&Path> = failures.iter().map(|(path, _)| path.as_path()).collect();
        return Err(output_lines::pickles_not_all_written(&reasons, &written, &not_written).into());
    }
    Ok(say_what_the_trace_lacks(index, &stream_errors))
}

/// `TRACE`'s path without its extension, or `-o`'s, without `.pickle`.
fn output_stem(trace: &Path, output: Option<&Path>) -> PathBuf {
    match output {
        Some(path) => {
            let text = path.to_string_lossy();
            PathBuf::from(text.strip_suffix(".pickle").unwrap_or(&text).to_string())
        }
        None => trace.with_extension(""),
    }
}
