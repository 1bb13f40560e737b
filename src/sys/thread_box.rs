//! A thread's own table on the heap, made zeroed on its first use.
//!
//! The stack capture keeps per-thread buffers and caches of tens to
//! hundreds of KiB. A preloaded library's thread-local storage is carved out
//! of every thread's stack, where that much would keep threads with small
//! stacks from starting, so they live on the heap, made by the thread's
//! first capture. Inside another program's process an allocation that fails
//! must not abort it: the table is then unavailable for the thread's life
//! (asked for once), and the capture does without it.

use crate::sys::lazy_mapping::ZeroIsEmpty;

/// A value of `T` made zeroed on first use, or known to be unavailable.
pub enum ThreadBox<T> {
    /// Not asked for yet.
    NotYet,
    /// Made.
    Made(Box<T>),
    /// Its memory could not be had.
    Unavailable,
}

impl<T: ZeroIsEmpty> ThreadBox<T> {
    /// A box not made yet (for a `const` thread-local initialiser).
    pub const fn new() -> ThreadBox<T> {
        ThreadBox::NotYet
    }

    /// The value, made zeroed on first use; `None` where its memory could
    /// not be had (then and ever after).
    #[inline]
    pub fn get_or_make(&mut self) -> Option<&mut T> {
        if let ThreadBox::NotYet = self {
            *self = match zeroed_box() {
                Some(value) => ThreadBox::Made(value),
                None => ThreadBox::Unavailable,
            };
        }
        self.made()
    }

    /// The value, if it was made.
    #[inline]
    pub fn made(&mut self) -> Option<&mut T> {
        match self {
            ThreadBox::Made(value) => Some(value),
            _ => None,
        }
    }
}

impl<T: ZeroIsEmpty> Default for ThreadBox<T> {
    fn default() -> ThreadBox<T> {
        ThreadBox::new()
    }
}

/// A zeroed `T` on the heap; `None` where the memory cannot be had.
#[cold]
#[inline(never)]
pub fn zeroed_box<T: ZeroIsEmpty>() -> Option<Box<T>> {
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
