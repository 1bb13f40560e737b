//! `cudatrace snapshot`: one pickle per process in the format of PyTorch's
//! memory snapshots (see [`crate::outputs::torch_snapshot`]).

use crate::analysis::{TraceIndex, Window};
use crate::commands::arguments::SnapshotArgs;
use crate::outputs::wording::bytes;
use crate::outputs::wording::damage_text;
use crate::outputs::{say_what_the_trace_lacks, torch_snapshot};
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, refusal, OutputFile};
use crate::system::progress::Progress;
use crate::system::terminal::say;
use std::path::{Path, PathBuf};

/// Past this size a snapshot lags or crashes the viewer's browser tab.
const WARN_BYTES: u64 = 200 << 20;

/// `cudatrace snapshot`; 1 if the trace is damaged.
pub fn command(args: SnapshotArgs) -> Result<u8, Failure> {
    let index = super::open_trace::read_trace(&args.trace)?;
    let selected = selected_processes(&index, &args)?;
    let window = Window::seconds(index.start_ns(), args.window.from, args.window.to);
    let stem = output_stem(&args.trace, args.output.as_deref());
    let passes = torch_snapshot::passes(&index, &selected, args.window.max_events);
    let progress = Progress::new("snapshot", index.events * passes);
    let targets = selected
        .iter()
        .map(|&process| {
            let start = &index.processes[process].start;
            let name = if start.image == 0 {
                format!("{}.{}.pickle", stem.display(), start.pid)
            } else {
                format!("{}.{}-{}.pickle", stem.display(), start.pid, start.image)
            };
            (process, PathBuf::from(name))
        })
        .collect();
    let folder = stem
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let made = torch_snapshot::make(&index, targets, window, args.window.max_events, folder, &progress)
        .map_err(|e| format!("cannot write a snapshot in {}: {e}", folder.display()))?;
    drop(progress);
    // Nothing is written if any pickle would replace a file.
    if !args.replace.force {
        if let Some(existing) = made.pickles.iter().find(|s| s.path().is_file()) {
            return Err(refusal(existing.path()).into());
        }
    }
    write_pickles(&index, made, is_private(&args.trace))
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
    let trace = args.trace.display();
    Err(match args.pid {
        Some(pid) => format!("{trace} has no process {pid}").into(),
        None => match (&index.damage, index.skipped.first()) {
            // Damage may be why: name it, rather than blame the program.
            (Some(damage), _) => format!(
                "{trace} has no memory events to snapshot before its damage: it is damaged {}",
                damage_text(damage)
            )
            .into(),
            (None, Some(first)) => format!(
                "{trace} has no memory events to snapshot outside its damaged frames (the first {})",
                damage_text(first)
            )
            .into(),
            (None, None) => format!("{trace} has no memory events to snapshot").into(),
        },
    })
}

/// Puts every pickle together; every one is tried, whatever became of the
/// others.
fn write_pickles(index: &TraceIndex, made: torch_snapshot::Snapshots, private: bool) -> Result<u8, Failure> {
    let torch_snapshot::Snapshots {
        pickles,
        mut memo,
        stream_errors,
    } = made;
    let (mut written_paths, mut failures) = (Vec::new(), Vec::new());
    for snapshot in pickles {
        let path = snapshot.path().to_owned();
        let mut output = match OutputFile::create(&path, private, true) {
            Ok(output) => output,
            Err(reason) => {
                failures.push((path, reason));
                continue;
            }
        };
        let written = match torch_snapshot::finish(index, snapshot, &mut memo, output.file()) {
            Ok(written) => output.finish().map(|()| written),
            Err(e) => {
                output.abandon();
                Err(format!("cannot write {}: {e}", path.display()))
            }
        };
        let written = match written {
            Ok(written) => written,
            Err(reason) => {
                failures.push((path, reason));
                continue;
            }
        };
        println!("{}", path.display());
        if written > WARN_BYTES {
            say(&format!(
                "cudatrace: {} is {}: the memory visualizer may lag or crash past 200 MiB; narrow it with --from/--to or --max-events",
                path.display(),
                bytes(written)
            ));
        }
        written_paths.push(path);
    }
    if failures.is_empty() && !written_paths.is_empty() {
        say(
            "cudatrace: drop a pickle onto pytorch.org/memory_viz, or run `python -m torch.cuda._memory_viz trace_plot PICKLE -o PAGE.html`",
        );
    }
    if !failures.is_empty() {
        let list = |paths: &mut dyn Iterator<Item = &PathBuf>| {
            let names: Vec<String> = paths.map(|p| p.display().to_string()).collect();
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        };
        let reasons: Vec<&str> = failures.iter().map(|(_, reason)| reason.as_str()).collect();
        return Err(format!(
            "{}; written: {}; not written: {}",
            reasons.join("; "),
            list(&mut written_paths.iter()),
            list(&mut failures.iter().map(|(path, _)| path))
        )
        .into());
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
