//! `cudatrace collect`: turns a folder of spools into a trace. By hand after
//! a crash, or for spools written with `CUDATRACE_DIR`; or, with `--detach`,
//! started by the library itself for a plain `LD_PRELOAD` tree.

use crate::collector::liveness::Liveness;
use crate::collector::{header_for, Collector};
use crate::collector::{recover, spool_dir};
use crate::commands::arguments::CollectArgs;
use crate::outputs::wording::count;
use crate::outputs::wording::damage_text;
use crate::system::failure::Failure;
use crate::system::terminal::say;
use crate::system::trace_file;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long to wait, once the root is gone, for traced processes still running.
const GRACE: Duration = Duration::from_secs(10);

fn command_line(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Leaves the caller's process tree: the parent returns at once (the library
/// that started us reaps it), the child carries on in a session of its own.
fn detach() -> Result<(), String> {
    // SAFETY: single-threaded at this point; the parent only exits.
    match unsafe { libc::fork() } {
        -1 => Err(format!("cannot fork: {}", std::io::Error::last_os_error())),
        0 => {
            // SAFETY: plain system calls in the new child.
            unsafe {
                libc::setsid();
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                if null >= 0 {
                    libc::dup2(null, 0);
                    libc::close(null);
                }
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                libc::signal(libc::SIGINT, libc::SIG_IGN);
            }
            Ok(())
        }
        // SAFETY: leaving without running destructors or atexit handlers twice.
        _ => unsafe { libc::_exit(0) },
    }
}

/// Collects; returns the exit code.
pub fn collect(args: CollectArgs) -> Result<u8, Failure> {
    spool_dir::check_owned(&args.dir)?;
    if args.detach {
        return collect_tree(args);
    }
    let spools = cudatrace_events::naming::spool_files_in(&args.dir)
        .map_err(|e| format!("cannot read {}: {e}", args.dir.display()))?;
    let old = recover::trace_named_in(&args.dir).unwrap_or_else(|refused| {
        say(&format!("cudatrace: {refused}"));
        None
    });
    if spools.is_empty() && old.is_none() {
        return Err(format!("{} holds no spool files: nothing to collect", args.dir.display()).into());
    }
    // A collector still writing that trace owns the folder: merging behind
    // its back would miss what it gives back meanwhile.
    let _old_lock = match &old {
        Some(old) => Some(trace_file::lock_shared(old).map_err(|()| {
            format!(
                "{} is still being written by a running cudatrace, which collects {}; let it finish first",
                old.display(),
                args.dir.display()
            )
        })?),
        None => None,
    };
    let destination = args
        .output
        .clone()
        .or_else(|| old.clone())
        .map_or_else(|| beside(&args.dir), Ok)?;
    let completing_old = old.as_deref().is_some_and(|old| same_file(old, &destination));
    // A private trace merged into the output keeps the output private.
    let private = old.as_deref().is_some_and(crate::system::output_file::is_private);
    let (staged, file) = trace_file::stage(&destination, args.force || completing_old, private)?;
    let kept = |reason: String| {
        format!(
            "{reason}; nothing was changed, the spools are kept in {}",
            args.dir.display()
        )
    };
    let (recovered, file) = match recover::recover(&args.dir, old.as_deref(), file, &destination) {
        Ok(done) => done,
        Err(reason) => {
            staged.abandon();
            return Err(kept(reason).into());
        }
    };
    staged.commit(file).map_err(kept)?;
    let summary = &recovered.summary;
    if let Some(old) = &old {
        for damage in &recovered.old_trace_damage {
            let outcome = if summary.lost_events == 0 {
                "what it lacked came from the spools".to_string()
            } else {
                format!(
                    "the trace lacks {} (see `cudatrace report`)",
                    count(summary.lost_events, "event", "events")
                )
            };
            say(&format!(
                "cudatrace: {} was damaged {}; {outcome}",
                old.display(),
                damage_text(damage)
            ));
        }
    }
    say(&summary.describe(&destination));
    for line in summary.warnings(&args.dir) {
        say(&line);
    }
    if summary.still_running > 0 {
        say(&format!(
            "cudatrace: {} still running; their spools are kept in {}: collect again once they are done",
            count(summary.still_running, "traced process is", "traced processes are"),
            args.dir.display()
        ));
    }
    if !args.keep_spools {
        spool_dir::remove_spools(&args.dir, &summary.collected, false);
    }
    Ok(0)
}

/// `DIR.trace`, beside the folder (also for `.` or `spools/`).
fn beside(dir: &Path) -> Result<PathBuf, String> {
    let absolute = std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let normal: PathBuf = absolute.components().collect();
    let name = normal
        .file_name()
        .ok_or_else(|| format!("{} has no name to call its trace by; pass -o TRACE", dir.display()))?;
    let mut file = name.to_owned();
    file.push(".trace");
    Ok(normal.with_file_name(file))
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The collector of a plain `LD_PRELOAD` tree: follows the spools while the
/// tree runs, writing the trace in place (beside it if another cudatrace is
/// writing that path), then removes the folder the tree's root made.
fn collect_tree(args: CollectArgs) -> Result<u8, Failure> {
    let destination = args.output.clone().map_or_else(|| beside(&args.dir), Ok)?;
    let root = args.root_pid.map(|pid| (pid, command_line(pid)));
    detach()?;
    let claimed = trace_file::claim_in_place_or_beside(&destination, true)?;
    if claimed.path != destination {
        say(&format!(
            "cudatrace: {} is being written by another cudatrace, or holds a trace already; writing {} instead",
            destination.display(),
            claimed.path.display()
        ));
    }
    let trace: PathBuf = claimed.path.clone();
    let command = root.as_ref().map(|(_, argv)| argv.clone()).unwrap_or_default();
    let nvml = crate::collector::start_nvml();
    let collector = Collector::start(&args.dir, claimed, &header_for(command), args.keep_spools, nvml)?;
    let grace = match root {
        Some((pid, _)) => {
            let mut root = Liveness::watch(pid);
            while !root.is_dead() {
                std::thread::sleep(Duration::from_millis(50));
            }
            GRACE
        }
        None => Duration::ZERO,
    };
    match collector.finish(grace) {
        Ok(summary) => {
            if !args.keep_spools {
                spool_dir::remove_spools(&args.dir, &summary.collected, true);
            }
            for line in summary.warnings(&args.dir) {
                say(&line);
            }
            Ok(0)
        }
        Err(failure) => Err(Failure::from(format!(
            "{}; the spools are kept in {}: once there is room, `cudatrace collect {}` finishes {}",
            failure.message,
            args.dir.display(),
            crate::outputs::wording::shell_quoted(&args.dir),
            trace.display()
        ))),
    }
}
