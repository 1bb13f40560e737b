//! Whether the library records at all, and the guard every piece of
//! bookkeeping runs under, so that none of it can unwind into the traced
//! program or change its `errno`.

use crate::system::process_mark;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set when tracing has turned itself off (internal failure, or `CUDATRACE_DISABLE`).
#[unsafe(link_section = "cudatrace_hot")]
static TRACING_OFF: AtomicBool = AtomicBool::new(false);

/// Where the switch lies (the hot statics' test checks their section holds it).
#[cfg(test)]
pub(crate) fn switch_address() -> usize {
    std::ptr::from_ref(&TRACING_OFF) as usize
}

/// Whether hooks should record anything.
#[inline]
pub(crate) fn tracing_on() -> bool {
    !TRACING_OFF.load(Ordering::Relaxed)
}

/// Stops recording for the rest of the process's life; calls still go through.
pub(crate) fn turn_tracing_off() {
    TRACING_OFF.store(true, Ordering::Relaxed);
}

/// Runs `work` and puts the calling thread's `errno` back as it was: for
/// bookkeeping that may run outside [`guarded`], such as the spool's
/// creation when a hook reserves a sequence number before the real call.
#[inline]
pub(crate) fn keeping_errno<T>(work: impl FnOnce() -> T) -> T {
    // SAFETY: __errno_location always returns the calling thread's errno.
    let location = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let errno = unsafe { *location };
    let result = work();
    // SAFETY: as above.
    unsafe { *location = errno };
    result
}

/// Runs `record` (the bookkeeping of one hook) so that it can neither unwind
/// into the traced program nor change its `errno`. A panic turns tracing off.
#[inline]
pub(crate) fn guarded(record: impl FnOnce()) {
    if !tracing_on() {
        return;
    }
    // A child that no fork handler ran in starts over before it records;
    // while it does (on another thread, or in the frame this handler
    // interrupted), nothing is recorded.
    if !process_mark::notice_new_process() {
        return;
    }
    // SAFETY: __errno_location always returns the calling thread's errno,
    // at one place for the thread's life: asked once, read and written back.
    let location = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let errno = unsafe { *location };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(record)).is_err() {
        turn_tracing_off();
    }
    // SAFETY: as above.
    unsafe { *location = errno };
}
