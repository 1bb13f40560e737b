//! Deferred thread cancellation held off while the library does its own
//! work. `open`, `read`, `write`, `close` and their kind are cancellation
//! points: a thread with a `pthread_cancel` pending that made its first
//! CUDA call would be unwound from inside our spool creation, symbol
//! lookup or `/proc` read (and the forced unwind cannot cross a switch to
//! a spare stack: the program aborts). Our work runs with cancellation
//! disabled and the thread's own state is put back after it, so that the
//! cancellation acts at the program's next cancellation point, as it would
//! have without us.
//!
//! `pthread_setcancelstate` changes a word of the thread's descriptor: no
//! system call. It is used on cold paths only, never per hook.

// glibc's values (pthread.h); the libc crate does not bind these.
const PTHREAD_CANCEL_ENABLE: libc::c_int = 0;
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;

unsafe extern "C" {
    fn pthread_setcancelstate(state: libc::c_int, previous: *mut libc::c_int) -> libc::c_int;
}

/// Cancellation disabled until dropped, then the previous state restored.
pub(crate) struct NoCancel {
    previous: libc::c_int,
}

impl NoCancel {
    /// Disables cancellation for the calling thread until the guard drops.
    #[inline]
    pub(crate) fn hold() -> NoCancel {
        let mut previous = PTHREAD_CANCEL_ENABLE;
        // SAFETY: a valid out-pointer; the state is the calling thread's.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut previous) };
        NoCancel { previous }
    }
}

impl Drop for NoCancel {
    #[inline]
    fn drop(&mut self) {
        // Putting back ENABLE does not act on a pending cancellation by
        // itself: only the program's next cancellation point does.
        let mut ignored = 0;
        // SAFETY: as in `hold`.
        unsafe { pthread_setcancelstate(self.previous, &mut ignored) };
    }
}

/// Runs `work` with cancellation held off.
#[inline]
pub(crate) fn without_cancellation<T>(work: impl FnOnce() -> T) -> T {
    let _held = NoCancel::hold();
    work()
}
