//! Finding the spool folder of a traced job that is running, from its
//! processes. A process that records has the job's switch file
//! (`recording.switch`) mapped, which `/proc/PID/maps` shows; one that has
//! not recorded yet has the folder in its environment (`CUDATRACE_DIR`,
//! with the variables cudatrace sets beside it). Processes this user cannot
//! read are not this user's jobs.
//!
//! A command given no job acts only on a job started from its own terminal
//! ([`started_here`]): with several shells open, the only job of the user
//! may well be another shell's.

use super::procfs;
use cudatrace_events::{recording_switch, settings};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The folder of the switch file process `pid` has mapped, if any.
fn mapped_switch_folder(pid: u32) -> Option<PathBuf> {
    let maps = std::fs::read(format!("/proc/{pid}/maps")).ok()?;
    let suffix = format!("/{}", recording_switch::FILE_NAME);
    maps.split(|&b| b == b'\n').find_map(|line| {
        // The path is the sixth field; it may hold spaces, never a newline.
        let at = line.iter().position(|&b| b == b'/')?;
        let path = &line[at..];
        path.ends_with(suffix.as_bytes())
            .then(|| {
                Path::new(std::ffi::OsStr::from_bytes(path))
                    .parent()
                    .map(Path::to_path_buf)
            })
            .flatten()
    })
}

/// Variables cudatrace sets beside `CUDATRACE_DIR` in a traced job: with
/// neither, a `CUDATRACE_DIR` is a user's own (where runs make folders).
pub const SET_BY_CUDATRACE: [&str; 2] = [settings::COLLECTOR.name, settings::ROOT_PID.name];

/// The spool folder cudatrace put in process `pid`'s environment: only
/// where cudatrace's own variables stand beside it (a `CUDATRACE_DIR` a
/// user exported is where runs make their folders, not a job's folder); a
/// relative one is taken from the process's working directory.
fn spool_dir_in_environment(pid: u32) -> Option<PathBuf> {
    let environment = procfs::environment(pid)?;
    let set_by_cudatrace = SET_BY_CUDATRACE
        .iter()
        .any(|key| procfs::value(&environment, key).is_some());
    if !set_by_cudatrace {
        return None;
    }
    let dir = procfs::value(&environment, settings::DIR.name).filter(|dir| !dir.is_empty())?;
    let dir = Path::new(std::ffi::OsStr::from_bytes(dir));
    if dir.is_absolute() {
        Some(dir.to_path_buf())
    } else {
        Some(std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?.join(dir))
    }
}

/// The job folder of process `pid` itself, if it is traced.
fn own_job(pid: u32) -> Option<PathBuf> {
    mapped_switch_folder(pid).or_else(|| spool_dir_in_environment(pid))
}

/// What is known of a process named as a job.
pub enum Named {
    /// Its job's spool folder.
    Job(PathBuf),
    /// No such process.
    Gone,
    /// It runs, but neither it nor a child of its is traced (or it is
    /// another user's).
    NotTraced,
}

/// The job of process `pid`: its own, or, for a process that started a
/// traced command (`cudatrace run`), its children's.
pub fn job_of(pid: u32) -> Named {
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return Named::Gone;
    }
    if let Some(dir) = own_job(pid) {
        return Named::Job(dir);
    }
    let me = std::process::id();
    let from_child = procfs::pids()
        .into_iter()
        .filter(|&child| child != me && procfs::parent_of(child) == Some(pid))
        .find_map(own_job);
    from_child.map_or(Named::NotTraced, Named::Job)
}

/// The spool folders of this user's running traced jobs whose folder
/// exists, each with its processes' pids, in order.
pub fn running_jobs() -> BTreeMap<PathBuf, Vec<u32>> {
    let me = std::process::id();
    let mut jobs: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    for pid in procfs::pids().into_iter().filter(|&pid| pid != me) {
        if let Some(dir) = own_job(pid).filter(|dir| dir.is_dir()) {
            jobs.entry(dir).or_default().push(pid);
        }
    }
    jobs.values_mut().for_each(|pids| pids.sort_unstable());
    jobs
}

/// Where a process was started from: its session and its controlling
/// terminal. Processes inherit both from the shell that started them, so a
/// job's processes have those of the shell its `cudatrace run` (or its
/// plain `LD_PRELOAD` command) was typed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The session id; 0 where unknown (a session led from outside this
    /// pid namespace).
    session: u32,
    /// The controlling terminal's device number; 0 for none.
    terminal: u32,
}

impl Origin {
    /// Where process `pid` was started from, if it can be read.
    pub fn of(pid: u32) -> Option<Origin> {
        let (session, terminal) = procfs::session_and_terminal(pid)?;
        Some(Origin { session, terminal })
    }

    /// Where this process was started from.
    pub fn of_this_process() -> Option<Origin> {
        Origin::of(std::process::id())
    }

    /// Whether a process started from `other` was started from the same
    /// terminal: the same controlling terminal, or the same session (which
    /// also covers shells with no terminal, such as a script's or a batch
    /// job's). Unknown sessions and no terminal match nothing.
    pub fn same_terminal(self, other: Origin) -> bool {
        (self.terminal != 0 && self.terminal == other.terminal) || (self.session != 0 && self.session == other.session)
    }
}

/// Whether the job whose processes are `pids` was started from `here`:
/// one of its processes was. The detached collector of a plain `LD_PRELOAD`
/// tree, in a session of its own with no terminal, matches no terminal.
pub fn started_from(pids: &[u32], here: Origin) -> bool {
    pids.iter()
        .filter_map(|&pid| Origin::of(pid))
        .any(|origin| here.same_terminal(origin))
}

/// Of `jobs` (as [`running_jobs`] gives them), the spool folders of those
/// started from this process's terminal, in order; none if this process's
/// own origin cannot be read.
pub fn started_here(jobs: &BTreeMap<PathBuf, Vec<u32>>) -> Vec<PathBuf> {
    let Some(here) = Origin::of_this_process() else {
        return Vec::new();
    };
    jobs.iter()
        .filter(|(_, pids)| started_from(pids, here))
        .map(|(dir, _)| dir.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_of_this_terminal_by_its_terminal_or_its_session() {
        let origin = |session, terminal| Origin { session, terminal };
        let here = origin(100, 34816);
        // The same terminal, or the same session (as a script's jobs, with
        // no terminal, share it).
        assert!(here.same_terminal(origin(100, 34816)));
        assert!(here.same_terminal(origin(200, 34816)));
        assert!(origin(100, 0).same_terminal(origin(100, 0)));
        // Another terminal and session; a job detached into a session of
        // its own.
        assert!(!here.same_terminal(origin(200, 34817)));
        assert!(!here.same_terminal(origin(300, 0)));
        // Unknown sessions (led from outside this pid namespace) and no
        // terminal tell nothing.
        assert!(!origin(0, 0).same_terminal(origin(0, 0)));
    }

    #[test]
    fn this_process_s_origin_is_read_from_proc() {
        let here = Origin::of_this_process().expect("this process's /proc/self/stat");
        // SAFETY: no preconditions.
        assert_eq!(i64::from(here.session), i64::from(unsafe { libc::getsid(0) }));
        let knowable = here.session != 0 || here.terminal != 0;
        assert_eq!(started_from(&[std::process::id()], here), knowable);
    }
}
