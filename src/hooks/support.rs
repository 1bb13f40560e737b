//! What every hook needs: its real function, and the out-parameters the
//! driver wrote.

/// The real driver function `$sym` with C signature `$ty`, or an early
/// `return CUDA_ERROR_NOT_INITIALIZED` from the hook when it cannot be found.
macro_rules! real_or_fail {
    ($sym:ident, $ty:ty) => {
        // SAFETY: `$ty` is the C signature of the export `$sym`.
        match unsafe { $crate::sys::symbols::real_fn::<$ty>($crate::sys::symbols::Sym::$sym) } {
            Some(real) => real,
            None => return $crate::sys::cuda_ffi::CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}
pub(crate) use real_or_fail;

/// Reads an out-parameter the driver has just written, tolerating NULL.
pub fn read<T: Copy>(ptr: *const T, or: T) -> T {
    if ptr.is_null() {
        or
    } else {
        // SAFETY: the driver succeeded, so a non-null out-parameter holds a value.
        unsafe { *ptr }
    }
}
