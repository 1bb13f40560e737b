//! Noticing, at the next event, that this is a new process that no fork
//! handler told us about.
//!
//! `fork` runs the handlers the library registers with `pthread_atfork`,
//! and the child starts a spool of its own. `_Fork()`, `clone()` and the
//! raw clone system call run none: the child would go on writing into its
//! parent's spool (mapped shared), its events and exit taken for the
//! parent's. So the library keeps one word in a page mapped with
//! `MADV_WIPEONFORK`, which the kernel gives every child, however made,
//! as zeros: a hook that finds the word zero runs the fork child's work
//! first, then sets the word again.
//!
//! Threads (`clone` with `CLONE_VM`) share the page and see the word set;
//! a `vfork` child shares it too, and may only `exec` or `_exit`.

use crate::system::prefetch::prefetch_line;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// The word, in its page; null where the page could not be made (the
/// kernel lacks `MADV_WIPEONFORK`): children then go unnoticed here.
#[unsafe(link_section = "cudatrace_hot")]
static MARK: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());

/// What to run in a child noticed here: the fork child's work of every
/// layer (set once, at load, by the lifecycle module).
static ON_NEW_PROCESS: AtomicUsize = AtomicUsize::new(0);

/// Set while the child's work runs, so that the hooks it makes wait for
/// nothing and do not start it again.
static STARTING_OVER: AtomicBool = AtomicBool::new(false);

/// Makes the page and sets the word; `on_new_process` runs in a child that
/// no fork handler ran in, at its first event. Called once, at load.
pub(crate) fn set_up(on_new_process: fn()) {
    ON_NEW_PROCESS.store(on_new_process as usize, Ordering::Release);
    // SAFETY: page_size reads a constant of the process.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    // SAFETY: a fresh private anonymous mapping, no memory of anyone's.
    let fresh = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if fresh == libc::MAP_FAILED {
        return;
    }
    // SAFETY: our own mapping, just made.
    if unsafe { libc::madvise(fresh, page, libc::MADV_WIPEONFORK) } != 0 {
        // SAFETY: as above, never published.
        unsafe { libc::munmap(fresh, page) };
        return;
    }
    let word = fresh.cast::<AtomicU64>();
    // SAFETY: the mapping holds a zeroed, aligned u64, ours alone.
    unsafe { (*word).store(1, Ordering::Relaxed) };
    MARK.store(word, Ordering::Release);
}

/// Sets the word again: in a child, once its fork work is done.
pub(crate) fn mark() {
    let word = MARK.load(Ordering::Acquire);
    if !word.is_null() {
        // SAFETY: the page lives as long as the process.
        unsafe { (*word).store(1, Ordering::Release) };
    }
}

/// Runs the fork child's work if this is a new process that no fork
/// handler saw; false while that work is under way elsewhere (a signal
/// handler on the thread doing it, another thread of the child): the
/// caller then records nothing, since the parent's state is half undone.
/// One load and a compare.
#[inline(always)]
pub(crate) fn notice_new_process() -> bool {
    let word = MARK.load(Ordering::Relaxed);
    // SAFETY: the page lives as long as the process.
    if !word.is_null() && unsafe { (*word).load(Ordering::Relaxed) } == 0 {
        return start_over();
    }
    true
}

/// In a forked child, before its fork handler's work: whether a hook has
/// done that work already (the word, zero in any child, is set again).
/// False where there is no page.
pub(crate) fn started_over_already() -> bool {
    let word = MARK.load(Ordering::Acquire);
    // SAFETY: the page lives as long as the process.
    !word.is_null() && unsafe { (*word).load(Ordering::Acquire) } != 0
}

/// Asks for the word's line (a hook's entry does, with its other lines).
#[inline(always)]
pub(crate) fn prefetch() {
    let word = MARK.load(Ordering::Relaxed);
    if !word.is_null() {
        prefetch_line(word.cast::<u8>());
    }
}

#[cold]
#[inline(never)]
fn start_over() -> bool {
    if STARTING_OVER.swap(true, Ordering::AcqRel) {
        return false;
    }
    // The work makes system calls (unmapping, closing): the program's
    // errno is put back.
    // SAFETY: __errno_location always returns the calling thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    let address = ON_NEW_PROCESS.load(Ordering::Acquire);
    if address != 0 {
        // SAFETY: only `set_up` stores here, and it stores a `fn()`.
        let work = unsafe { std::mem::transmute::<usize, fn()>(address) };
        let _ = std::panic::catch_unwind(work);
    }
    mark();
    STARTING_OVER.store(false, Ordering::Release);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    static STARTED_OVER: AtomicU64 = AtomicU64::new(0);

    fn count() {
        STARTED_OVER.fetch_add(1, Ordering::Relaxed);
    }

    /// A child made by the raw clone system call (no fork handlers) finds
    /// the word zero and starts over once; the parent never does.
    #[test]
    fn a_child_made_without_fork_starts_over_once_and_the_parent_never() {
        set_up(count);
        assert!(!MARK.load(Ordering::Acquire).is_null(), "MADV_WIPEONFORK is missing");
        assert!(notice_new_process());
        assert_eq!(STARTED_OVER.load(Ordering::Relaxed), 0);
        // SAFETY: a fork-like clone; the child only reads and writes its own
        // copy of memory and leaves with _exit.
        let child = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) };
        if child == 0 {
            let proceeded = notice_new_process() && notice_new_process();
            let started = STARTED_OVER.load(Ordering::Relaxed) + u64::from(!proceeded) * 100;
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(if started == 1 { 0 } else { 10 + started as i32 }) };
        }
        assert!(child > 0);
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(child as i32, &mut status, 0) }, child as i32);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0);
        assert!(notice_new_process());
        assert_eq!(STARTED_OVER.load(Ordering::Relaxed), 0);
    }
}
