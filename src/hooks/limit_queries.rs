//! Hooks for the queries of the device's memory, `cuMemGetInfo` and
//! `cuDeviceTotalMem` in their 32-bit and `_v2` forms. Under the memory
//! limit (`cudatrace run --limit`) they answer for a card of the limit's
//! size; the runtime's `cudaMemGetInfo` and `cudaGetDeviceProperties`
//! (`totalGlobalMem`) reach the driver through them. Without a limit the
//! doors (`dlsym`, `cuGetProcAddress`) hand out the real functions, and a
//! program linked to these exports only pays a forward.

use crate::hooks::support::real_or_fail;
use crate::record::devices::current_device;
use crate::record::memory_limit;
use crate::system::cuda_ffi::*;
use crate::system::tracing_switch::keeping_errno;
use std::ffi::c_uint;

/// The limit's answer to a successful `cuMemGetInfo` on the calling
/// thread's device: (free, total).
fn limited_memory_info(free: u64, total: u64) -> (u64, u64) {
    keeping_errno(|| {
        let device = current_device().unwrap_or(-1);
        memory_limit::reported_memory_info(device, free, total)
    })
}

/// Hook for `cuMemGetInfo_v2`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    let real = real_or_fail!(
        cuMemGetInfo_v2,
        unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(free, total) };
    if result == CUDA_SUCCESS && memory_limit::enabled() && !free.is_null() && !total.is_null() {
        // SAFETY: the driver succeeded, so both out-parameters hold values.
        let (f, t) = limited_memory_info(unsafe { *free } as u64, unsafe { *total } as u64);
        // SAFETY: as above; both are writable.
        unsafe { (*free, *total) = (f as usize, t as usize) };
    }
    result
}

/// Hook for the 32-bit `cuMemGetInfo`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CUresult {
    let real = real_or_fail!(cuMemGetInfo, unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> CUresult);
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(free, total) };
    if result == CUDA_SUCCESS && memory_limit::enabled() && !free.is_null() && !total.is_null() {
        // SAFETY: the driver succeeded, so both out-parameters hold values.
        let (f, t) = limited_memory_info(u64::from(unsafe { *free }), u64::from(unsafe { *total }));
        // Both are at most what the driver wrote, so they fit its 32 bits.
        // SAFETY: as above; both are writable.
        unsafe { (*free, *total) = (f as c_uint, t as c_uint) };
    }
    result
}

/// Hook for `cuDeviceTotalMem_v2`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CUdevice) -> CUresult {
    let real = real_or_fail!(
        cuDeviceTotalMem_v2,
        unsafe extern "C" fn(*mut usize, CUdevice) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(bytes, device) };
    if result == CUDA_SUCCESS && memory_limit::enabled() && !bytes.is_null() {
        // SAFETY: the driver succeeded and wrote the total there.
        unsafe { *bytes = memory_limit::reported_total(*bytes as u64) as usize };
    }
    result
}

/// Hook for the 32-bit `cuDeviceTotalMem`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, device: CUdevice) -> CUresult {
    let real = real_or_fail!(
        cuDeviceTotalMem,
        unsafe extern "C" fn(*mut c_uint, CUdevice) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(bytes, device) };
    if result == CUDA_SUCCESS && memory_limit::enabled() && !bytes.is_null() {
        // SAFETY: the driver succeeded and wrote the total there.
        unsafe { *bytes = memory_limit::reported_total(u64::from(*bytes)) as c_uint };
    }
    result
}
