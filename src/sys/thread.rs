//! The calling thread: its kernel thread id, asked once per thread, and the
//! fork generation that tells a forked child's cached values from its
//! parent's.

use crate::sys::thread_block;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bumped in every forked child, so that thread-local caches made in the
/// parent are recognised as stale.
#[unsafe(link_section = "cudatrace_hot")]
static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);

/// The current fork generation.
#[inline]
pub fn fork_generation() -> u32 {
    FORK_GENERATION.load(Ordering::Relaxed)
}

/// Called in a forked child: every thread-local cache made before is stale.
pub fn new_fork_generation() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Kernel thread id of the caller; one `gettid` per thread (and per fork).
#[inline]
pub fn current_tid() -> u32 {
    let generation = fork_generation();
    let cell = &thread_block::current().tid;
    let (cached_generation, tid) = cell.get();
    if tid != 0 && cached_generation == generation {
        return tid;
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    cell.set((generation, tid));
    tid
}

/// The calling thread's `errno` after a failed system call (`EIO` if none
/// can be read), for the spool's counts of dropped records.
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}
