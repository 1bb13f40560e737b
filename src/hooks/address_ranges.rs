//! Hooks for the driver's virtual address space entry points: reserving and
//! freeing a range of addresses, and mapping physical memory into it and out
//! again. None of them allocates memory of its own: each is recorded as an
//! address range (see [`range_returned`]), and the trace's readers
//! tie the ranges to the physical memory (`cuMemCreate`) mapped into them.
//!
//! Each hook calls the real function with the caller's arguments unchanged and
//! returns its result unchanged; the bookkeeping happens around the call.

use crate::hooks::support::{read, real_or_fail};
use crate::record::recorder::{range_release_starting, range_returned, AddressRange};
use crate::record::tensors;
use crate::system::cuda_ffi::*;
use cudatrace_events::{Api, Op};

/// Defines the range hooks: `reserved` is taken before the real call (the
/// sequence number a release is recorded under, or `None`), `address` reads
/// the range's start after it (only used on success), and `on_success` runs
/// once the range is recorded, when the call succeeded.
macro_rules! range_hooks {
    ($(
        $(#[$doc:meta])*
        $name:ident ( $( $arg:ident : $ty:ty ),* ) => $op:ident, $api:ident,
            reserved: $reserved:expr, size: $size:expr, handle: $handle:expr, offset: $offset:expr,
            address: $address:expr $(, on_success: $on_success:expr)?;
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($( $arg: $ty ),*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn($( $ty ),*) -> CUresult);
            let reserved = $reserved;
            // SAFETY: arguments forwarded unchanged.
            let result = unsafe { real($( $arg ),*) };
            let range = AddressRange {
                op: Op::$op,
                api: Api::$api,
                size: $size,
                handle: $handle,
                offset: $offset,
            };
            range_returned(result, reserved, range, || $address);
            $(
                if result == CUDA_SUCCESS {
                    $on_success;
                }
            )?
            result
        }
    )*};
}

range_hooks! {
    /// Hook for `cuMemAddressReserve`: address space only, never counted as memory.
    cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: u64)
        => Reserve, CuMemAddressReserve,
        reserved: None, size: size as u64, handle: 0, offset: 0, address: read(ptr, 0);
    /// Hook for `cuMemAddressFree`.
    cuMemAddressFree(ptr: CUdeviceptr, size: usize) => Unreserve, CuMemAddressFree,
        reserved: range_release_starting(), size: size as u64, handle: 0, offset: 0, address: ptr;
    /// Hook for `cuMemMap`: a mapping, never an allocation of its own.
    cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: u64)
        => Map, CuMemMap,
        reserved: None, size: size as u64, handle: handle, offset: offset as u64, address: ptr,
        on_success: tensors::note_driver_memory(ptr, size as u64);
    /// Hook for `cuMemUnmap`, which may cover several mappings at once.
    cuMemUnmap(ptr: CUdeviceptr, size: usize) => Unmap, CuMemUnmap,
        reserved: range_release_starting(), size: size as u64, handle: 0, offset: 0, address: ptr;
}
