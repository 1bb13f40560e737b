//! A `std::function` in libstdc++'s layout, built without C++: the shape
//! PyTorch's `attachAllocatorTraceTracker` takes.
//!
//! libstdc++ (GCC 4.9 and later, both string ABIs) lays out a
//! `std::function<R(Args...)>` as 32 bytes: 16 bytes of functor storage
//! (`_Any_data`), then the manager, then the invoker. Copying calls the
//! manager with "clone", destroying with "destroy"; calling goes to the
//! invoker with the storage and a pointer for each reference argument. Our
//! functor is stateless, so every copy is the same bytes and destroying one
//! frees nothing: a copy PyTorch keeps stays valid for as long as the
//! library is mapped (an `LD_PRELOAD` library never is unmapped), through
//! PyTorch's static destruction at exit.

use std::ffi::c_int;

/// `_Any_data`: the functor's storage.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct AnyData {
    words: [usize; 2],
}

/// `std::function`'s manager: `bool (_Any_data& dest, const _Any_data& src, _Manager_operation)`.
pub(crate) type Manager = unsafe extern "C" fn(*mut AnyData, *const AnyData, c_int) -> bool;

/// `std::function<void(const T&)>` as libstdc++ lays it out.
#[repr(C)]
pub(crate) struct StdFunction {
    functor: AnyData,
    manager: Option<Manager>,
    invoker: *const (),
}

/// `_Manager_operation` values.
const GET_TYPE_INFO: c_int = 0;
const GET_FUNCTOR_PTR: c_int = 1;
const CLONE_FUNCTOR: c_int = 2;

/// The manager of a stateless functor with no type information (as with
/// `-fno-rtti`): `target_type()` answers null, which libstdc++ allows.
unsafe extern "C" fn stateless_manager(dest: *mut AnyData, source: *const AnyData, operation: c_int) -> bool {
    match operation {
        // SAFETY: libstdc++ passes valid storage; type info and the
        // functor's address are written into its first word.
        GET_TYPE_INFO => unsafe { (*dest).words[0] = 0 },
        // SAFETY: as above.
        GET_FUNCTOR_PTR => unsafe { (*dest).words[0] = source as usize },
        // SAFETY: both point at 16 bytes of storage.
        CLONE_FUNCTOR => unsafe { *dest = *source },
        // Destroying a stateless functor frees nothing.
        _ => {}
    }
    false
}

impl StdFunction {
    /// A `std::function<void(const T&)>` that calls `invoker` with its
    /// storage and the argument's address.
    pub(crate) fn stateless<T>(invoker: unsafe extern "C" fn(*const AnyData, *const T)) -> StdFunction {
        StdFunction {
            functor: AnyData { words: [0; 2] },
            manager: Some(stateless_manager),
            invoker: invoker as *const (),
        }
    }

    /// Destroys the object, as a C++ caller does after a by-value call: the
    /// callee may have moved from it, which leaves its manager null.
    pub(crate) fn destroy(&mut self) {
        if let Some(manager) = self.manager.take() {
            let storage = &raw mut self.functor;
            // SAFETY: our manager, with our own storage; "destroy" is 3.
            unsafe { manager(storage, storage, 3) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static SEEN: AtomicU64 = AtomicU64::new(0);

    unsafe extern "C" fn add(_: *const AnyData, value: *const u64) {
        // SAFETY: the test passes a valid pointer.
        SEEN.fetch_add(unsafe { *value }, Ordering::Relaxed);
    }

    #[test]
    fn copies_made_as_libstdcxx_makes_them_call_the_same_invoker() {
        assert_eq!(std::mem::size_of::<StdFunction>(), 32);
        let mut original = StdFunction::stateless::<u64>(add);
        // A copy, as std::function's copy constructor makes it.
        let mut copy = StdFunction {
            functor: AnyData { words: [7, 7] },
            manager: None,
            invoker: std::ptr::null(),
        };
        let manager = original.manager.unwrap();
        // SAFETY: valid storage on both sides.
        assert!(!unsafe { manager(&raw mut copy.functor, &raw const original.functor, CLONE_FUNCTOR) });
        copy.manager = original.manager;
        copy.invoker = original.invoker;
        assert_eq!(copy.functor.words, [0, 0]);
        // SAFETY: the invoker's real type.
        let invoke: unsafe extern "C" fn(*const AnyData, *const u64) = unsafe { std::mem::transmute(copy.invoker) };
        // SAFETY: valid pointers.
        unsafe { invoke(&raw const copy.functor, &5) };
        assert_eq!(SEEN.load(Ordering::Relaxed), 5);
        let mut info = AnyData { words: [9, 9] };
        // SAFETY: valid storage.
        unsafe { manager(&raw mut info, &raw const copy.functor, GET_TYPE_INFO) };
        assert_eq!(info.words[0], 0);
        copy.destroy();
        original.destroy();
        assert!(copy.manager.is_none() && original.manager.is_none());
    }
}
