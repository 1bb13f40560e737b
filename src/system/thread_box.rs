//! A thread's own table in a mapping of its own, made on its first use and
//! given back when the thread ends.
//!
//! The stack capture keeps per-thread buffers and caches of tens to
//! hundreds of KiB. A preloaded library's thread-local storage is carved out
//! of every thread's stack, where that much would keep threads with small
//! stacks from starting, so they live in mappings, made by the thread's
//! first capture. Not from `malloc`: a thread's first `malloc` makes the C
//! library reserve an arena of 64 MiB of address space for it, which a
//! program with a limit on its address space (`ulimit -v`) would pay for
//! threads that never allocate themselves. Inside another program's process
//! a mapping that fails must not abort it: the table is then unavailable
//! for the thread's life (asked for once), and the capture does without it.

use crate::system::lazy_mapping::ZeroIsEmpty;
use crate::system::thread_exit;
use std::ptr::NonNull;

/// A `T` in an anonymous mapping of its own, unmapped when dropped.
pub(crate) struct MappedBox<T> {
    value: NonNull<T>,
}

impl<T> MappedBox<T> {
    fn bytes() -> usize {
        std::mem::size_of::<T>().max(1)
    }

    /// Maps room for a `T`, zeroed; `None` when it cannot be mapped.
    fn map() -> Option<NonNull<T>> {
        const { assert!(std::mem::align_of::<T>() <= 4096, "a mapping is page-aligned") };
        // SAFETY: a fresh private anonymous mapping, no memory of anyone's.
        let fresh = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::bytes(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        (fresh != libc::MAP_FAILED)
            .then(|| NonNull::new(fresh.cast::<T>()))
            .flatten()
    }

    /// A `T` made by `make`, moved into a mapping; `None` when it cannot be
    /// mapped.
    pub(crate) fn new_with(make: impl FnOnce() -> T) -> Option<MappedBox<T>> {
        let value = Self::map()?;
        // SAFETY: fresh, aligned, writable room for one T, ours alone.
        unsafe { value.as_ptr().write(make()) };
        Some(MappedBox { value })
    }
}

impl<T: ZeroIsEmpty> MappedBox<T> {
    /// A zeroed `T` (an empty value); `None` when it cannot be mapped.
    pub(crate) fn zeroed() -> Option<MappedBox<T>> {
        Self::map().map(|value| MappedBox { value })
    }
}

impl<T> std::ops::Deref for MappedBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a valid T for as long as the box lives.
        unsafe { self.value.as_ref() }
    }
}

impl<T> std::ops::DerefMut for MappedBox<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: a valid T, reached only through this box.
        unsafe { self.value.as_mut() }
    }
}

impl<T> Drop for MappedBox<T> {
    fn drop(&mut self) {
        // SAFETY: the value is ours and dropped once, then its mapping goes.
        unsafe {
            std::ptr::drop_in_place(self.value.as_ptr());
            libc::munmap(self.value.as_ptr().cast(), Self::bytes());
        }
    }
}

/// A value of `T` made on first use, or known to be unavailable; released
/// when its thread ends (see `thread_exit`). It has no destructor of its
/// own, so that a thread-local holding one registers none with the C
/// library (which would allocate).
pub(crate) enum ThreadBox<T> {
    /// Not asked for yet.
    NotYet,
    /// Made, in a mapping of its own.
    Made(NonNull<T>),
    /// Could not be made; not asked for again.
    Unavailable,
}

impl<T> ThreadBox<T> {
    /// Not made yet.
    pub(crate) const fn new() -> ThreadBox<T> {
        ThreadBox::NotYet
    }

    /// The value, made by `make` on first use; `None` where its memory
    /// could not be had (then and ever after).
    #[inline]
    pub(crate) fn get_or_make_with(&mut self, make: impl FnOnce() -> T) -> Option<&mut T> {
        if let ThreadBox::NotYet = self {
            if thread_exit::released() {
                return None;
            }
            *self = Self::kept(MappedBox::new_with(make));
        }
        self.made()
    }

    /// The value, if it was made.
    #[inline]
    pub(crate) fn made(&mut self) -> Option<&mut T> {
        // Released with the thread's other objects, at its end.
        if thread_exit::released() {
            return None;
        }
        match self {
            // SAFETY: a valid T, reached only through this box, until the
            // thread ends.
            ThreadBox::Made(value) => Some(unsafe { value.as_mut() }),
            _ => None,
        }
    }

    /// Keeps `made` until the thread ends.
    #[cold]
    fn kept(made: Option<MappedBox<T>>) -> ThreadBox<T> {
        let Some(made) = made else {
            return ThreadBox::Unavailable;
        };
        let value = made.value;
        if !thread_exit::release_at_exit(value.as_ptr().cast(), release::<T>) {
            // Nothing would give it back: it goes now.
            drop(made);
            return ThreadBox::Unavailable;
        }
        std::mem::forget(made);
        ThreadBox::Made(value)
    }
}

/// Drops and unmaps a `T` kept by a [`ThreadBox`].
///
/// # Safety
/// `object` must be a `MappedBox<T>`'s value, released once.
unsafe fn release<T>(object: *mut u8) {
    drop(MappedBox {
        // SAFETY: as the caller promises (a box's value is never null);
        // the box takes the mapping back.
        value: unsafe { NonNull::new_unchecked(object.cast::<T>()) },
    });
}

impl<T: ZeroIsEmpty> ThreadBox<T> {
    /// The value, made zeroed on first use; `None` where its memory could
    /// not be had (then and ever after).
    #[inline]
    pub(crate) fn get_or_make(&mut self) -> Option<&mut T> {
        if let ThreadBox::NotYet = self {
            if thread_exit::released() {
                return None;
            }
            *self = Self::kept(MappedBox::zeroed());
        }
        self.made()
    }
}

impl<T> Default for ThreadBox<T> {
    fn default() -> ThreadBox<T> {
        ThreadBox::new()
    }
}

/// A zeroed `T` on the heap; `None` where the memory cannot be had (the
/// tests' way to make a table too large for their stacks).
#[cfg(test)]
#[cold]
#[inline(never)]
pub(crate) fn zeroed_box<T: ZeroIsEmpty>() -> Option<Box<T>> {
    const { assert!(std::mem::size_of::<T>() != 0, "a zero-sized table") };
    let layout = std::alloc::Layout::new::<T>();
    // SAFETY: the layout is T's and not zero-sized (asserted at compile
    // time); all-zero bytes are a valid T (ZeroIsEmpty), and the Box takes
    // the allocation over with T's layout.
    unsafe {
        let raw = std::alloc::alloc_zeroed(layout);
        (!raw.is_null()).then(|| Box::from_raw(raw.cast::<T>()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn a_box_is_made_zeroed_once_and_kept() {
        let mut cell: ThreadBox<AtomicU64> = ThreadBox::new();
        assert!(cell.made().is_none());
        let value = cell.get_or_make().unwrap();
        assert_eq!(value.load(Ordering::Relaxed), 0);
        value.store(7, Ordering::Relaxed);
        assert_eq!(cell.get_or_make().unwrap().load(Ordering::Relaxed), 7);
        assert_eq!(cell.made().unwrap().load(Ordering::Relaxed), 7);
        let mut gone: ThreadBox<AtomicU64> = ThreadBox::Unavailable;
        assert!(gone.get_or_make().is_none(), "not asked for again");
    }
}
