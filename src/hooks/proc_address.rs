//! The `cuGetProcAddress` door. Since CUDA 11.3 the runtime gets every driver
//! entry point through it (base name + version + a flag that selects the
//! per-thread-default-stream twins), and PyTorch gets its VMM entry points
//! this way. We let the driver answer, recognise the exact export it returned
//! and substitute our hook for that export, which has the same ABI.

use crate::hooks::{dlopen_door, table};
use crate::system::cuda_ffi::*;
use crate::system::symbols::{self, real_fn, CudaLibrary, Sym};
use crate::system::tracing_switch::guarded;
use std::ffi::{c_char, c_int, c_void};

/// `RTLD_DL_LINKMAP` from `<dlfcn.h>`: make `dladdr1` return the link map.
const RTLD_DL_LINKMAP: libc::c_int = 2;

type GetProcAddressV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, cuuint64_t) -> CUresult;
type GetProcAddressV2 = unsafe extern "C" fn(
    *const c_char,
    *mut *mut c_void,
    c_int,
    cuuint64_t,
    *mut CUdriverProcAddressQueryResult,
) -> CUresult;

/// Replaces a driver export the caller was handed with our hook for it.
/// Pointers we do not recognise are left untouched.
fn substitute(real_entry: usize, pfn: *mut *mut c_void) {
    guarded(|| {
        if pfn.is_null() {
            return;
        }
        if !symbols::driver_handle_known() {
            // The driver that answered is the one whose exports we compare against.
            let mut info = std::mem::MaybeUninit::<libc::Dl_info>::uninit();
            let mut map: *mut c_void = std::ptr::null_mut();
            // SAFETY: dladdr1 writes the link map of the object containing the address.
            let found = unsafe {
                libc::dladdr1(
                    real_entry as *const c_void,
                    info.as_mut_ptr(),
                    (&raw mut map).cast(),
                    RTLD_DL_LINKMAP,
                )
            };
            if found != 0 && !map.is_null() {
                // SAFETY: dladdr1 gave us the driver's link map.
                unsafe { symbols::remember_handle(CudaLibrary::Driver, map) };
            }
        }
        // SAFETY: the driver just wrote a function pointer (or NULL) there.
        let handed_out = unsafe { *pfn } as usize;
        if handed_out == 0 {
            return;
        }
        if let Some(hook) = table::hook_for_real_driver_address(handed_out) {
            // SAFETY: as above; the hook has the ABI of the export it replaces.
            unsafe { *pfn = hook as *mut c_void };
        }
    });
}

/// Hook for `cuGetProcAddress` (the CUDA 11.3 four-argument ABI).
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: cuuint64_t,
) -> CUresult {
    // SAFETY: the signature above is the export's.
    let Some(real) = (unsafe { real_fn::<GetProcAddressV1>(Sym::cuGetProcAddress) }) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding the caller's arguments unchanged.
    let result = unsafe { real(symbol, pfn, cuda_version, flags) };
    if result == CUDA_SUCCESS {
        substitute(real as usize, pfn);
        guarded(dlopen_door::catch_up);
    }
    result
}

/// Hook for `cuGetProcAddress_v2` (CUDA 12+, with the query-result out-parameter).
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: cuuint64_t,
    symbol_status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    // SAFETY: the signature above is the export's.
    let Some(real) = (unsafe { real_fn::<GetProcAddressV2>(Sym::cuGetProcAddress_v2) }) else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: forwarding the caller's arguments unchanged.
    let result = unsafe { real(symbol, pfn, cuda_version, flags, symbol_status) };
    if result == CUDA_SUCCESS {
        substitute(real as usize, pfn);
        guarded(dlopen_door::catch_up);
    }
    result
}
