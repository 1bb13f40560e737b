//! Asking for a cache line before it is used.

/// Asks for the cache line that holds `address`, without waiting for it:
/// the load or store that follows finds it arrived, or on its way. A
/// prefetch never faults, whatever the address. Only x86-64 is asked; on
/// other machines this does nothing.
#[inline(always)]
pub(crate) fn prefetch_line<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing and never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}
