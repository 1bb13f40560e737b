//! Finding the spool folder of a traced job that is running, from its
//! processes. A process that records has the job's switch file
//! (`recording.switch`) mapped, which `/proc/PID/maps` shows; one that has
//! not recorded yet has the folder in its environment (`CUDATRACE_DIR`,
//! with the variables cudatrace sets beside it). Processes this user cannot
//! read are not this user's jobs.

use super::procfs;
use cudatrace_events::recording_switch;
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
pub const SET_BY_CUDATRACE: [&str; 2] = ["CUDATRACE_COLLECTOR", "CUDATRACE_ROOT_PID"];

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
    let dir = procfs::value(&environment, "CUDATRACE_DIR").filter(|dir| !dir.is_empty())?;
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
