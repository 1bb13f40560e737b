//! Hooks where driver memory that is not an allocation appears: contexts
//! becoming current, context limits changing, modules and libraries loading,
//! and graph memory nodes being added. Each forwards the call unchanged and
//! measures around it (see [`device_readings`]). Every call that can change which
//! context is current clears the cached devices it may have made stale.

use crate::hooks::support::{read, real_or_fail};
use crate::record::device_readings::{self, Around};
use crate::record::devices::{self, current_device};
use crate::record::memory_limit::{self, Admission};
use crate::record::recorder::{self, Record};
use crate::system::cuda_ffi::*;
use crate::system::tracing_switch::guarded;
use cudatrace_events::{Api, Op};
use std::ffi::{c_char, c_int, c_uint, c_void};

// ---- Contexts -----------------------------------------------------------------

macro_rules! current_hooks {
    ($( $name:ident => $api:ident; )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`: a context seen for the first time is measured.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(ctx: CUcontext) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn(CUcontext) -> CUresult);
            // SAFETY: arguments forwarded unchanged.
            let result = unsafe { real(ctx) };
            devices::thread_context_changed();
            if result == CUDA_SUCCESS && !ctx.is_null() {
                guarded(|| device_readings::context_became_current(ctx as u64, Api::$api));
            }
            result
        }
    )*};
}

current_hooks! {
    cuCtxSetCurrent => CuCtxSetCurrent;
    cuCtxPushCurrent => CuCtxPushCurrent;
    cuCtxPushCurrent_v2 => CuCtxPushCurrentV2;
}

/// Under the memory limit, whether a context on `device` would not fit: a
/// real card of the limit's size refuses it with `CUDA_ERROR_OUT_OF_MEMORY`.
/// The refusal is recorded as one.
#[inline]
fn context_refused(api: Api, device: CUdevice) -> bool {
    if !memory_limit::enabled() {
        return false;
    }
    let Ok(device) = i8::try_from(device) else { return false };
    let mut refused = false;
    guarded(|| {
        refused = !memory_limit::context_fits(device, device_readings::has_context(device));
        if refused {
            let limit = memory_limit::limit().unwrap_or(0);
            recorder::refused_by_limit(api, cudatrace_events::Kind::Device, device, 0, 0, 0, limit);
        }
    });
    refused
}

macro_rules! create_hooks {
    ($( $name:ident => $api:ident ( $( $arg:ident : $ty:ty ),* ) on $device:ident; )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`: the new context is current, and measured.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(pctx: *mut CUcontext, $( $arg: $ty ),*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn(*mut CUcontext, $( $ty ),*) -> CUresult);
            if context_refused(Api::$api, $device) {
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            // SAFETY: arguments forwarded unchanged.
            let result = unsafe { real(pctx, $( $arg ),*) };
            devices::thread_context_changed();
            if result == CUDA_SUCCESS {
                guarded(|| device_readings::context_became_current(read(pctx, std::ptr::null_mut()) as u64, Api::$api));
            }
            result
        }
    )*};
}

create_hooks! {
    cuCtxCreate => CuCtxCreate(flags: c_uint, device: CUdevice) on device;
    cuCtxCreate_v2 => CuCtxCreateV2(flags: c_uint, device: CUdevice) on device;
    cuCtxCreate_v3 => CuCtxCreateV3(params: *mut c_void, count: c_int, flags: c_uint, device: CUdevice) on device;
    cuCtxCreate_v4 => CuCtxCreateV4(params: *mut c_void, flags: c_uint, device: CUdevice) on device;
}

/// Defines hooks that only forward, then clear the cached devices the call
/// may have made stale: `$changed` is the calling thread's or every thread's.
macro_rules! context_change_hooks {
    ($( $name:ident ( $( $arg:ident : $ty:ty ),* ) => $changed:path; )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`: cached devices may be stale after it.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($( $arg: $ty ),*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn($( $ty ),*) -> CUresult);
            // SAFETY: arguments forwarded unchanged.
            let result = unsafe { real($( $arg ),*) };
            $changed();
            result
        }
    )*};
}

context_change_hooks! {
    cuCtxPopCurrent(pctx: *mut CUcontext) => devices::thread_context_changed;
    cuCtxPopCurrent_v2(pctx: *mut CUcontext) => devices::thread_context_changed;
    cuCtxDestroy(ctx: CUcontext) => devices::process_contexts_changed;
    cuCtxDestroy_v2(ctx: CUcontext) => devices::process_contexts_changed;
    cuDevicePrimaryCtxRelease(device: CUdevice) => devices::process_contexts_changed;
    cuDevicePrimaryCtxRelease_v2(device: CUdevice) => devices::process_contexts_changed;
    cuDevicePrimaryCtxReset(device: CUdevice) => devices::process_contexts_changed;
    cuDevicePrimaryCtxReset_v2(device: CUdevice) => devices::process_contexts_changed;
}

/// Hook for `cuDevicePrimaryCtxRetain`: cached devices may be stale after
/// it, and under the memory limit a primary context that would not fit is
/// refused.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, device: CUdevice) -> CUresult {
    let real = real_or_fail!(
        cuDevicePrimaryCtxRetain,
        unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult
    );
    if context_refused(Api::CuDevicePrimaryCtxRetain, device) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(pctx, device) };
    devices::thread_context_changed();
    result
}

/// Hook for `cuCtxSetLimit`: records the new value, and what it cost.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetLimit(limit: CUlimit, value: usize) -> CUresult {
    let real = real_or_fail!(cuCtxSetLimit, unsafe extern "C" fn(CUlimit, usize) -> CUresult);
    let around = Around::start(Api::CuCtxSetLimit);
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(limit, value) };
    if let Some(around) = around.filter(|_| result == CUDA_SUCCESS) {
        let record = Record {
            address: limit as u64,
            size: value as u64,
            ..Record::new(Op::Limit, Api::CuCtxSetLimit)
        };
        around.finish(record, false);
    }
    result
}

// ---- Modules and libraries ------------------------------------------------------

/// Runs a load, reading the device's free memory before and after, and
/// records it with the handle `handle` reads (on success) and the caller's stack.
fn measured_load(api: Api, load: impl FnOnce() -> CUresult, handle: impl FnOnce() -> u64) -> CUresult {
    let around = Around::start(api);
    let result = load();
    if let Some(around) = around.filter(|_| result == CUDA_SUCCESS) {
        let record = Record {
            address: handle(),
            ..Record::new(Op::ModuleLoad, api)
        };
        around.finish(record, true);
    }
    result
}

macro_rules! load_hooks {
    ($( $name:ident => $api:ident, $handle:ident : $handle_ty:ty, ( $( $arg:ident : $ty:ty ),* ); )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`: measures what the load takes from the device.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($handle: *mut $handle_ty, $( $arg: $ty ),*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn(*mut $handle_ty, $( $ty ),*) -> CUresult);
            measured_load(
                Api::$api,
                // SAFETY: arguments forwarded unchanged.
                || unsafe { real($handle, $( $arg ),*) },
                || read($handle, std::ptr::null_mut()) as u64,
            )
        }
    )*};
}

load_hooks! {
    cuModuleLoad => CuModuleLoad, module: CUmodule, (fname: *const c_char);
    cuModuleLoadData => CuModuleLoadData, module: CUmodule, (image: *const c_void);
    cuModuleLoadDataEx => CuModuleLoadDataEx, module: CUmodule, (
        image: *const c_void, count: c_uint, options: *mut CUjit_option, values: *mut *mut c_void);
    cuModuleLoadFatBinary => CuModuleLoadFatBinary, module: CUmodule, (image: *const c_void);
    cuLibraryLoadData => CuLibraryLoadData, library: CUlibrary, (
        code: *const c_void, jit_options: *mut CUjit_option, jit_values: *mut *mut c_void, jit_count: c_uint,
        library_options: *mut CUlibraryOption, library_values: *mut *mut c_void, library_count: c_uint);
    cuLibraryLoadFromFile => CuLibraryLoadFromFile, library: CUlibrary, (
        file_name: *const c_char, jit_options: *mut CUjit_option, jit_values: *mut *mut c_void, jit_count: c_uint,
        library_options: *mut CUlibraryOption, library_values: *mut *mut c_void, library_count: c_uint);
}

// ---- Graph memory nodes ---------------------------------------------------------

fn graph_node_added(api: Api, graph: CUgraph, address: u64, bytes: u64) {
    guarded(|| {
        let record = Record {
            device: current_device().unwrap_or(-1),
            address,
            size: bytes,
            arg1: graph as u64,
            ..Record::new(Op::GraphNode, api)
        };
        recorder::write_measurement(record, true);
    });
}

/// Hook for `cuGraphAddMemAllocNode`: the address and size of the graph's allocation.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemAllocNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    dependencies: *const CUgraphNode,
    count: usize,
    params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CUresult {
    let real = real_or_fail!(
        cuGraphAddMemAllocNode,
        unsafe extern "C" fn(
            *mut CUgraphNode,
            CUgraph,
            *const CUgraphNode,
            usize,
            *mut CUDA_MEM_ALLOC_NODE_PARAMS,
        ) -> CUresult
    );
    if memory_limit::enabled() && !params.is_null() && graph_memory_refused(params) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(node, graph, dependencies, count, params) };
    if result == CUDA_SUCCESS && !params.is_null() {
        // SAFETY: the driver succeeded, so the parameters hold the node's address.
        let (address, bytes) = unsafe { ((*params).dptr, (*params).bytesize as u64) };
        graph_node_added(Api::CuGraphAddMemAllocNode, graph, address, bytes);
    }
    result
}

/// Under the memory limit, whether a graph allocation of `params` would
/// not fit on its device now. Its memory is not counted here: the graph's
/// memory is reserved when it is uploaded or launched, and the readings
/// count it from then on.
#[cold]
fn graph_memory_refused(params: *const CUDA_MEM_ALLOC_NODE_PARAMS) -> bool {
    let mut refused = false;
    guarded(|| {
        // SAFETY: the caller passed valid parameters (checked non-null).
        let (location, bytes) = unsafe { ((*params).poolProps.location, (*params).bytesize as u64) };
        let device = if location.type_ == CU_MEM_LOCATION_TYPE_DEVICE {
            i8::try_from(location.id).ok()
        } else {
            current_device()
        };
        let Some(device) = device else { return };
        match memory_limit::admit(device, bytes, device_readings::memory_info) {
            Admission::Counted(reservation) => memory_limit::settle(reservation, false, 0),
            Admission::Refused { left, limit } => {
                refused = true;
                recorder::refused_by_limit(
                    Api::CuGraphAddMemAllocNode,
                    cudatrace_events::Kind::GraphAllocation,
                    device,
                    bytes,
                    0,
                    left,
                    limit,
                );
            }
            Admission::NotCounted => {}
        }
    });
    refused
}

/// Hook for `cuGraphAddMemFreeNode`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemFreeNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    dependencies: *const CUgraphNode,
    count: usize,
    dptr: CUdeviceptr,
) -> CUresult {
    let real = real_or_fail!(
        cuGraphAddMemFreeNode,
        unsafe extern "C" fn(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize, CUdeviceptr) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(node, graph, dependencies, count, dptr) };
    if result == CUDA_SUCCESS {
        graph_node_added(Api::CuGraphAddMemFreeNode, graph, dptr, 0);
    }
    result
}
