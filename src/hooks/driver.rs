//! Hooks for the driver's allocation entry points, one per versioned export,
//! each with the export's exact C signature. The driver is the source of
//! truth: every allocation, whichever door it came through, ends here.
//!
//! Each hook calls the real function with the caller's arguments unchanged and
//! returns its result unchanged; the bookkeeping happens around the call.

use crate::hooks::array_bytes::{array_bytes, mipmapped_array_bytes};
use crate::hooks::support::{per_thread, prepare_driver_event, read, real_or_fail};
use crate::hooks::{dlopen_door, torch_allocator};
use crate::record::live_table::Namespace;
use crate::record::memory_limit::{self, Admission};
use crate::record::recorder::{self, Allocation};
use crate::record::{capture_state, device_readings, devices, tensors};
use crate::spool::writer as spool_writer;
use crate::system::clock;
use crate::system::cuda_ffi::*;
use crate::system::tracing_switch::{guarded, keeping_errno, tracing_on};
use cudatrace_events::{Api, Kind};
use std::ffi::{c_uint, c_void};

/// Where an allocation's device comes from.
#[derive(Clone, Copy)]
enum DeviceOf {
    /// The calling thread's current context.
    Current,
    /// The stream's (stream-ordered calls).
    Stream,
    /// The pool's, if it was seen created; else the stream's.
    Pool,
    /// Known from the arguments (-1 for host memory).
    Known(i8),
}

/// The allocation call a hook is reporting on.
#[derive(Clone, Copy)]
struct Call {
    api: Api,
    kind: Kind,
    namespace: Namespace,
    device: DeviceOf,
    /// Stream of stream-ordered calls, else 0.
    stream: u64,
    /// Pitch for pitched memory, pool for pool allocations, else 0.
    arg1: u64,
}

impl Call {
    fn new(api: Api, kind: Kind, namespace: Namespace) -> Call {
        Call {
            api,
            kind,
            namespace,
            device: DeviceOf::Current,
            stream: 0,
            arg1: 0,
        }
    }

    /// The call's device, without a driver call once it is known.
    fn device(self) -> i8 {
        let device = match self.device {
            DeviceOf::Current => devices::current_device(),
            DeviceOf::Stream => devices::device_of_stream(self.stream),
            DeviceOf::Pool => devices::device_of_pool(self.arg1).or_else(|| devices::device_of_stream(self.stream)),
            DeviceOf::Known(device) => Some(device),
        };
        device.unwrap_or(-1)
    }
}

fn device_memory(api: Api, kind: Kind) -> Call {
    Call::new(api, kind, Namespace::Device)
}

/// What the memory limit says of `bytes` the call is about to allocate
/// (see [`memory_limit`]). Managed memory is never refused, since a real
/// card oversubscribes it too; host memory, imported memory and a capture's
/// allocations (the graph's memory, counted once it is reserved) are not
/// device memory of the process's own. Not marked cold: under a limit it
/// runs for every allocation, and cold code is laid out far from the hooks.
#[inline]
fn limit_admission(call: Call, bytes: u64) -> Admission {
    if !memory_limit::counts(call.kind, 0) || call.namespace == Namespace::Host {
        return Admission::NotCounted;
    }
    if !tracing_on() {
        return Admission::NotCounted;
    }
    if call.kind == Kind::Pool && capture_state::any_active() {
        let mut capturing = false;
        guarded(|| capturing = device_readings::stream_is_capturing(call.stream));
        if capturing {
            return Admission::NotCounted;
        }
    }
    // Nothing here may panic (sums on the program's `bytes` saturate). The
    // driver is called by a device not cached yet (here) and inside `admit`
    // (a device reading, a device's UUID, the ledger's slot): each of those
    // keeps the caller's errno itself.
    let device = keeping_errno(|| call.device());
    if device < 0 {
        return Admission::NotCounted;
    }
    let admission = memory_limit::admit(device, bytes, device_readings::memory_info);
    if let Admission::Refused { left, limit } = admission {
        guarded(|| recorder::refused_by_limit(call.api, call.kind, device, bytes, call.stream, left, limit));
    }
    admission
}

/// Whether the driver writes 0 to the call's pointer when it runs out of
/// memory. GPU run 111 compared each entry point's out-parameters after a
/// real out-of-memory error: `cuMemAlloc_v2`, `cuMemAllocAsync` and
/// `cuMemAllocPitch_v2` write 0 (and the pitch), `cuMemCreate` and
/// `cuArray3DCreate_v2` leave theirs as they were.
fn zeroes_its_pointer(api: Api) -> bool {
    matches!(
        api,
        Api::CuMemAlloc
            | Api::CuMemAllocV2
            | Api::CuMemAllocAsync
            | Api::CuMemAllocAsyncPtsz
            | Api::CuMemAllocFromPoolAsync
            | Api::CuMemAllocFromPoolAsyncPtsz
    )
}

/// Writes zero to a refused call's pointer, as the driver does when it runs
/// out of memory (see [`zeroes_its_pointer`]).
fn clear_out<T>(out: *mut T) {
    if !out.is_null() {
        // SAFETY: the program passed this out-parameter for the call to write.
        unsafe { std::ptr::write_bytes(out, 0, 1) };
    }
}

/// The admission of an allocation call about to be made: nothing at all
/// to do without a limit.
#[inline(always)]
fn admission_of(call: Call, bytes: u64) -> Admission {
    if memory_limit::enabled() {
        limit_admission(call, bytes)
    } else {
        Admission::NotCounted
    }
}

/// Reports an allocation call that returned `result`. `address` and `size`
/// read the out-parameters; they are only called on success. The readings
/// the event may trigger come after the recorder has returned. Inlined, so
/// that a hook without a memory limit (`Admission::NotCounted`) keeps none
/// of the limit's steps.
#[inline(always)]
fn allocation_returned(
    result: CUresult,
    call: Call,
    requested: u64,
    admission: Admission,
    address: impl FnOnce() -> u64,
    size: impl FnOnce() -> u64,
) {
    let reservation = match admission {
        Admission::Counted(reservation) => Some(reservation),
        _ => None,
    };
    if result != CUDA_SUCCESS {
        if let Some(reservation) = reservation {
            memory_limit::settle(reservation, false, 0);
        }
    }
    if result == CUDA_SUCCESS {
        // Whether the limit's reservation was settled: the bookkeeping below
        // may not run (tracing turned itself off), and a reservation left
        // unsettled would stay pending in the tree's ledger for good.
        let mut settled = reservation.is_none();
        guarded(|| {
            let device = call.device();
            let mut kind = call.kind;
            // Only while a capture is under way can an allocation be a graph's.
            if kind == Kind::Pool && capture_state::any_active() && device_readings::stream_is_capturing(call.stream) {
                kind = Kind::GraphAllocation;
            }
            let allocation = Allocation {
                api: call.api,
                kind,
                namespace: call.namespace,
                device,
                address: address(),
                size: size(),
                stream: call.stream,
                arg1: call.arg1,
            };
            let new = recorder::allocated(allocation);
            if let Some(reservation) = reservation {
                // Counted at its real size; one recorded already (a fault of
                // the program or of the driver) is not counted twice.
                memory_limit::settle(reservation, new, allocation.size);
                settled = true;
            }
            if !new {
                return;
            }
            if call.namespace == Namespace::Device {
                tensors::note_driver_memory(allocation.address, allocation.size);
            }
            // PyTorch's allocator is initialised by its first allocation.
            torch_allocator::after_allocation();
            if device < 0 || kind == Kind::GraphAllocation {
                return;
            }
            if kind == Kind::Pool {
                device_readings::note_pool(call.arg1, device);
            }
            // Readings are of the current context's device: only an
            // allocation on it can be the first event there.
            if matches!(call.device, DeviceOf::Current) {
                device_readings::note_device_in_use(device, call.api);
            }
            device_readings::maybe_sample(call.api, clock::latest_record_ns());
        });
        if !settled {
            if let Some(reservation) = reservation {
                memory_limit::settle_unrecorded(reservation);
            }
        }
    } else if result == CUDA_ERROR_OUT_OF_MEMORY {
        guarded(|| recorder::out_of_memory(call.api, call.kind, call.device(), requested, call.stream));
    }
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
            dlopen_door::catch_up();
            spool_writer::open_now();
        });
    }
    result
}

// ---- Allocations ------------------------------------------------------------

fn pool_allocation(api: Api, stream: u64, pool: CUmemoryPool) -> Call {
    let mut call = device_memory(api, Kind::Pool);
    call.device = if pool.is_null() {
        DeviceOf::Stream
    } else {
        DeviceOf::Pool
    };
    call.stream = stream;
    call.arg1 = pool as u64;
    call
}

/// `cuMemCreate`'s physical memory lives on `prop.location`: a device, or the host.
fn vmm_physical(prop: *const CUmemAllocationProp) -> Call {
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
    let mut call = Call::new(Api::CuMemCreate, Kind::VmmPhysical, Namespace::VmmHandle);
    call.device = DeviceOf::Known(device);
    call
}

fn array_allocation(api: Api) -> Call {
    Call::new(api, Kind::Array, Namespace::Array)
}

fn host_memory(api: Api) -> Call {
    let mut call = Call::new(api, Kind::HostPinned, Namespace::Host);
    call.device = DeviceOf::Known(-1);
    call
}

fn ipc_import(api: Api) -> Call {
    Call::new(api, Kind::IpcImport, Namespace::IpcImport)
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
/// `call` describes the allocation (built from the arguments before the real
/// call, whose stream lets the event's lines be asked for early; it reads no
/// out-parameter); after the real call, `bytes` gives its size (or
/// the size asked for, if the call ran out of memory) and `address` reads the
/// out-parameter the driver wrote (only on success).
macro_rules! alloc_hooks {
    ($(
        $(#[$doc:meta])*
        $name:ident ( $out:ident : $out_ty:ty $(, $arg:ident : $ty:ty )* ) => $call:expr, bytes: $bytes:expr, address: $address:expr;
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($out: $out_ty $(, $arg: $ty )*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn($out_ty $(, $ty )*) -> CUresult);
            // Under the memory limit, a path of its own, out of line:
            // without one, the hook is what it was, and pays one test. Not
            // marked cold: under a limit it is every call's path (GPU run
            // 116: +90 ns a call with it laid out with the cold code).
            #[inline(never)]
            unsafe fn limited(
                real: unsafe extern "C" fn($out_ty $(, $ty )*) -> CUresult,
                $out: $out_ty $(, $arg: $ty )*
            ) -> CUresult {
                let call = $call;
                prepare_driver_event(None, call.stream);
                memory_limit::prefetch();
                let bytes: u64 = $bytes;
                let admission = limit_admission(call, bytes);
                if let Admission::Refused { .. } = admission {
                    if zeroes_its_pointer(call.api) {
                        clear_out($out);
                    }
                    return CUDA_ERROR_OUT_OF_MEMORY;
                }
                // SAFETY: arguments forwarded unchanged.
                let result = unsafe { real($out $(, $arg )*) };
                allocation_returned(result, call, bytes, admission, || $address, || bytes);
                result
            }
            if memory_limit::enabled() {
                // SAFETY: the caller's arguments, for the same function.
                return unsafe { limited(real, $out $(, $arg )*) };
            }
            let call = $call;
            prepare_driver_event(None, call.stream);
            // SAFETY: arguments forwarded unchanged.
            let result = unsafe { real($out $(, $arg )*) };
            let bytes: u64 = $bytes;
            allocation_returned(result, call, bytes, Admission::NotCounted, || $address, || bytes);
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

/// What a pitched allocation takes before the driver has chosen the pitch:
/// rows padded to 512 bytes, the alignment current GPUs use. The real size
/// replaces it once known.
fn pitched_estimate(width: u64, height: u64) -> u64 {
    pitched_row(width).saturating_mul(height)
}

/// A row of `width` bytes padded to 512.
fn pitched_row(width: u64) -> u64 {
    width.div_ceil(512).saturating_mul(512)
}

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
    let requested = u64::from(width_in_bytes) * u64::from(height);
    let mut call = device_memory(Api::CuMemAllocPitch, Kind::Pitch);
    let admission = admission_of(call, pitched_estimate(u64::from(width_in_bytes), u64::from(height)));
    if let Admission::Refused { .. } = admission {
        // The driver writes the pitch it chose even when out of memory.
        clear_out(dptr);
        if !pitch.is_null() {
            // SAFETY: the program passed the pitch for the call to write.
            unsafe { *pitch = pitched_row(u64::from(width_in_bytes)) as _ };
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(dptr, pitch, width_in_bytes, height, element_size_bytes) };
    let pitch_bytes = if result == CUDA_SUCCESS {
        u64::from(read(pitch, 0))
    } else {
        0
    };
    call.arg1 = pitch_bytes;
    allocation_returned(
        result,
        call,
        requested,
        admission,
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
    let requested = (width_in_bytes as u64).saturating_mul(height as u64);
    let mut call = device_memory(Api::CuMemAllocPitchV2, Kind::Pitch);
    let admission = admission_of(call, pitched_estimate(width_in_bytes as u64, height as u64));
    if let Admission::Refused { .. } = admission {
        // The driver writes the pitch it chose even when out of memory.
        clear_out(dptr);
        if !pitch.is_null() {
            // SAFETY: the program passed the pitch for the call to write.
            unsafe { *pitch = pitched_row(width_in_bytes as u64) as _ };
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(dptr, pitch, width_in_bytes, height, element_size_bytes) };
    let pitch_bytes = if result == CUDA_SUCCESS {
        read(pitch, 0) as u64
    } else {
        0
    };
    call.arg1 = pitch_bytes;
    allocation_returned(
        result,
        call,
        requested,
        admission,
        || read(dptr, 0),
        || pitch_bytes.saturating_mul(height as u64),
    );
    result
}

// ---- Memory pools -----------------------------------------------------------

/// Hook for `cuMemPoolCreate`: the pool's device is its location's, and
/// allocations from it are on that device.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) -> CUresult {
    let real = real_or_fail!(
        cuMemPoolCreate,
        unsafe extern "C" fn(*mut CUmemoryPool, *const CUmemPoolProps) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(pool, props) };
    if result == CUDA_SUCCESS && !props.is_null() {
        guarded(|| {
            // SAFETY: the driver accepted the properties, so they are readable.
            let location = unsafe { (*props).location };
            if location.type_ == CU_MEM_LOCATION_TYPE_DEVICE {
                if let Ok(device) = i8::try_from(location.id) {
                    devices::pool_created(read(pool, std::ptr::null_mut()) as u64, device);
                }
            }
        });
    }
    result
}

/// Hook for `cuMemPoolDestroy`: a pool the readings sample is never asked
/// about once destroyed.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult {
    let real = real_or_fail!(cuMemPoolDestroy, unsafe extern "C" fn(CUmemoryPool) -> CUresult);
    guarded(|| {
        device_readings::forget_pool(pool as u64);
        devices::pool_destroyed(pool as u64);
    });
    // SAFETY: arguments forwarded unchanged.
    unsafe { real(pool) }
}
