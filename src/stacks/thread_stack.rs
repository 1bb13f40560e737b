//! The calling thread's own stack: where it lies, which a walk never reads
//! outside of, and the registers a walk starts from.

use crate::system::address_budget;
use std::sync::atomic::{AtomicU64, Ordering};

/// The thread that loaded the library (the main thread, for a preloaded
/// library) and its stack's bounds, read when it loaded.
static LOADING_THREAD: AtomicU64 = AtomicU64::new(0);
static LOADING_THREAD_STACK: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Reads the calling thread's stack bounds, as the library loads. For the
/// main thread the C library finds them by reading `/proc/self/maps` (with
/// `malloc` and `sscanf`): a hook must never do that, since it may run in a
/// signal handler that interrupted `malloc`, on a stack of a few KiB.
pub(crate) fn note_loading_thread() {
    let (low, high) = stack_bounds();
    LOADING_THREAD_STACK[0].store(low, Ordering::Relaxed);
    LOADING_THREAD_STACK[1].store(high, Ordering::Relaxed);
    // SAFETY: pthread_self has no preconditions.
    LOADING_THREAD.store(unsafe { libc::pthread_self() } as u64, Ordering::Release);
}

/// The calling thread's stack bounds: read when the library loaded for the
/// thread that loaded it, else asked of the C library (which reads them
/// from the thread's own descriptor for a thread it started). (0, 0) for
/// another thread in a process with a limit on its address space: the C
/// library allocates there, and a thread's first `malloc` reserves 64 MiB
/// of address space (see `address_budget`); its events take no native
/// frames.
pub(crate) fn thread_stack_bounds() -> (u64, u64) {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    if LOADING_THREAD.load(Ordering::Acquire) == me {
        return (
            LOADING_THREAD_STACK[0].load(Ordering::Relaxed),
            LOADING_THREAD_STACK[1].load(Ordering::Relaxed),
        );
    }
    if address_budget::lean() {
        return (0, 0);
    }
    stack_bounds()
}

/// The calling thread's stack bounds, from the C library.
fn stack_bounds() -> (u64, u64) {
    // SAFETY: attr is initialised by pthread_getattr_np before use and destroyed after.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return (0, 0);
        }
        let (mut base, mut size) = (std::ptr::null_mut(), 0usize);
        let ok = libc::pthread_attr_getstack(&attr, &mut base, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if ok {
            (base as u64, base as u64 + size as u64)
        } else {
            (0, 0)
        }
    }
}

/// The instruction pointer, stack pointer and frame pointer where this is
/// inlined: where a walk from the caller's own frame starts.
#[inline(always)]
pub(crate) fn registers() -> (u64, u64, u64) {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags)
        );
    }
    (ip, sp, bp)
}
