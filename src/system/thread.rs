//! The calling thread: its kernel thread id, asked once per thread (and
//! again in a forked child, whose block `thread_block::forget_parent`
//! clears).

use crate::system::thread_block;

/// Kernel thread id of the caller; one `gettid` per thread (and per fork).
#[inline]
pub(crate) fn current_tid() -> u32 {
    let cell = &thread_block::current().tid;
    let tid = cell.get();
    if tid != 0 {
        return tid;
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    cell.set(tid);
    tid
}

/// The calling thread's `errno` after a failed system call (`EIO` if none
/// can be read), for the spool's counts of dropped records.
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}
