//! Spare stacks for the hook path's deep work on a thread whose own stack
//! is nearly full.
//!
//! Programs make threads with small stacks (runtimes that start many of
//! them, often with 16–64 KiB each), and signal handlers run on alternate
//! stacks of a few KiB. A hook must fit beside the program's own frames
//! there. Most of a hook is shallow, but walking the caller's stack with
//! the unwinder is not: reading an unwinding rule the first time evaluates
//! the frame's call-frame information, which takes several KiB of stack.
//! Where the thread's stack has less room left than that work needs, the
//! work runs on one of a few stacks of ours instead, mapped once on first
//! need (without swap, so only the pages touched cost memory).
//!
//! A stack is claimed for one piece of work, microseconds long, and given
//! back after it; when every spare stack is busy the work is not done (the
//! caller degrades, as it does when it cannot walk at all).

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// How many spare stacks there are: claimed per walk, not per thread.
const STACKS: usize = 8;

/// Each spare stack's size: the deep work needs under 16 KiB in an
/// optimised build; an unoptimised one needs several times more.
const STACK_BYTES: usize = 256 << 10;

/// An inaccessible page below each stack, so that an overflow faults
/// instead of writing into the next stack.
const GUARD_BYTES: usize = 64 << 10;

/// The mapping that holds every spare stack, each above its guard; null
/// until first needed.
static REGION: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

/// One bit a stack, set while a piece of work runs on it.
static IN_USE: AtomicU32 = AtomicU32::new(0);

/// Runs `work` where it has at least `needed` bytes of stack: on the
/// calling thread's stack when the room between `sp` and the stack's
/// lowest address `low` is enough, otherwise on a spare stack. `None` when
/// it needed a spare stack and none could be had.
///
/// A panic in `work` goes on unwinding from the caller's frame.
#[inline]
pub(crate) fn with_room<R>(needed: u64, sp: u64, low: u64, work: impl FnOnce() -> R) -> Option<R> {
    if sp.wrapping_sub(low) >= needed && sp > low {
        return Some(work());
    }
    on_spare_stack(work)
}

/// Runs `work` on a spare stack; `None` when none could be had.
#[cold]
#[inline(never)]
pub(crate) fn on_spare_stack<R>(work: impl FnOnce() -> R) -> Option<R> {
    let index = take_stack()?;
    Some(run_on(index, work))
}

/// Runs `work`, done rarely (once a process, a device or a thread) but
/// deep, on a spare stack, or on the calling thread's own when every spare
/// stack is busy.
#[cold]
#[inline(never)]
pub(crate) fn deep<R>(work: impl FnOnce() -> R) -> R {
    match take_stack() {
        Some(index) => run_on(index, work),
        None => work(),
    }
}

/// Claims a spare stack (mapping them all on first use); its index.
fn take_stack() -> Option<usize> {
    region()?;
    claim()
}

/// Runs `work` on spare stack `index`, claimed by the caller, and gives it
/// back.
fn run_on<R>(index: usize, work: impl FnOnce() -> R) -> R {
    let region = REGION.load(Ordering::Acquire);
    let base = region.wrapping_add(index * (GUARD_BYTES + STACK_BYTES) + GUARD_BYTES);
    // psm's callback must not unwind: a panic is caught on the spare stack
    // and thrown again once back on the thread's own.
    // SAFETY: `base` is the low end of a stack of ours (the region is
    // mapped: `take_stack` made sure), page-aligned, of STACK_BYTES (a
    // multiple of 16), claimed by this thread alone until given back below.
    let result = unsafe {
        psm::on_stack(base, STACK_BYTES, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
        })
    };
    IN_USE.fetch_and(!(1 << index), Ordering::Release);
    match result {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Claims a free stack's bit; `None` when all are busy.
fn claim() -> Option<usize> {
    let mut in_use = IN_USE.load(Ordering::Relaxed);
    loop {
        let free = (!in_use).trailing_zeros() as usize;
        if free >= STACKS {
            return None;
        }
        match IN_USE.compare_exchange_weak(in_use, in_use | (1 << free), Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Some(free),
            Err(now) => in_use = now,
        }
    }
}

/// The stacks' mapping, made on first use; `None` when it cannot be made.
fn region() -> Option<*mut u8> {
    let region = REGION.load(Ordering::Acquire);
    if !region.is_null() {
        return Some(region);
    }
    let bytes = STACKS * (GUARD_BYTES + STACK_BYTES);
    // SAFETY: a fresh private anonymous mapping, no memory of anyone's.
    let fresh = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if fresh == libc::MAP_FAILED {
        return None;
    }
    let fresh = fresh.cast::<u8>();
    for index in 0..STACKS {
        // SAFETY: each guard lies inside the mapping just made.
        unsafe {
            libc::mprotect(
                fresh.add(index * (GUARD_BYTES + STACK_BYTES)).cast(),
                GUARD_BYTES,
                libc::PROT_NONE,
            );
        }
    }
    match REGION.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(fresh),
        Err(theirs) => {
            // Another thread mapped them first: ours goes back.
            // SAFETY: our own mapping, never shared.
            unsafe { libc::munmap(fresh.cast(), bytes) };
            Some(theirs)
        }
    }
}

/// In a forked child: every stack is free again (the threads that held
/// them do not exist there), but the one this thread runs on, if it forked
/// from deep work or from a signal handler that interrupted some. The
/// mapping is inherited and kept.
pub(crate) fn after_fork_in_child() {
    let region = REGION.load(Ordering::Acquire) as usize;
    let sp = psm::stack_pointer() as usize;
    let span = GUARD_BYTES + STACK_BYTES;
    let mine = if region != 0 && (region..region + STACKS * span).contains(&sp) {
        1 << ((sp - region) / span)
    } else {
        0
    };
    IN_USE.store(mine, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack_pointer() -> u64 {
        psm::stack_pointer() as u64
    }

    /// One test: the stacks' state is the process's, and tests run in
    /// parallel threads.
    #[test]
    fn work_runs_in_place_or_on_a_free_spare_stack_and_gives_it_back() {
        let here = stack_pointer();
        let in_place = with_room(4096, here, here - 8192, stack_pointer).unwrap();
        assert!(
            in_place <= here && here - in_place < 64 << 10,
            "{here:#x} {in_place:#x}"
        );
        let spare = with_room(16384, here, here - 8192, stack_pointer).unwrap();
        let region = REGION.load(Ordering::Acquire) as u64;
        let end = region + (STACKS * (GUARD_BYTES + STACK_BYTES)) as u64;
        assert!(
            (region..end).contains(&spare),
            "{spare:#x} outside {region:#x}..{end:#x}"
        );
        assert_eq!(IN_USE.load(Ordering::Relaxed), 0);

        // A panic unwinds from the caller's frame, and frees the stack.
        let caught = std::panic::catch_unwind(|| on_spare_stack(|| panic!("on the spare stack")));
        assert_eq!(*caught.unwrap_err().downcast::<&str>().unwrap(), "on the spare stack");
        assert_eq!(IN_USE.load(Ordering::Relaxed), 0);

        // When every stack is busy the work is not done.
        let nested = on_spare_stack(|| {
            for _ in 1..STACKS {
                claim().unwrap();
            }
            let refused = on_spare_stack(|| 7);
            IN_USE.store(1, Ordering::Relaxed);
            refused
        });
        assert_eq!(nested, Some(None));
        assert_eq!(IN_USE.load(Ordering::Relaxed), 0);

        // Deep work runs on a spare stack, or here when none is free.
        let spare = deep(stack_pointer);
        assert!((region..end).contains(&spare), "{spare:#x}");
        let here = on_spare_stack(|| {
            for _ in 1..STACKS {
                claim().unwrap();
            }
            let (outer, inner) = (stack_pointer(), deep(stack_pointer));
            IN_USE.store(1, Ordering::Relaxed);
            outer - inner
        });
        assert!(here.is_some_and(|distance| distance < 4096), "{here:?}");
        assert_eq!(IN_USE.load(Ordering::Relaxed), 0);
    }
}
