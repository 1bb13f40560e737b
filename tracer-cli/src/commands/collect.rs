//! `cudatrace collect`: turns a folder of spools into a trace. By hand after
//! a crash, or for spools written with `CUDATRACE_DIR`; or, with `--detach`,
//! started by the library itself for a plain `LD_PRELOAD` tree.

use crate::collector::liveness::Liveness;
use crate::collector::{header_for, Collector};
use crate::collector::{recover, spool_dir, trace_name};
use crate::commands::arguments::CollectArgs;
use crate::system::failure::Failure;
use crate::system::terminal::say;
use crate::system::trace_file;
use crate::wording::said;
use crate::wording::stderr;
use crate::wording::write_failure_text;
use crate::wording::{collect_lines, damage_text};
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
        -1 => Err(collect_lines::cannot_fork(std::io::Error::last_os_error())),
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
pub fn command(args: CollectArgs) -> Result<u8, Failure> {
    spool_dir::check_owned(&args.dir)?;
    if args.detach {
        return collect_tree(args);
    }
    let spools =
        cudatrace_events::naming::spool_files_in(&args.dir).map_err(|e| collect_lines::cannot_read(&args.dir, e))?;
    let old = recover::trace_named_in(&args.dir).unwrap_or_else(|refused| {
        say(&said(refused));
        None
    });
    if spools.is_empty() && old.is_none() {
        return Err(collect_lines::no_spools(&args.dir).into());
    }
    // A collector still writing that trace owns the folder: merging behind
    // its back would miss what it gives back meanwhile.
    let _old_lock = match &old {
        Some(old) => {
            Some(trace_file::lock_shared(old).map_err(|()| collect_lines::still_being_written(old, &args.dir))?)
        }
        None => None,
    };
    // The cap: as asked, else the one the folder's run had, else as `run`'s.
    let cap = match args.max_size {
        Some(size) => size.bytes(),
        None => match spool_dir::read_cap(&args.dir) {
            Ok(cap) => cap,
            Err(ignored) => {
                if let Some(line) = ignored {
                    say(&said(line));
                }
                super::max_size::trace_cap(None)?
            }
        },
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
    for leftover in &staged.leftovers {
        say(&crate::wording::collector_lines::removed_leftover(leftover));
    }
    let kept = |reason: String| collect_lines::nothing_changed(&reason, &args.dir);
    let (recovered, file) =
        match recover::recover(&args.dir, old.as_deref(), (file, staged.writing()), &destination, cap) {
            Ok(done) => done,
            Err(reason) => {
                staged.abandon();
                return Err(kept(reason).into());
            }
        };
    staged
        .commit(file)
        .map_err(|failure| kept(write_failure_text(&failure)))?;
    let summary = &recovered.summary;
    if let Some(old) = &old {
        for damage in &recovered.old_trace_damage {
            say(&collect_lines::old_trace_damaged(
                old,
                &damage_text(damage),
                summary.lost_events,
            ));
        }
    }
    say(&summary.describe(&destination));
    for line in summary.warnings(&args.dir) {
        say(&line);
    }
    if summary.still_running > 0 {
        say(&collect_lines::still_running_after_collect(
            summary.still_running,
            &args.dir,
        ));
    }
    if !args.keep_spools {
        spool_dir::remove_spools(&args.dir, &summary.collected, false);
    }
    Ok(0)
}

/// `DIR.trace`, beside the folder (also for `.` or `spools/`).
fn beside(dir: &Path) -> Result<PathBuf, String> {
    let absolute = std::path::absolute(dir).map_err(|e| stderr::path_failed(dir, e))?;
    let normal: PathBuf = absolute.components().collect();
    let name = normal
        .file_name()
        .ok_or_else(|| collect_lines::no_name_for_trace(dir))?;
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
    let root = args.root_pid.map(|pid| (pid, command_line(pid)));
    let destination = match (&args.output, &args.trace_folder) {
        (Some(output), _) => output.clone(),
        (None, Some(folder)) => {
            let root_argv = root.as_ref().map(|(pid, argv)| (*pid, argv.clone()));
            folder.join(trace_name::after_first_image(&args.dir, root_argv))
        }
        (None, None) => beside(&args.dir)?,
    };
    detach()?;
    let claimed = trace_file::claim_in_place_or_beside(&destination, true)?;
    if claimed.path != destination {
        say(&collect_lines::writing_beside(&destination, &claimed.path));
    }
    let trace: PathBuf = claimed.path.clone();
    let command = root.as_ref().map(|(_, argv)| argv.clone()).unwrap_or_default();
    let nvml = crate::collector::start_nvml();
    // A bad CUDATRACE_MAX_SIZE never costs the tree its trace: said, and
    // the default cap is kept.
    let cap = super::max_size::trace_cap(args.max_size).unwrap_or_else(|why| {
        say(&said(collect_lines::bad_cap_default_kept(&why)));
        Some(super::max_size::DEFAULT_MAX_SIZE)
    });
    let collector = Collector::start(&args.dir, claimed, &header_for(command), args.keep_spools, nvml, cap)?;
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
        Err(failure) => Err(Failure::from(collect_lines::tree_spools_wait_for_room(
            &failure.message,
            &args.dir,
            &trace,
        ))),
    }
}
