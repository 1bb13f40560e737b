//! `cudatrace run`: runs a command under the tracer and collects every
//! process of its tree into one trace.

use crate::collector::spool_dir;
use crate::collector::{header_for, monotonic_ns, CollectionSummary, Collector};
use crate::commands::arguments::RunArgs;
use crate::system::failure::Failure;
use crate::system::procfs;
use crate::system::switch_file::SwitchFile;
use crate::system::terminal::say;
use crate::system::trace_file;
use crate::system::write_failure::WriteFailure;
use crate::wording::run_lines;
use crate::wording::said;
use crate::wording::stderr;
use crate::wording::switch_lines;
use crate::wording::write_failure_text;
use cudatrace_events::recording_switch::SwitchState;
use cudatrace_events::{naming, notices, settings};
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;

/// How long to wait, after the command exits, for descendants still running.
const GRACE: Duration = Duration::from_secs(2);

/// The library to preload: `--preload`, `$CUDATRACE_PRELOAD`, or the one next to this binary.
fn preload_library(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    let chosen = flag
        .or_else(|| settings::PRELOAD.non_empty().map(PathBuf::from))
        .or_else(|| Some(std::env::current_exe().ok()?.parent()?.join("libcudatrace.so")))
        .ok_or(run_lines::PRELOAD_NOT_LOCATED)?;
    if !chosen.is_file() {
        return Err(run_lines::preload_not_found(&chosen));
    }
    std::path::absolute(&chosen).map_err(|e| stderr::path_failed(&chosen, e))
}

static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal to forward that arrived before the command's pid was known.
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The SIGXFSZ disposition cudatrace was started with, which `main` replaced.
pub static INHERITED_SIGXFSZ: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);

/// Signals sent to cudatrace itself with `kill` go on to the command. Signals
/// from the terminal (si_code SI_KERNEL) already reach the command, which
/// shares our process group; we only stay alive to finish the trace.
extern "C" fn forward_signal(signal: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    let child = CHILD.load(Ordering::Relaxed);
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let sent_by_a_process = unsafe { (*info).si_code } <= 0;
    if !sent_by_a_process {
        return;
    }
    if child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, signal) };
    } else {
        PENDING_SIGNAL.store(signal, Ordering::SeqCst);
    }
}

/// Makes `pid` the command signals go to, passing on any that came first.
fn forward_to(pid: u32) {
    CHILD.store(pid as i32, Ordering::SeqCst);
    let pending = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
    if pending != 0 {
        // SAFETY: signalling the command we just started.
        unsafe { libc::kill(pid as i32, pending) };
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

/// Starts the command, as a shell would report failing to: 127 when it is
/// not found, 126 when it cannot be executed.
fn spawn(mut command: Command, program: &OsString) -> Result<Child, Failure> {
    command.spawn().map_err(|e| Failure {
        message: run_lines::cannot_run(Path::new(program), &e),
        code: if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
    })
}

/// Whether any process still runs with this run's spool folder in its
/// environment: the command's descendants, a daemon it left behind
/// included (orphans are not cudatrace's children, and must not become
/// them: a program may watch its parent). Processes whose environment this
/// user cannot read are not ours.
fn descendants_alive(run_dir: &Path) -> bool {
    let me = std::process::id();
    let wanted = run_dir.as_os_str().as_encoded_bytes();
    procfs::pids().into_iter().filter(|&pid| pid != me).any(|pid| {
        procfs::environment(pid)
            .is_some_and(|environment| procfs::value(&environment, settings::DIR.name) == Some(wanted))
    })
}

/// After the command exits, waits up to `grace` for its descendants still
/// running; `true` if some still run then.
fn wait_for_descendants(run_dir: &Path, grace: Duration) -> bool {
    let deadline = std::time::Instant::now() + grace;
    while descendants_alive(run_dir) {
        if std::time::Instant::now() >= deadline {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Waits for the command; its exit code, 128 + N for signal N.
fn wait(child: &mut Child) -> Result<u8, Failure> {
    let status = child.wait().map_err(|e| Failure::from(run_lines::cannot_wait(e)))?;
    CHILD.store(0, Ordering::Relaxed);
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(u8::try_from(code & 0xff).unwrap_or(1))
}

/// Creates the run's notice file and hands it down to the command (see
/// `cudatrace_events::notices`): the descriptor stays open across its
/// `exec`, and the environment names it with the file's identity. Without
/// it, a process that cannot create its spool goes unseen; the run goes on.
fn open_notice_file(run_dir: &Path, command: &mut Command) -> Option<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(run_dir.join(notices::NOTICE_FILE))
        .ok()?;
    let metadata = file.metadata().ok()?;
    let fd = file.as_raw_fd();
    command.env(
        settings::NOTICE.name,
        format!("{fd}:{}:{}", metadata.dev(), metadata.ino()),
    );
    // SAFETY: only fcntl, async-signal-safe, between fork and exec: the
    // descriptor loses close-on-exec in the command alone.
    unsafe {
        command.pre_exec(move || {
            libc::fcntl(fd, libc::F_SETFD, 0);
            Ok(())
        })
    };
    Some(file)
}

/// The destination, settled before the command starts: claimed in place
/// when `-o` names it, else the working folder checked for writing.
fn claim_destination(args: &RunArgs) -> Result<Option<trace_file::InPlace>, Failure> {
    match &args.output {
        Some(path) if !args.replace.force && path.is_file() => Err(WriteFailure::Exists(path.clone()).into()),
        Some(path) => Ok(Some(trace_file::claim_in_place(path)?)),
        None => {
            trace_file::check_folder_writable(Path::new("."))?;
            Ok(None)
        }
    }
}

/// The command's environment under the tracer: the library preloaded
/// before any the command had, the run's spool folder, and the options,
/// each in its variable of the settings table (`cudatrace_events::settings`),
/// which the library reads when it loads.
fn trace_environment(command: &mut Command, preload: PathBuf, run_dir: &Path, args: &RunArgs) {
    let mut ld_preload = preload.into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        ld_preload.push(":");
        ld_preload.push(existing);
    }
    command
        .env("LD_PRELOAD", ld_preload)
        .env(settings::DIR.name, run_dir)
        .env(settings::COLLECTOR.name, settings::COLLECTOR_RUN)
        .env_remove(settings::OUT.name)
        .env_remove(settings::TRACE_FOLDER.name)
        .env_remove(settings::ROOT_PID.name);
    if let Some(stacks) = args.stacks {
        command.env(settings::STACKS.name, stacks.name());
    }
    if let Some(tensors) = args.tensors {
        command.env(settings::TENSORS.name, tensors.name());
    }
    if let Some(depth) = args.max_depth {
        command.env(settings::MAX_DEPTH.name, depth.to_string());
    }
    if args.no_launch_hooks {
        command.env(settings::LAUNCH_HOOKS.name, "0");
    }
    match args.limit {
        Some(0) => {
            command.env_remove(settings::LIMIT.name);
        }
        Some(limit) => {
            command.env(settings::LIMIT.name, limit.to_string());
        }
        None => {}
    }
}

/// Runs the command; returns the exit code cudatrace should exit with.
pub fn command(args: RunArgs) -> Result<u8, Failure> {
    install_signal_forwarding();
    let cap = super::max_size::trace_cap(args.max_size)?;
    let limit = memory_limit(&args)?;
    let preload = preload_library(args.preload.clone())?;
    let claimed = claim_destination(&args)?;
    let program = args.command[0].clone();
    let mut command = Command::new(&program);
    command.args(&args.command[1..]);
    // SAFETY: only an async-signal-safe call between fork and exec; it gives
    // the command the SIGXFSZ disposition cudatrace itself was started with.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, INHERITED_SIGXFSZ.load(Ordering::Relaxed));
            Ok(())
        })
    };
    let run_dir = match spool_dir::create_run_dir() {
        Ok(dir) => dir,
        Err(reason) => {
            say(&run_lines::nothing_recorded(&reason));
            if let Some(claimed) = claimed {
                claimed.abandon();
            }
            let mut child = spawn(command, &program)?;
            forward_to(child.id());
            return wait(&mut child);
        }
    };
    if args.start_paused {
        if let Err(failure) = start_paused(&run_dir) {
            spool_dir::remove_spools(&run_dir, &[], true);
            if let Some(claimed) = claimed {
                claimed.abandon();
            }
            return Err(failure);
        }
    }
    // Kept open until the command and its descendants are done with it.
    let _notice_file = open_notice_file(&run_dir, &mut command);
    trace_environment(&mut command, preload, &run_dir, &args);
    // The device's usage without the program, read before it starts.
    let nvml = crate::collector::start_nvml();
    let mut child = match spawn(command, &program) {
        Ok(child) => child,
        Err(failure) => {
            spool_dir::remove_spools(&run_dir, &[], true);
            if let Some(claimed) = claimed {
                claimed.abandon();
            }
            return Err(failure);
        }
    };
    forward_to(child.id());
    let started = start_collector(&args, claimed, child.id(), &run_dir, nvml, cap);
    match started {
        Ok((collector, trace)) => record(&args, limit, &mut child, collector, &trace, &run_dir),
        Err(reason) => {
            // The command runs on, spooled; its spools stay for `cudatrace collect`.
            say(&said(&reason));
            let code = wait(&mut child)?;
            say(&run_lines::spools_wait_for_collect(&run_dir, code));
            Ok(code)
        }
    }
}

/// The memory limit the job runs under, if any: `--limit`, else
/// `CUDATRACE_LIMIT`, which is checked here because the library would
/// say what is wrong with it in every process: said once, here.
fn memory_limit(args: &RunArgs) -> Result<Option<u64>, Failure> {
    let limit = match args.limit {
        Some(limit) => limit,
        None => match std::env::var(settings::LIMIT.name)
            .ok()
            .filter(|v| !matches!(v.trim(), "" | "0" | "off"))
        {
            Some(value) => super::arguments::parse_limit(&value)
                .map_err(|why| format!("{}={value}: {why}", settings::LIMIT.name))?,
            None => 0,
        },
    };
    Ok((limit > 0).then_some(limit))
}

/// `--start-paused`: the job's switch is made paused before the command
/// starts, so that its first event already follows it.
fn start_paused(run_dir: &Path) -> Result<(), Failure> {
    let paused = SwitchState {
        paused: true,
        stacks: None,
    };
    match SwitchFile::open_or_make(run_dir, paused, monotonic_ns()) {
        Ok(_) => Ok(()),
        Err(error) => Err(switch_lines::cannot_switch(run_dir, error).into()),
    }
}

/// Starts the collector of the command's spools into the trace `-o` named
/// and `claimed`, or else the default trace of the command's `pid`.
fn start_collector(
    args: &RunArgs,
    claimed: Option<trace_file::InPlace>,
    pid: u32,
    run_dir: &Path,
    nvml: crate::collector::NvmlStart,
    cap: Option<u64>,
) -> Result<(Collector, PathBuf), String> {
    let output = match claimed {
        Some(claimed) => claimed,
        None => trace_file::claim_in_place(&PathBuf::from(naming::default_trace_name(
            &args.command[0].to_string_lossy(),
            pid,
        )))
        .map_err(|failure| write_failure_text(&failure))?,
    };
    let trace = output.path.clone();
    let header = header_for(args.command.iter().map(|a| a.to_string_lossy().into_owned()).collect());
    let collector = Collector::start(run_dir, output, &header, args.keep_spools, nvml, cap)?;
    Ok((collector, trace))
}

/// Records the running command `child` into `trace` until it and its
/// descendants are done; its exit code. `limit`, the memory limit it runs
/// under, is said with where it records.
fn record(
    args: &RunArgs,
    limit: Option<u64>,
    child: &mut Child,
    collector: Collector,
    trace: &Path,
    run_dir: &Path,
) -> Result<u8, Failure> {
    let pid = child.id();
    let command: Vec<_> = args.command.iter().map(|a| a.to_string_lossy()).collect();
    say(&run_lines::recording(&command.join(" "), trace, limit));
    collector.hold(pid);
    let code = wait(child)?;
    collector.record_exit(pid, i32::from(code), monotonic_ns());
    let lingering = wait_for_descendants(run_dir, GRACE);
    if lingering {
        say(&run_lines::descendants_still_running(run_dir));
    }
    match collector.finish(GRACE) {
        Ok(summary) => finished(
            &summary,
            trace,
            run_dir,
            args.keep_spools,
            lingering,
            args.output.is_some(),
        ),
        Err(failure) => {
            say(&said(&failure.message));
            say(&run_lines::spools_wait_for_room(run_dir, trace, code));
        }
    }
    Ok(code)
}

/// What `run` says once the trace is written, and what it leaves behind:
/// no empty trace unless `-o` named it.
fn finished(
    summary: &CollectionSummary,
    trace: &Path,
    run_dir: &Path,
    keep_spools: bool,
    lingering: bool,
    named: bool,
) {
    if !keep_spools && !lingering {
        spool_dir::remove_spools(run_dir, &summary.collected, true);
    }
    let disabled = settings::disabled(settings::DISABLE.value_os().as_deref().map(|v| v.as_encoded_bytes()));
    if summary.processes == 0 && summary.damaged_spools == 0 && summary.unrecorded.is_empty() {
        if named || lingering {
            say(&run_lines::nothing_to_record(disabled, Some(trace)));
        } else {
            let _ = std::fs::remove_file(trace);
            say(&run_lines::nothing_to_record(disabled, None));
        }
    } else {
        say(&summary.describe(trace));
        say(&run_lines::open_it(trace));
    }
    for line in summary.warnings(run_dir) {
        say(&line);
    }
    if summary.refused > 0 {
        say(&run_lines::refused_spools(summary.refused, run_dir));
    } else if summary.still_running > 0 {
        say(&run_lines::still_running_after_run(summary.still_running, run_dir));
    } else if keep_spools {
        say(&run_lines::kept_spools(run_dir));
    } else if !keep_spools && !lingering && run_dir.exists() {
        say(&run_lines::kept_unreadable_spools(run_dir));
    }
}
