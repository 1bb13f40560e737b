//! Plain `LD_PRELOAD=libcudatrace.so CMD`, with no `cudatrace run` around it.
//!
//! The first traced process of a tree (the one that finds no
//! `CUDATRACE_ROOT_PID` in its environment) becomes the tree's root: its
//! constructor checks where spools will go and puts its decisions in the
//! environment, which every descendant inherits. Without `CUDATRACE_DIR` it
//! picks a private spool folder and a trace path; the first process of the
//! tree that records an event starts `cudatrace collect` for the folder,
//! which turns the spools into one trace once the root and every traced
//! process are gone. When the spool folder cannot be used, the root says so
//! in one line on stderr (unless `CUDATRACE_QUIET=1`) and the whole tree
//! runs untraced.
//!
//! | `CUDATRACE_COLLECTOR` | meaning |
//! | --- | --- |
//! | `run` | `cudatrace run` collects (and checked the folder): just write spools |
//! | `spawn` | set by a tree root: the first writer starts a collector |
//! | unset | spools only, into `CUDATRACE_DIR` (collect them by hand) |

use crate::system::{environment, unseen_child};
use cudatrace_events::naming;
use cudatrace_events::settings::{self, COLLECTOR, COLLECTOR_SPAWN, DIR, OUT, ROOT_PID, TRACE_FOLDER};
use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

fn set(key: &str, value: impl AsRef<std::ffi::OsStr>) {
    // SAFETY: called from the library constructor, before `main` and before
    // any other thread exists.
    unsafe { std::env::set_var(key, value) };
}

/// Called from the library constructor, before `main` and before any other
/// thread exists, so changing the environment is safe here. The tree's
/// variables are read and written here, not with the settings
/// (`system::environment`): this is where they are made.
pub(crate) fn adopt_tree_if_root() {
    let inherited = [ROOT_PID, COLLECTOR];
    if inherited.iter().any(|variable| variable.value_os().is_some()) {
        return;
    }
    // SAFETY: no preconditions.
    let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
    set(ROOT_PID.name, pid.to_string());
    if let Some(chosen) = DIR.non_empty() {
        let usable = create_if_missing(Path::new(&chosen)).and_then(|()| writable_folder(Path::new(&chosen)));
        if let Err(reason) = usable {
            untrace_tree(&format!("{}={}: {reason}", DIR.name, Path::new(&chosen).display()));
        }
        return;
    }
    let base = std::env::var_os(settings::TMPDIR.name)
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "/tmp".into());
    let user_folder = Path::new(&base).join(naming::user_folder_name(uid));
    let usable = naming::ensure_private_folder(&user_folder, uid)
        .map_err(|fault| match fault {
            naming::NotPrivate::CannotCreate(e) => format!("cannot create {}: {e}", user_folder.display()),
            naming::NotPrivate::Refused => {
                format!("refusing {}: not a private folder of this user", user_folder.display())
            }
        })
        .and_then(|()| writable_folder(&user_folder));
    if let Err(reason) = usable {
        untrace_tree(&format!("cannot keep spools in {}: {reason}", user_folder.display()));
        return;
    }
    let dir = user_folder.join(format!("tree-{pid}-{}", crate::system::clock::monotonic_ns()));
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    match OUT.non_empty() {
        Some(out) => {
            set(OUT.name, cwd.join(out));
            // SAFETY: as for `set`: in the constructor, before any other thread.
            unsafe { std::env::remove_var(TRACE_FOLDER.name) };
        }
        // Named later, by the collector, after the first image that
        // records: this root may be a wrapper (pyenv's `python3` runs `env`,
        // which execs `bash`, which execs Python) that records nothing.
        None => set(TRACE_FOLDER.name, &cwd),
    }
    set(DIR.name, &dir);
    set(COLLECTOR.name, COLLECTOR_SPAWN);
}

/// The spool folder, absolute, as the environment named it when the
/// library loaded; `None` without `CUDATRACE_DIR`.
static SPOOL_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Fixes the spool folder at load, after [`adopt_tree_if_root`]: made
/// absolute (a relative `CUDATRACE_DIR` would move with the program's
/// working directory, and with each descendant's), and handed down so.
/// Without `CUDATRACE_DIR` there is no spool folder: spools never go to the
/// working directory. Called from the library constructor, before `main`.
pub(crate) fn settle_spool_dir() {
    let Some(dir) = DIR.non_empty() else {
        return;
    };
    let dir = PathBuf::from(dir);
    let absolute = if dir.is_absolute() {
        dir
    } else {
        match std::env::current_dir() {
            Ok(cwd) => {
                let absolute = cwd.join(dir);
                set(DIR.name, &absolute);
                absolute
            }
            Err(_) => return,
        }
    };
    let _ = SPOOL_DIR.set(absolute);
}

/// The spool folder fixed at load ([`settle_spool_dir`]).
pub(crate) fn spool_dir() -> Option<&'static Path> {
    SPOOL_DIR.get().map(PathBuf::as_path)
}

/// Makes a spool folder the user named that is not there yet (and the
/// folders above it), private to the user as the default one is.
fn create_if_missing(folder: &Path) -> Result<(), String> {
    if std::fs::symlink_metadata(folder).is_ok() {
        return Ok(());
    }
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(folder) {
        Ok(()) => Ok(()),
        // Made meanwhile by another process of the tree.
        Err(_) if folder.is_dir() => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether spools can be created in `folder`; why not otherwise.
fn writable_folder(folder: &Path) -> Result<(), String> {
    let metadata = std::fs::metadata(folder).map_err(|e| e.to_string())?;
    if !metadata.is_dir() {
        return Err("not a folder".into());
    }
    let c_path = CString::new(folder.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

/// Nothing of this tree can be recorded: say so once, here in its root, and
/// turn recording off for the root and, through the environment, for every
/// process it starts.
fn untrace_tree(reason: &str) {
    if !environment::settings().quiet {
        let line = format!("cudatrace: nothing is recorded: {reason}\n");
        // SAFETY: writing a buffer we own to stderr; a failure is ignored.
        unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    }
    crate::system::tracing_switch::turn_tracing_off();
    set(settings::DISABLE.name, "1");
}

/// Whether this tree's first writer starts its collector. Read when a spool
/// is made, from the environment as it stands then, as the tree's other
/// variables below are: the root set them in its constructor, and each
/// process reads them where it acts on them.
fn spawn_mode() -> bool {
    COLLECTOR.value_os().is_some_and(|v| v == COLLECTOR_SPAWN)
}

/// Creates `dir` (and its parent) private to this user if this process's tree
/// owns it. Refuses a parent that someone else owns or that others can write
/// (`errno` then says EACCES, as the folder's owner would have).
pub(crate) fn prepare_spool_dir(dir: &Path) -> bool {
    if !spawn_mode() {
        return true;
    }
    let Some(parent) = dir.parent() else { return false };
    // SAFETY: no preconditions.
    if naming::ensure_private_folder(parent, unsafe { libc::getuid() }).is_err() {
        if std::fs::symlink_metadata(parent).is_ok() {
            // SAFETY: the calling thread's errno; the hook restores the program's.
            unsafe { *libc::__errno_location() = libc::EACCES };
        }
        return false;
    }
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::AlreadyExists,
    }
}

/// Starts `cudatrace collect` for the tree, if this is the first process of
/// the tree to write a spool. The helper it starts forks the collector and
/// exits at once; it is an unseen child (no SIGCHLD, invisible to the
/// program's waits), reaped here.
pub(crate) fn start_collector_if_first(dir: &Path) {
    if !spawn_mode() {
        return;
    }
    let lock = dir.join(naming::COLLECTOR_LOCK);
    let claimed = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)
        .is_ok();
    if !claimed {
        return;
    }
    let Some(cli) = collector_program() else { return };
    // The trace the root named, else the folder the collector names it in.
    let (option, destination) = match TRACE_FOLDER.value_os() {
        Some(folder) => ("--trace-folder", folder),
        None => ("-o", OUT.value_os().unwrap_or_default()),
    };
    let root = ROOT_PID.value_os().unwrap_or_default();
    let args: Vec<OsString> = vec![
        cli.clone().into(),
        "collect".into(),
        "--detach".into(),
        "--root-pid".into(),
        root,
        option.into(),
        destination,
        dir.as_os_str().to_owned(),
    ];
    let environment: Vec<OsString> = std::env::vars_os()
        .filter(|(key, _)| key != "LD_PRELOAD")
        .map(|(key, value)| {
            let mut pair = key;
            pair.push("=");
            pair.push(value);
            pair
        })
        .collect();
    let to_c = |list: Vec<OsString>| -> Option<Vec<CString>> {
        list.into_iter().map(|s| CString::new(s.into_vec()).ok()).collect()
    };
    let (Some(args), Some(environment)) = (to_c(args), to_c(environment)) else {
        return;
    };
    let mut argv: Vec<*mut libc::c_char> = args.iter().map(|s| s.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let mut envp: Vec<*mut libc::c_char> = environment.iter().map(|s| s.as_ptr().cast_mut()).collect();
    envp.push(std::ptr::null_mut());
    let Ok(program) = CString::new(cli.as_os_str().as_bytes()) else {
        return;
    };
    // Started through a child the program can neither wait for nor hear
    // end; the helper forks the collector and exits.
    // SAFETY: NUL-terminated argument and environment arrays that outlive the call.
    unsafe { unseen_child::start(program.as_ptr(), argv.as_ptr().cast(), envp.as_ptr().cast()) };
}

/// `$CUDATRACE_CLI`, or the `cudatrace` that sits next to this library.
fn collector_program() -> Option<PathBuf> {
    if let Some(cli) = settings::CLI.non_empty() {
        return Some(cli.into());
    }
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::uninit();
    // SAFETY: dladdr fills `info` for an address inside this library.
    let found = unsafe { libc::dladdr(collector_program as *const libc::c_void, info.as_mut_ptr()) };
    if found == 0 {
        return None;
    }
    // SAFETY: dladdr succeeded, so dli_fname is a NUL-terminated path.
    let library = unsafe { std::ffi::CStr::from_ptr(info.assume_init().dli_fname) };
    let library = Path::new(std::ffi::OsStr::from_bytes(library.to_bytes()));
    let cli = library.parent()?.join("cudatrace");
    cli.exists().then_some(cli)
}
