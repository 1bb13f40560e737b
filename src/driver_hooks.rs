//! Hooks for the driver's allocation entry points, one per versioned export,
//! each with the export's exact C signature. The driver is the source of
//! truth: every allocation, whichever door it came through, ends here.
//!
//! Each hook calls the real function with the caller's arguments unchanged and
//! returns its result unchanged; the bookkeeping happens around the call.

use crate::array_bytes::{array_bytes, mipmapped_array_bytes};
use crate::cuda_ffi::*;
use crate::hook_support::{read, real_or_fail};
use crate::live_table::Namespace;
use crate::process_state::guarded;
use crate::recorder::{
    allocation_returned, free_returned, free_starting, range_release_starting, range_returned, AddressRange,
    Allocation, DeviceOf,
};
use crate::spool_writer;
use cudatrace_events::{Api, Kind, Op};
use std::ffi::{c_uint, c_void};

fn per_thread(stream: CUstream) -> u64 {
    if stream.is_null() {
        CU_STREAM_PER_THREAD
    } else {
        stream as u64
    }
}

fn device_memory(api: Api, kind: Kind) -> Allocation {
    Allocation::new(api, kind, Namespace::Device)
}

// ---- Initialisation ---------------------------------------------------------

/// Hook for `cuInit`: a process that initialises CUDA gets its spool, and
/// with it a place in the trace, even if it never allocates.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    let real = real_or_fail!(cuInit, unsafe extern "C" fn(c_uint) -> CUresult);
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(flags) };
    if result == CUDA_SUCCESS {
        guarded(|| {
            crate::dlopen_door::catch_up();
            spool_writer::open_now();
        });
    }
    result
}

// ---- Allocations ------------------------------------------------------------

fn pool_allocation(api: Api, stream: u64, pool: CUmemoryPool) -> Allocation {
    let mut call = device_memory(api, Kind::Pool);
    call.stream = stream;
    call.arg1 = pool as u64;
    call
}

/// `cuMemCreate`'s physical memory lives on `prop.location`: a device, or the host.
fn vmm_physical(prop: *const CUmemAllocationProp) -> Allocation {
    let location = if prop.is_null() {
        None
    } else {
        // SAFETY: the caller passed a valid property struct.
        Some(unsafe { (*prop).location })
    };
    let device = match location {
        Some(location) if location.type_ == CU_MEM_LOCATION_TYPE_DEVICE => i8::try_from(location.id).unwrap_or(-1),
        _ => -1,
    };
    let mut call = Allocation::new(Api::CuMemCreate, Kind::VmmPhysical, Namespace::VmmHandle);
    call.device = DeviceOf::Known(device);
    call
}

fn array_allocation(api: Api) -> Allocation {
    Allocation::new(api, Kind::Array, Namespace::Array)
}

fn host_memory(api: Api) -> Allocation {
    let mut call = Allocation::new(api, Kind::HostPinned, Namespace::Host);
    call.device = DeviceOf::Known(-1);
    call
}

fn ipc_import(api: Api) -> Allocation {
    Allocation::new(api, Kind::IpcImport, Namespace::IpcImport)
}

/// The bytes of the array a descriptor describes; 0 for a NULL descriptor.
fn described<D: Copy>(desc: *const D, bytes: impl FnOnce(D) -> u64) -> u64 {
    if desc.is_null() {
        0
    } else {
        // SAFETY: the caller passed a valid descriptor.
        bytes(unsafe { *desc })
    }
}

/// Defines hooks that create memory whose size is known from the arguments:
/// after the real call, `call` describes the allocation, `bytes` its size (or
/// the size asked for, if the call ran out of memory) and `address` reads the
/// out-parameter the driver wrote (only on success).
macro_rules! alloc_hooks {
    ($(
        $(#[$doc:meta])*
        $name:ident ( $( $arg:ident : $ty:ty ),* ) => $call:expr, bytes: $bytes:expr, address: $address:expr;
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($( $arg: $ty ),*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn($( $ty ),*) -> CUresult);
            // SAFETY: arguments forwarded unchanged.
            let result = unsafe { real($( $arg ),*) };
            let bytes: u64 = $bytes;
            allocation_returned(result, $call, bytes, || $address, || bytes);
            result
        }
    )*};
}

alloc_hooks! {
    /// Hook for the 32-bit `cuMemAlloc` of the pre-3.2 ABI.
    cuMemAlloc(dptr: *mut CUdeviceptr_v1, bytesize: c_uint) => device_memory(Api::CuMemAlloc, Kind::Device),
        bytes: u64::from(bytesize), address: u64::from(read(dptr, 0));
    /// Hook for `cuMemAlloc_v2`.
    cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) => device_memory(Api::CuMemAllocV2, Kind::Device),
        bytes: bytesize as u64, address: read(dptr, 0);
    /// Hook for `cuMemAllocManaged`.
    cuMemAllocManaged(dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint)
        => device_memory(Api::CuMemAllocManaged, Kind::Managed), bytes: bytesize as u64, address: read(dptr, 0);
    /// Hook for `cuMemAllocAsync`.
    cuMemAllocAsync(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream)
        => pool_allocation(Api::CuMemAllocAsync, stream as u64, std::ptr::null_mut()),
        bytes: bytesize as u64, address: read(dptr, 0);
    /// Hook for `cuMemAllocAsync_ptsz` (per-thread default stream).
    cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream)
        => pool_allocation(Api::CuMemAllocAsyncPtsz, per_thread(stream), std::ptr::null_mut()),
        bytes: bytesize as u64, address: read(dptr, 0);
    /// Hook for `cuMemAllocFromPoolAsync`.
    cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream)
        => pool_allocation(Api::CuMemAllocFromPoolAsync, stream as u64, pool),
        bytes: bytesize as u64, address: read(dptr, 0);
    /// Hook for `cuMemAllocFromPoolAsync_ptsz`.
    cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream)
        => pool_allocation(Api::CuMemAllocFromPoolAsyncPtsz, per_thread(stream), pool),
        bytes: bytesize as u64, address: read(dptr, 0);
    /// Hook for `cuMemCreate`: physical memory on `prop.location`, recorded under its handle.
    cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64)
        => vmm_physical(prop), bytes: size as u64, address: read(handle, 0);
    /// Hook for `cuArrayCreate` (the 32-bit descriptor).
    cuArrayCreate(handle: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR_v1) => array_allocation(Api::CuArrayCreate),
        bytes: described(desc, |d| array_bytes(d.Width.into(), d.Height.into(), 0, d.Format, d.NumChannels)),
        address: read(handle, std::ptr::null_mut()) as u64;
    /// Hook for `cuArrayCreate_v2`.
    cuArrayCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) => array_allocation(Api::CuArrayCreateV2),
        bytes: described(desc, |d| array_bytes(d.Width as u64, d.Height as u64, 0, d.Format, d.NumChannels)),
        address: read(handle, std::ptr::null_mut()) as u64;
    /// Hook for `cuArray3DCreate` (the 32-bit descriptor).
    cuArray3DCreate(handle: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR_v1)
        => array_allocation(Api::CuArray3DCreate),
        bytes: described(desc, |d| array_bytes(d.Width.into(), d.Height.into(), d.Depth.into(), d.Format, d.NumChannels)),
        address: read(handle, std::ptr::null_mut()) as u64;
    /// Hook for `cuArray3DCreate_v2`.
    cuArray3DCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR)
        => array_allocation(Api::CuArray3DCreateV2),
        bytes: described(desc, |d| array_bytes(d.Width as u64, d.Height as u64, d.Depth as u64, d.Format, d.NumChannels)),
        address: read(handle, std::ptr::null_mut()) as u64;
    /// Hook for `cuMipmappedArrayCreate`.
    cuMipmappedArrayCreate(handle: *mut CUmipmappedArray, desc: *const CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint)
        => array_allocation(Api::CuMipmappedArrayCreate),
        bytes: described(desc, |d| {
            mipmapped_array_bytes(d.Width as u64, d.Height as u64, d.Depth as u64, d.Format, d.NumChannels, levels)
        }),
        address: read(handle, std::ptr::null_mut()) as u64;
    /// Hook for `cuMemHostAlloc`.
    cuMemHostAlloc(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) => host_memory(Api::CuMemHostAlloc),
        bytes: bytesize as u64, address: read(pp, std::ptr::null_mut()) as u64;
    /// Hook for the 32-bit-size `cuMemAllocHost`.
    cuMemAllocHost(pp: *mut *mut c_void, bytesize: c_uint) => host_memory(Api::CuMemAllocHost),
        bytes: u64::from(bytesize), address: read(pp, std::ptr::null_mut()) as u64;
    /// Hook for `cuMemAllocHost_v2`.
    cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) => host_memory(Api::CuMemAllocHostV2),
        bytes: bytesize as u64, address: read(pp, std::ptr::null_mut()) as u64;
    /// Hook for `cuMemHostRegister`.
    cuMemHostRegister(p: *mut c_void, bytesize: usize, flags: c_uint) => host_memory(Api::CuMemHostRegister),
        bytes: bytesize as u64, address: p as u64;
    /// Hook for `cuMemHostRegister_v2`.
    cuMemHostRegister_v2(p: *mut c_void, bytesize: usize, flags: c_uint) => host_memory(Api::CuMemHostRegisterV2),
        bytes: bytesize as u64, address: p as u64;
    /// Hook for `cuIpcOpenMemHandle`. The size of imported memory is not known
    /// without a further driver call, so it is recorded as 0.
    cuIpcOpenMemHandle(pdptr: *mut CUdeviceptr, handle: CUipcMemHandle, flags: c_uint)
        => ipc_import(Api::CuIpcOpenMemHandle), bytes: 0, address: read(pdptr, 0);
    /// Hook for `cuIpcOpenMemHandle_v2`.
    cuIpcOpenMemHandle_v2(pdptr: *mut CUdeviceptr, handle: CUipcMemHandle, flags: c_uint)
        => ipc_import(Api::CuIpcOpenMemHandleV2), bytes: 0, address: read(pdptr, 0);
}

// ---- Pitched memory: the size is known only from the pitch the driver chose --------

/// Hook for the 32-bit `cuMemAllocPitch`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch(
    dptr: *mut CUdeviceptr_v1,
    pitch: *mut c_uint,
    width_in_bytes: c_uint,
    height: c_uint,
    element_size_bytes: c_uint,
) -> CUresult {
    let real = real_or_fail!(
        cuMemAllocPitch,
        unsafe extern "C" fn(*mut CUdeviceptr_v1, *mut c_uint, c_uint, c_uint, c_uint) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(dptr, pitch, width_in_bytes, height, element_size_bytes) };
    let pitch_bytes = if result == CUDA_SUCCESS {
        u64::from(read(pitch, 0))
    } else {
        0
    };
    let mut call = device_memory(Api::CuMemAllocPitch, Kind::Pitch);
    call.arg1 = pitch_bytes;
    let requested = u64::from(width_in_bytes) * u64::from(height);
    allocation_returned(
        result,
        call,
        requested,
        || u64::from(read(dptr, 0)),
        || pitch_bytes * u64::from(height),
    );
    result
}

/// Hook for `cuMemAllocPitch_v2`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width_in_bytes: usize,
    height: usize,
    element_size_bytes: c_uint,
) -> CUresult {
    let real = real_or_fail!(
        cuMemAllocPitch_v2,
        unsafe extern "C" fn(*mut CUdeviceptr, *mut usize, usize, usize, c_uint) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(dptr, pitch, width_in_bytes, height, element_size_bytes) };
    let pitch_bytes = if result == CUDA_SUCCESS {
        read(pitch, 0) as u64
    } else {
        0
    };
    let mut call = device_memory(Api::CuMemAllocPitchV2, Kind::Pitch);
    call.arg1 = pitch_bytes;
    let requested = (width_in_bytes as u64).saturating_mul(height as u64);
    allocation_returned(
        result,
        call,
        requested,
        || read(dptr, 0),
        || pitch_bytes.saturating_mul(height as u64),
    );
    result
}

// ---- Virtual address space ------------------------------------------------

/// Hook for `cuMemAddressReserve`: address space only, never counted as memory.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    let real = real_or_fail!(
        cuMemAddressReserve,
        unsafe extern "C" fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(ptr, size, alignment, addr, flags) };
    let range = AddressRange {
        op: Op::Reserve,
        api: Api::CuMemAddressReserve,
        size: size as u64,
        handle: 0,
        offset: 0,
    };
    range_returned(result, None, range, || read(ptr, 0));
    result
}

/// Hook for `cuMemAddressFree`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    let real = real_or_fail!(cuMemAddressFree, unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult);
    let reserved = range_release_starting();
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(ptr, size) };
    let range = AddressRange {
        op: Op::Unreserve,
        api: Api::CuMemAddressFree,
        size: size as u64,
        handle: 0,
        offset: 0,
    };
    range_returned(result, reserved, range, || ptr);
    result
}

/// Hook for `cuMemMap`: a mapping, never an allocation of its own.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    let real = real_or_fail!(
        cuMemMap,
        unsafe extern "C" fn(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, u64) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(ptr, size, offset, handle, flags) };
    let range = AddressRange {
        op: Op::Map,
        api: Api::CuMemMap,
        size: size as u64,
        handle,
        offset: offset as u64,
    };
    range_returned(result, None, range, || ptr);
    result
}

/// Hook for `cuMemUnmap`, which may cover several mappings at once.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    let real = real_or_fail!(cuMemUnmap, unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult);
    let reserved = range_release_starting();
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(ptr, size) };
    let range = AddressRange {
        op: Op::Unmap,
        api: Api::CuMemUnmap,
        size: size as u64,
        handle: 0,
        offset: 0,
    };
    range_returned(result, reserved, range, || ptr);
    result
}

// ---- Frees ------------------------------------------------------------------

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
            let pending = free_starting(Namespace::$namespace, $address);
            // SAFETY: arguments forwarded unchanged.
            let result = unsafe { real($( $arg ),*) };
            free_returned(pending, result, Api::$api, $stream);
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

/// Hook for `cuMemPoolDestroy`: a pool the readings sample is never asked
/// about once destroyed.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult {
    let real = real_or_fail!(cuMemPoolDestroy, unsafe extern "C" fn(CUmemoryPool) -> CUresult);
    guarded(|| crate::device_probe::forget_pool(pool as u64));
    // SAFETY: arguments forwarded unchanged.
    unsafe { real(pool) }
}
