//! Work run when a thread ends, without `malloc`.
//!
//! A Rust thread-local with a destructor registers it with the C library
//! (`__cxa_thread_atexit_impl`), which allocates: a thread's first `malloc`
//! makes the C library reserve an arena of 64 MiB of address space for it.
//! Threads that never allocate themselves would pay that for the library,
//! and a program with a limit on its address space (`ulimit -v`) would see
//! its own allocations fail. So the library's per-thread tables (mappings
//! of their own) are given back through one `pthread_key_create` key,
//! whose per-thread value the C library keeps in the thread's descriptor.

use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

/// How many objects a thread may leave to be released: the library has a
/// handful of per-thread tables.
const MOST: usize = 8;

/// The key: 0 until made, `u32::MAX` if it could not be made, else key + 1.
static KEY: AtomicU32 = AtomicU32::new(0);

/// A release function and its object.
type Release = (unsafe fn(*mut u8), *mut u8);

thread_local! {
    /// What the thread leaves to be released, in order; the rest `None`.
    static PENDING: UnsafeCell<[Option<Release>; MOST]> = const { UnsafeCell::new([None; MOST]) };
    /// Set once the thread's objects were released: the thread is ending,
    /// and code that still runs on it (another library's key destructor
    /// calling CUDA, a signal handler) must not use them.
    static RELEASED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread's objects were released (it is ending).
#[inline]
pub(crate) fn released() -> bool {
    RELEASED.try_with(Cell::get).unwrap_or(true)
}

/// Has `release(object)` called when the calling thread ends; false when
/// it cannot be (the caller then releases the object itself, now).
pub(crate) fn release_at_exit(object: *mut u8, release: unsafe fn(*mut u8)) -> bool {
    if released() {
        return false;
    }
    let Some(key) = key() else { return false };
    PENDING
        .try_with(|pending| {
            // SAFETY: only this thread touches its list.
            let pending = unsafe { &mut *pending.get() };
            let Some(free) = pending.iter().position(Option::is_none) else {
                return false;
            };
            // The first object: the key's value makes its destructor run.
            // SAFETY: a key of ours; any non-null value does.
            if free == 0 && unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<c_void>()) } != 0 {
                return false;
            }
            pending[free] = Some((release, object));
            true
        })
        .unwrap_or(false)
}

/// Makes the key now, if it is not made yet: for work that must not find
/// every key taken by the program later.
pub(crate) fn prepare() {
    let _ = key();
}

/// The key, made on first use (or by [`prepare`]).
fn key() -> Option<libc::pthread_key_t> {
    match KEY.load(Ordering::Acquire) {
        0 => {}
        u32::MAX => return None,
        stored => return Some(stored - 1),
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a valid out-pointer and a destructor of the right type.
    let made = unsafe { libc::pthread_key_create(&mut key, Some(release_thread)) } == 0;
    let stored = if made { key + 1 } else { u32::MAX };
    match KEY.compare_exchange(0, stored, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => made.then_some(key),
        Err(theirs) => {
            if made {
                // Another thread made one first.
                // SAFETY: our own key, never used.
                unsafe { libc::pthread_key_delete(key) };
            }
            (theirs != u32::MAX).then(|| theirs - 1)
        }
    }
}

/// The key's destructor: releases what the ending thread left.
unsafe extern "C" fn release_thread(_value: *mut c_void) {
    // First: whatever runs on this thread from here on makes do without.
    let _ = RELEASED.try_with(|released| released.set(true));
    let _ = PENDING.try_with(|pending| {
        for entry in 0..MOST {
            // SAFETY: only this thread touches its list (a release never
            // adds to it: the thread is marked released first).
            if let Some((release, object)) = unsafe { (*pending.get())[entry].take() } {
                // SAFETY: registered with this object, released once.
                unsafe { release(object) };
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static ADDED: AtomicUsize = AtomicUsize::new(0);

    unsafe fn count(object: *mut u8) {
        ADDED.fetch_add(object as usize, Ordering::Relaxed);
    }

    #[test]
    fn what_a_thread_leaves_is_released_when_it_ends_and_no_more_than_fits() {
        std::thread::spawn(|| {
            // The objects are numbers the release function adds up.
            let object = |n: usize| std::ptr::without_provenance_mut::<u8>(n);
            assert!(release_at_exit(object(1), count));
            assert!(release_at_exit(object(10), count));
            for _ in 2..MOST {
                assert!(release_at_exit(object(100), count));
            }
            assert!(!release_at_exit(object(1000), count), "the list is full");
            assert_eq!(ADDED.load(Ordering::Relaxed), 0);
            assert!(!released());
        })
        .join()
        .unwrap();
        assert_eq!(ADDED.load(Ordering::Relaxed), 11 + 100 * (MOST - 2));
    }
}
