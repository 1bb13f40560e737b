//! Hooks for the driver's entry points that give memory back, one per
//! versioned export, each with the export's exact C signature: the free is
//! sequenced before the real call (see `recorder::free_starting`) and
//! recorded after it succeeds; under the memory limit, the bytes freed are
//! given back to the process's share.
//!
//! Each hook calls the real function with the caller's arguments unchanged and
//! returns its result unchanged; the bookkeeping happens around the call.

use crate::hooks::support::{per_thread, prepare_driver_event, real_or_fail};
use crate::record::device_readings;
use crate::record::live_table::Namespace;
use crate::record::memory_limit;
use crate::record::recorder::{self, free_starting};
use crate::system::clock;
use crate::system::cuda_ffi::*;
use cudatrace_events::Api;
use std::ffi::c_void;

/// Defines hooks that give memory back: the free is sequenced before the
/// real call (see `recorder::free_starting`) and recorded after it succeeds.
macro_rules! free_hooks {
    ($(
        $(#[$doc:meta])*
        $name:ident => $api:ident, $namespace:ident,
            ( $( $arg:ident : $ty:ty ),* ), address: $address:expr, stream: $stream:expr;
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($( $arg: $ty ),*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn($( $ty ),*) -> CUresult);
            // Under the memory limit, a path of its own, out of line (see
            // the allocation hooks, in `driver`).
            #[inline(never)]
            unsafe fn limited(real: unsafe extern "C" fn($( $ty ),*) -> CUresult, $( $arg: $ty ),*) -> CUresult {
                prepare_driver_event(Some((Namespace::$namespace, $address)), $stream);
                memory_limit::prefetch();
                let pending = free_starting(Namespace::$namespace, $address);
                // SAFETY: arguments forwarded unchanged.
                let result = unsafe { real($( $arg ),*) };
                if let Some(freed) = recorder::free_returned(pending, result, Api::$api, $stream) {
                    if memory_limit::counts(freed.kind, freed.device) {
                        memory_limit::give_back(freed.device, freed.size);
                    }
                    if freed.device >= 0 {
                        device_readings::maybe_sample(Api::$api, clock::latest_record_ns());
                    }
                }
                result
            }
            if memory_limit::enabled() {
                // SAFETY: the caller's arguments, for the same function.
                return unsafe { limited(real, $( $arg ),*) };
            }
            prepare_driver_event(Some((Namespace::$namespace, $address)), $stream);
            let pending = free_starting(Namespace::$namespace, $address);
            // SAFETY: arguments forwarded unchanged.
            let result = unsafe { real($( $arg ),*) };
            if recorder::free_returned(pending, result, Api::$api, $stream).is_some_and(|freed| freed.device >= 0) {
                device_readings::maybe_sample(Api::$api, clock::latest_record_ns());
            }
            result
        }
    )*};
}

free_hooks! {
    /// Hook for the 32-bit `cuMemFree`.
    cuMemFree => CuMemFree, Device, (dptr: CUdeviceptr_v1), address: u64::from(dptr), stream: 0;
    /// Hook for `cuMemFree_v2`, which also frees stream-ordered allocations.
    cuMemFree_v2 => CuMemFreeV2, Device, (dptr: CUdeviceptr), address: dptr, stream: 0;
    /// Hook for `cuMemFreeAsync`.
    cuMemFreeAsync => CuMemFreeAsync, Device, (dptr: CUdeviceptr, stream: CUstream),
        address: dptr, stream: stream as u64;
    /// Hook for `cuMemFreeAsync_ptsz` (per-thread default stream).
    cuMemFreeAsync_ptsz => CuMemFreeAsyncPtsz, Device, (dptr: CUdeviceptr, stream: CUstream),
        address: dptr, stream: per_thread(stream);
    /// Hook for `cuMemRelease`. The physical memory is gone once the last
    /// mapping of the handle is removed too; readers of the trace work that out.
    cuMemRelease => CuMemRelease, VmmHandle, (handle: CUmemGenericAllocationHandle), address: handle, stream: 0;
    /// Hook for `cuArrayDestroy`.
    cuArrayDestroy => CuArrayDestroy, Array, (array: CUarray), address: array as u64, stream: 0;
    /// Hook for `cuMipmappedArrayDestroy`.
    cuMipmappedArrayDestroy => CuMipmappedArrayDestroy, Array, (array: CUmipmappedArray),
        address: array as u64, stream: 0;
    /// Hook for `cuMemFreeHost`.
    cuMemFreeHost => CuMemFreeHost, Host, (p: *mut c_void), address: p as u64, stream: 0;
    /// Hook for `cuMemHostUnregister`.
    cuMemHostUnregister => CuMemHostUnregister, Host, (p: *mut c_void), address: p as u64, stream: 0;
    /// Hook for `cuIpcCloseMemHandle`.
    cuIpcCloseMemHandle => CuIpcCloseMemHandle, IpcImport, (dptr: CUdeviceptr), address: dptr, stream: 0;
}
