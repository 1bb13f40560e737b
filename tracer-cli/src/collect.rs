//! `cudatrace collect`: turns a folder of spools into a trace. Started by the
//! library itself for plain `LD_PRELOAD` runs, or by hand after a crash.

use crate::collector::{header_for, Collector, Liveness};
use crate::private_dir;
use std::path::PathBuf;
use std::time::Duration;

/// How long to wait, once the root is gone, for traced processes still running.
const GRACE: Duration = Duration::from_secs(10);

/// Options of `cudatrace collect`.
pub struct CollectOptions {
    /// The spool folder.
    pub dir: PathBuf,
    /// `-o`; default: the folder's name with `.trace`.
    pub output: Option<PathBuf>,
    /// `--root-pid`: keep collecting until this process has exited.
    pub root_pid: Option<u32>,
    /// `--detach`: return at once and collect in the background.
    pub detach: bool,
    /// `--keep-spools`.
    pub keep_spools: bool,
}

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
pub fn collect(options: CollectOptions) -> Result<i32, String> {
    private_dir::check_owned(&options.dir)?;
    let output = options
        .output
        .clone()
        .unwrap_or_else(|| options.dir.with_extension("trace"));
    let root = options.root_pid.map(|pid| (pid, command_line(pid)));
    if options.detach {
        detach()?;
    }
    let command = root.as_ref().map(|(_, argv)| argv.clone()).unwrap_or_default();
    let collector = Collector::start(&options.dir, &output, &header_for(command))?;
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
    let summary = collector.finish(grace)?;
    if !options.keep_spools && summary.refused == 0 {
        private_dir::remove_spools(&options.dir);
    }
    if !options.detach {
        eprintln!("{}", summary.describe(&output));
    }
    Ok(0)
}
