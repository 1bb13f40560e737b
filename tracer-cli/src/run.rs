//! `cudatrace run`: runs a command under the tracer and collects every
//! process of its tree into one trace.

use crate::collector::{header_for, monotonic_ns, Collector};
use crate::private_dir;
use cudatrace_events::naming;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// How long to wait, after the command exits, for descendants still running.
const GRACE: Duration = Duration::from_secs(2);

/// Options of `cudatrace run`.
pub struct RunOptions {
    /// `-o`.
    pub output: Option<PathBuf>,
    /// `--preload`.
    pub preload: Option<PathBuf>,
    /// `--keep-spools`.
    pub keep_spools: bool,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// The library to preload: `--preload`, `$CUDATRACE_PRELOAD`, or the one next to this binary.
fn preload_library(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    let chosen = flag
        .or_else(|| {
            std::env::var_os("CUDATRACE_PRELOAD")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| Some(std::env::current_exe().ok()?.parent()?.join("libcudatrace.so")))
        .ok_or("cannot locate libcudatrace.so; pass --preload PATH")?;
    if !chosen.is_file() {
        return Err(format!(
            "{} not found; pass --preload PATH or set CUDATRACE_PRELOAD",
            chosen.display()
        ));
    }
    std::path::absolute(&chosen).map_err(|e| format!("{}: {e}", chosen.display()))
}

static CHILD: AtomicI32 = AtomicI32::new(0);

/// Signals sent to cudatrace itself with `kill` go on to the command. Signals
/// from the terminal (si_code SI_KERNEL) already reach the command, which
/// shares our process group; we only stay alive to finish the trace.
extern "C" fn forward_signal(signal: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    let child = CHILD.load(Ordering::Relaxed);
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let sent_by_a_process = unsafe { (*info).si_code } <= 0;
    if child > 0 && sent_by_a_process {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, signal) };
    }
}

fn install_signal_forwarding() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: a zeroed sigaction with our handler and SA_SIGINFO.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = forward_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Runs the command; returns the exit code cudatrace should exit with.
pub fn run(options: RunOptions) -> Result<i32, String> {
    let preload = preload_library(options.preload)?;
    let run_dir = private_dir::create_run_dir()?;
    let mut ld_preload = preload.into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        ld_preload.push(":");
        ld_preload.push(existing);
    }
    let mut command = Command::new(&options.command[0]);
    command
        .args(&options.command[1..])
        .env("LD_PRELOAD", ld_preload)
        .env("CUDATRACE_DIR", &run_dir)
        .env("CUDATRACE_COLLECTOR", "run")
        .env_remove("CUDATRACE_OUT")
        .env_remove("CUDATRACE_ROOT_PID");
    install_signal_forwarding();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            private_dir::remove_spools(&run_dir);
            return Err(format!("cannot run {}: {e}", options.command[0]));
        }
    };
    let pid = child.id();
    CHILD.store(pid as i32, Ordering::Relaxed);
    let output = match options.output {
        Some(path) => path,
        None => PathBuf::from(naming::default_trace_name(&options.command[0], pid)),
    };
    let collector = Collector::start(&run_dir, &output, &header_for(options.command.clone()));
    let collector = match collector {
        Ok(collector) => collector,
        Err(e) => {
            // The command runs on untraced-but-spooled; its spools stay for `cudatrace collect`.
            let _ = child.wait();
            return Err(format!("{e} (spools kept in {})", run_dir.display()));
        }
    };
    collector.hold(pid);
    let status = child.wait().map_err(|e| format!("cannot wait for the command: {e}"))?;
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    collector.record_exit(pid, code, monotonic_ns());
    CHILD.store(0, Ordering::Relaxed);
    let summary = collector
        .finish(GRACE)
        .map_err(|e| format!("{e} (spools kept in {})", run_dir.display()))?;
    if !options.keep_spools && summary.refused == 0 {
        private_dir::remove_spools(&run_dir);
    }
    eprintln!("{}", summary.describe(&output));
    if summary.dropped_events > 0 {
        eprintln!(
            "cudatrace: {} events could not be recorded (see the report)",
            summary.dropped_events
        );
    }
    if summary.refused > 0 {
        eprintln!(
            "cudatrace: refused {} spool files not owned by this user; kept {}",
            summary.refused,
            run_dir.display()
        );
    }
    Ok(code)
}
