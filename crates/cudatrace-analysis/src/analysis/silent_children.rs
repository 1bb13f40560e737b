//! Forked children that left no spool: the children recorded processes
//! forked that are neither in the trace nor said they could not record.

use super::trace_index::TraceIndex;
use cudatrace_trace::UnrecordedProcess;
use std::collections::{BTreeMap, HashSet};

/// How many processes could not record: each entry is one, but an entry of
/// pid 0 stands for its parent's children that found no slot to be named
/// in, as many as its `uid` field says (at least one, for traces written
/// before it said).
pub fn unrecorded_count(processes: &[UnrecordedProcess]) -> u64 {
    processes
        .iter()
        .map(|p| if p.pid == 0 { u64::from(p.uid.max(1)) } else { 1 })
        .sum()
}

/// Per parent pid, how many of its children could not record without a
/// name (the pid-0 entries of [`unrecorded_count`]).
pub fn unnamed_children(processes: &[UnrecordedProcess]) -> BTreeMap<u32, u64> {
    let mut by_parent = BTreeMap::new();
    for p in processes.iter().filter(|p| p.pid == 0) {
        *by_parent.entry(p.ppid).or_default() += u64::from(p.uid.max(1));
    }
    by_parent
}

/// A child that a recorded process forked, that left no spool and did not
/// say it could not record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SilentChild {
    /// Its pid.
    pub pid: u32,
    /// The pid of the process that forked it.
    pub ppid: u32,
    /// When it was forked (`CLOCK_MONOTONIC`).
    pub time_ns: u64,
    /// Its parent's place in [`TraceIndex::processes`] (whose host it ran on).
    pub parent: usize,
}

/// The forked children that left no spool: neither an image of theirs is
/// in the trace nor did they say they could not record. Most made no CUDA
/// call (a DataLoader worker, a shell); the rest exec'd an image that could
/// not record, outside `cudatrace run`, with no way to say so.
pub fn silent_children(index: &TraceIndex) -> Vec<SilentChild> {
    // Pids are a host's: in a merged trace two hosts may use the same one.
    // A child runs on its parent's host. Processes that could not record
    // do not say their host; they are taken to be any host's.
    let known: HashSet<(&str, u32)> = index
        .processes
        .iter()
        .map(|p| (p.start.place.host.as_str(), p.start.pid))
        .collect();
    let unrecorded: HashSet<u32> = index.unrecorded.iter().map(|p| p.pid).collect();
    let host_of = |child: &SilentChild| index.processes[child.parent].start.place.host.as_str();
    let mut children: Vec<SilentChild> = index
        .processes
        .iter()
        .enumerate()
        .flat_map(|(parent, info)| {
            info.forks.iter().map(move |&(time_ns, pid)| SilentChild {
                pid,
                ppid: info.start.pid,
                time_ns,
                parent,
            })
        })
        .filter(|child| !known.contains(&(host_of(child), child.pid)) && !unrecorded.contains(&child.pid))
        .collect();
    children.sort_by(|a, b| (a.time_ns, host_of(a), a.pid).cmp(&(b.time_ns, host_of(b), b.pid)));
    children.dedup_by(|a, b| a.pid == b.pid && host_of(a) == host_of(b));
    children
}
