//! A table of atomics in an anonymous mapping made on first use: the
//! lock-free tables of the hooks (live allocations, stack nodes, dropped
//! records) are too large to be static, and most processes never touch most
//! of their pages. The mapping is reserved without swap, so only the pages
//! written cost memory.

use crate::system::address_budget;
use crate::system::prefetch::prefetch_line;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// A type whose all-zero bytes are a valid, empty value (atomics and
/// structs of atomics), so that a fresh anonymous mapping is a table of them.
///
/// # Safety
/// Zeroed memory must be a valid value of the type.
pub(crate) unsafe trait ZeroIsEmpty {}

// SAFETY: an atomic integer's zero bytes are the value 0.
unsafe impl ZeroIsEmpty for std::sync::atomic::AtomicU64 {}

/// `len` values of `T`, mapped on first use and never freed but by
/// [`LazyMapping::forget`] in a forked child.
pub(crate) struct LazyMapping<T: ZeroIsEmpty> {
    base: AtomicPtr<T>,
    len: u32,
    /// The length under an address-space limit (see `address_budget`).
    lean_len: u32,
    /// The length of the mapping made (0 until made): stored before `base`
    /// is published.
    mapped_len: AtomicU32,
    _values: PhantomData<T>,
}

impl<T: ZeroIsEmpty> LazyMapping<T> {
    /// A table of `len` values, not mapped yet.
    pub(crate) const fn new(len: usize) -> LazyMapping<T> {
        LazyMapping::with_lean_len(len, len)
    }

    /// A table of `len` values, or of `lean_len` in a process with a limit
    /// on its address space; both powers of two where the caller masks
    /// indices with the length. Users take the length from the table.
    pub(crate) const fn with_lean_len(len: usize, lean_len: usize) -> LazyMapping<T> {
        assert!(
            len <= u32::MAX as usize && lean_len <= len,
            "a table's length fits 32 bits"
        );
        LazyMapping {
            base: AtomicPtr::new(std::ptr::null_mut()),
            len: len as u32,
            lean_len: lean_len as u32,
            mapped_len: AtomicU32::new(0),
            _values: PhantomData,
        }
    }

    fn bytes(len: usize) -> usize {
        len * std::mem::size_of::<T>()
    }

    /// The table, mapping it if this is the first use; `None` when no
    /// memory can be mapped.
    #[inline]
    pub(crate) fn get(&self) -> Option<&'static [T]> {
        let mut base = self.base.load(Ordering::Acquire);
        if base.is_null() {
            base = self.map()?;
        }
        // SAFETY: the mapping holds `mapped_len` values (stored before the
        // base was published) and lives until `forget`, which only a forked
        // child calls, before any other thread exists.
        Some(unsafe { std::slice::from_raw_parts(base, self.mapped_len.load(Ordering::Relaxed) as usize) })
    }

    /// The table if it was mapped already, without mapping it.
    #[inline]
    pub(crate) fn get_if_mapped(&self) -> Option<&'static [T]> {
        let base = self.base.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        (!base.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(base, self.mapped_len.load(Ordering::Relaxed) as usize) })
    }

    /// Asks for the cache line of value `index` (modulo the table's length,
    /// a power of two), if the table is mapped; never maps it.
    #[inline(always)]
    pub(crate) fn prefetch(&self, index: usize) {
        let base = self.base.load(Ordering::Relaxed);
        if !base.is_null() {
            // A length not seen yet reads 0: the address is then wild, and a
            // prefetch never faults.
            let mask = (self.mapped_len.load(Ordering::Relaxed) as usize).wrapping_sub(1);
            prefetch_line(base.wrapping_add(index & mask));
        }
    }

    #[cold]
    fn map(&self) -> Option<*mut T> {
        let len = if address_budget::lean() {
            self.lean_len
        } else {
            self.len
        } as usize;
        // SAFETY: a fresh private anonymous mapping; zeroed pages are empty
        // values of `T` (ZeroIsEmpty).
        let fresh = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::bytes(len),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if fresh == libc::MAP_FAILED {
            return None;
        }
        let fresh = fresh.cast::<T>();
        // Every thread that maps it chooses the same length.
        self.mapped_len.store(len as u32, Ordering::Relaxed);
        match self
            .base
            .compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Some(fresh),
            Err(winner) => {
                // SAFETY: our own mapping, never published.
                unsafe { libc::munmap(fresh.cast(), Self::bytes(len)) };
                Some(winner)
            }
        }
    }

    /// In a forked child: the table is the parent's copy; unmap it, so that
    /// the next use starts an empty one.
    pub(crate) fn forget(&self) {
        let old = self.base.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: the child's private copy, which nothing uses any more.
            unsafe {
                libc::munmap(
                    old.cast(),
                    Self::bytes(self.mapped_len.load(Ordering::Relaxed) as usize),
                )
            };
        }
    }
}
