//! Native stack capture in a hook: return addresses only, by `.eh_frame`
//! unwinding with framehop over the in-memory sections of the loaded
//! modules ([`crate::stacks::module_map`]), falling back to frame pointers where a
//! module has no unwind information.
//!
//! No lock is taken (libgcc's unwinder would take the loader lock on older
//! glibc), nothing is symbolized, and nothing is allocated after a thread's
//! first capture, which allocates its rule cache and asks for its stack
//! bounds, so that reads never leave the thread's stack.

use crate::stacks::module_map;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{MustNotAllocateDuringUnwind, Unwinder};
use std::cell::UnsafeCell;

type RuleCache = CacheX86_64<MustNotAllocateDuringUnwind>;

struct ThreadUnwind {
    cache: Option<Box<RuleCache>>,
    /// The thread's stack, [low, high); (0, 0) until asked.
    stack: (u64, u64),
}

thread_local! {
    static THREAD: UnsafeCell<ThreadUnwind> = const {
        UnsafeCell::new(ThreadUnwind { cache: None, stack: (0, 0) })
    };
}

/// The calling thread's stack bounds.
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

#[inline(always)]
fn registers() -> (u64, u64, u64) {
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

/// Fills `out` with the caller's return addresses, innermost first, leaving
/// out this library's own frames wherever they are. Returns how many were stored and whether
/// the stack went on past `out`'s end.
#[inline(never)]
pub fn capture(out: &mut [u64]) -> (usize, bool) {
    let Some((unwinder, own)) = module_map::unwinder() else {
        return (0, false);
    };
    let (ip, sp, bp) = registers();
    THREAD
        .try_with(|thread| {
            // SAFETY: only this thread touches its state, and capture is not re-entered
            // on a thread (the caller guards against that).
            let thread = unsafe { &mut *thread.get() };
            if thread.stack == (0, 0) {
                thread.stack = stack_bounds();
            }
            let (low, high) = thread.stack;
            if !(low..high).contains(&sp) {
                return (0, false);
            }
            let cache = thread.cache.get_or_insert_with(|| Box::new(RuleCache::new_in()));
            let mut read_stack = |address: u64| {
                if address >= sp && address.checked_add(8).is_some_and(|end| end <= high) && address.is_multiple_of(8) {
                    // SAFETY: inside this thread's live stack, aligned.
                    Ok(unsafe { (address as *const u64).read() })
                } else {
                    Err(())
                }
            };
            let mut frames = unwinder.iter_frames(ip, UnwindRegsX86_64::new(ip, sp, bp), cache, &mut read_stack);
            let mut count = 0;
            while let Ok(Some(frame)) = frames.next() {
                let address = frame.address();
                // Our hooks sit between the program and CUDA, at the top and
                // again where the runtime calls the driver: never the program's.
                if (own.0..own.1).contains(&address) {
                    continue;
                }
                if count == out.len() {
                    return (count, true);
                }
                out[count] = address;
                count += 1;
            }
            (count, false)
        })
        .unwrap_or((0, false))
}
