//! `fork`: the parent notes each child in its spool, so that a child that
//! leaves no spool of its own (it made no CUDA call, or could not record
//! and had no way to say so) is still known to the trace.
//!
//! Only a parent that has a spool notes its children: one that never used
//! CUDA is not in the trace, and a `fork` is no reason to put it there. The
//! child side of a fork is `lifecycle`'s, through `pthread_atfork`, which
//! the real `fork` runs.

use crate::record::recorder;
use crate::system::loader::next_function;
use crate::system::tracing_switch::guarded;
use std::sync::atomic::AtomicUsize;

type ForkFn = unsafe extern "C" fn() -> libc::pid_t;

static REAL_FORK: AtomicUsize = AtomicUsize::new(0);

/// Finds the C library's `fork`, from the library constructor (a fork from
/// a signal handler must not look a symbol up).
pub(crate) fn resolve() {
    next_function(c"fork", &REAL_FORK);
}

/// `fork`.
///
/// # Safety
/// As the C library's `fork`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let real = next_function(c"fork", &REAL_FORK);
    if real == 0 {
        // SAFETY: the thread's errno.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    // SAFETY: the C library's fork.
    let child = unsafe { std::mem::transmute::<usize, ForkFn>(real)() };
    if child > 0 {
        guarded(|| recorder::forked(child as u32));
    }
    child
}
