//! Per-process state the hooks share: whether tracing is on, the caller's
//! thread id, and what a forked child must forget about its parent.

use crate::{live_table, spool_writer};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Set when tracing has turned itself off (internal failure, or `CUDATRACE_DISABLE`).
static TRACING_OFF: AtomicBool = AtomicBool::new(false);

/// Bumped in every forked child, so that thread-local caches made in the
/// parent are recognised as stale.
static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// (fork generation, kernel tid) of the current thread; tid 0 = not yet asked.
    static CACHED_TID: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

/// Whether hooks should record anything.
#[inline]
pub fn tracing_on() -> bool {
    !TRACING_OFF.load(Ordering::Relaxed)
}

/// Stops recording for the rest of the process's life; calls still go through.
pub fn turn_tracing_off() {
    TRACING_OFF.store(true, Ordering::Relaxed);
}

/// Kernel thread id of the caller; one `gettid` per thread (and per fork).
#[inline]
pub fn current_tid() -> u32 {
    let generation = FORK_GENERATION.load(Ordering::Relaxed);
    CACHED_TID
        .try_with(|cell| {
            let (cached_generation, tid) = cell.get();
            if tid != 0 && cached_generation == generation {
                return tid;
            }
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            cell.set((generation, tid));
            tid
        })
        // Thread-local storage is gone while a thread is being torn down.
        .unwrap_or_else(|_| unsafe { libc::gettid() } as u32)
}

/// Runs `record` (the bookkeeping of one hook) so that it can neither unwind
/// into the traced program nor change its `errno`. A panic turns tracing off.
#[inline]
pub fn guarded(record: impl FnOnce()) {
    if !tracing_on() {
        return;
    }
    // SAFETY: __errno_location always returns the calling thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(record)).is_err() {
        turn_tracing_off();
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

extern "C" fn before_fork() {
    crate::module_map::before_fork();
}

extern "C" fn after_fork_in_parent() {
    crate::module_map::after_fork_in_parent();
}

/// The child side of `fork`: it has one thread, a copy of the parent's
/// memory, and the parent's spool mapped shared. It must write its own spool
/// and must not inherit locks held by parent threads that no longer exist.
extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
    spool_writer::forget_parent_spool();
    live_table::forget_parent_table();
    crate::call_stack::forget_parent_stacks();
    crate::module_map::after_fork_in_child();
    crate::device_probe::forget_parent();
    crate::launch_hooks::forget_parent();
}

/// Library constructor. It does no CUDA work; it reads the environment and,
/// in the root of a traced tree, adds the tree's spool folder to it.
extern "C" fn on_load() {
    if std::env::var_os("CUDATRACE_DISABLE").is_some_and(|v| v != "0" && !v.is_empty()) {
        turn_tracing_off();
    }
    if std::env::var_os("CUDATRACE_LAUNCH_HOOKS").is_some_and(|v| v == "0") {
        crate::launch_hooks::disable();
    }
    if std::env::var_os("CUDATRACE_SAMPLES").is_some_and(|v| v == "0") {
        crate::device_probe::disable_samples();
    }
    if tracing_on() {
        crate::tree_root::adopt_tree_if_root();
        crate::call_stack::configure_from_environment();
        let _ = std::panic::catch_unwind(|| {
            crate::python_frames::resolve();
            crate::module_map::rebuild();
        });
    }
    // SAFETY: registering a plain function pointer; the library is never unloaded.
    unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child)) };
}

#[used]
#[unsafe(link_section = ".init_array")]
static RUN_ON_LOAD: extern "C" fn() = on_load;
