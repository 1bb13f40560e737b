//! Finding the spool folder of a traced job that is running, from its
//! processes' environments (`CUDATRACE_DIR`, which every traced process
//! inherits). Processes whose environment this user cannot read are not
//! this user's jobs.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The spool folder in process `pid`'s environment, if it has one.
fn spool_dir_in_environment(pid: u32) -> Option<PathBuf> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(b"CUDATRACE_DIR="))
        .filter(|dir| !dir.is_empty())
        .map(|dir| PathBuf::from(std::ffi::OsStr::from_bytes(dir)))
}

/// Every pid in `/proc`.
fn all_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// The parent pid of `pid`, from `/proc/PID/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
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

/// The job of process `pid`: its own spool folder, or, for a process that
/// started a traced command (`cudatrace run`), its children's.
pub fn job_of(pid: u32) -> Named {
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Named::Gone;
    }
    if let Some(dir) = spool_dir_in_environment(pid) {
        return Named::Job(dir);
    }
    let from_child = all_pids()
        .into_iter()
        .filter(|&child| parent_of(child) == Some(pid))
        .find_map(spool_dir_in_environment);
    from_child.map_or(Named::NotTraced, Named::Job)
}

/// The spool folders of this user's running traced jobs whose folder
/// exists, each with its processes' pids, in order.
pub fn running_jobs() -> BTreeMap<PathBuf, Vec<u32>> {
    let me = std::process::id();
    let mut jobs: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    for pid in all_pids().into_iter().filter(|&pid| pid != me) {
        if let Some(dir) = spool_dir_in_environment(pid).filter(|dir| dir.is_dir()) {
            jobs.entry(dir).or_default().push(pid);
        }
    }
    jobs.values_mut().for_each(|pids| pids.sort_unstable());
    jobs
}
