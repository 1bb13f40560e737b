//! Hooks for the CUDA runtime's allocation entry points. They record nothing
//! themselves: they mark the thread as inside the runtime call, so that the
//! driver event the call causes carries the runtime name. That keeps exactly
//! one event per allocation whichever doors the call passed through, and
//! covers a statically linked runtime (which we cannot hook) just as well,
//! minus the name.

use crate::hooks::support::prepare_event;
use crate::record::devices;
use crate::record::recorder::RuntimeCall;
use crate::stacks::call_stack::only_callers;
use crate::stacks::return_slot::ReturnSlot;
use crate::system::cuda_ffi::*;
use crate::system::symbols::{real_fn, Sym};
use cudatrace_events::Api;
use std::ffi::{c_int, c_uint, c_void};

macro_rules! runtime_hooks {
    ($( $name:ident => $api:ident ( $( $arg:ident : $ty:ty ),* ); )*) => {
        $(
            #[doc = concat!("Hook for `", stringify!($name), "`: tags the driver call it makes.")]
            ///
            /// # Safety
            /// Same contract as the runtime's function.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($( $arg: $ty ),*) -> cudaError_t {
                // SAFETY: the signature is the runtime export's.
                let Some(real) = (unsafe { real_fn::<unsafe extern "C" fn($( $ty ),*) -> cudaError_t>(Sym::$name) }) else {
                    return cudaErrorInitializationError;
                };
                // Read here, in the hook's own frame: the slot is learnt for
                // this place in this function.
                static RETURN_SLOT: ReturnSlot = ReturnSlot::new();
                let caller = if only_callers() { RETURN_SLOT.caller() } else { 0 };
                let _inside = RuntimeCall::enter(Api::$api, caller);
                // The runtime's own work before its driver call overlaps the lines' way in.
                prepare_event(None, 0);
                // SAFETY: arguments forwarded unchanged.
                unsafe { real($( $arg ),*) }
            }
        )*
    };
}

runtime_hooks! {
    cudaMalloc => CudaMalloc(dev_ptr: *mut *mut c_void, size: usize);
    cudaFree => CudaFree(dev_ptr: *mut c_void);
    cudaMallocAsync => CudaMallocAsync(dev_ptr: *mut *mut c_void, size: usize, stream: cudaStream_t);
    cudaMallocAsync_ptsz => CudaMallocAsyncPtsz(dev_ptr: *mut *mut c_void, size: usize, stream: cudaStream_t);
    cudaFreeAsync => CudaFreeAsync(dev_ptr: *mut c_void, stream: cudaStream_t);
    cudaFreeAsync_ptsz => CudaFreeAsyncPtsz(dev_ptr: *mut c_void, stream: cudaStream_t);
    cudaMallocFromPoolAsync => CudaMallocFromPoolAsync(
        ptr: *mut *mut c_void, size: usize, pool: cudaMemPool_t, stream: cudaStream_t);
    cudaMallocFromPoolAsync_ptsz => CudaMallocFromPoolAsyncPtsz(
        ptr: *mut *mut c_void, size: usize, pool: cudaMemPool_t, stream: cudaStream_t);
    cudaMallocManaged => CudaMallocManaged(dev_ptr: *mut *mut c_void, size: usize, flags: c_uint);
    cudaMallocPitch => CudaMallocPitch(dev_ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize);
    cudaMalloc3D => CudaMalloc3D(pitched_dev_ptr: *mut cudaPitchedPtr, extent: cudaExtent);
    cudaMallocHost => CudaMallocHost(ptr: *mut *mut c_void, size: usize);
    cudaHostAlloc => CudaHostAlloc(host: *mut *mut c_void, size: usize, flags: c_uint);
    cudaFreeHost => CudaFreeHost(ptr: *mut c_void);
    cudaMallocArray => CudaMallocArray(
        array: *mut cudaArray_t, desc: *const cudaChannelFormatDesc, width: usize, height: usize, flags: c_uint);
    cudaMalloc3DArray => CudaMalloc3DArray(
        array: *mut cudaArray_t, desc: *const cudaChannelFormatDesc, extent: cudaExtent, flags: c_uint);
    cudaFreeArray => CudaFreeArray(array: cudaArray_t);
    cudaHostRegister => CudaHostRegister(ptr: *mut c_void, size: usize, flags: c_uint);
    cudaHostUnregister => CudaHostUnregister(ptr: *mut c_void);
    cudaIpcOpenMemHandle => CudaIpcOpenMemHandle(dev_ptr: *mut *mut c_void, handle: cudaIpcMemHandle_t, flags: c_uint);
    cudaIpcCloseMemHandle => CudaIpcCloseMemHandle(dev_ptr: *mut c_void);
    cudaGraphAddMemAllocNode => CudaGraphAddMemAllocNode(node: *mut cudaGraphNode_t, graph: cudaGraph_t,
        dependencies: *const cudaGraphNode_t, count: usize, params: *mut CUDA_MEM_ALLOC_NODE_PARAMS);
    cudaGraphAddMemFreeNode => CudaGraphAddMemFreeNode(node: *mut cudaGraphNode_t, graph: cudaGraph_t,
        dependencies: *const cudaGraphNode_t, count: usize, dptr: *mut c_void);
}

macro_rules! device_selection_hooks {
    ($( $name:ident ( $( $arg:ident : $ty:ty ),* ) => $changed:path; )*) => {
        $(
            #[doc = concat!("Hook for `", stringify!($name), "`: the thread's cached device is stale after it.")]
            ///
            /// # Safety
            /// Same contract as the runtime's function.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($( $arg: $ty ),*) -> cudaError_t {
                // SAFETY: the signature is the runtime export's.
                let Some(real) = (unsafe { real_fn::<unsafe extern "C" fn($( $ty ),*) -> cudaError_t>(Sym::$name) }) else {
                    return cudaErrorInitializationError;
                };
                // SAFETY: arguments forwarded unchanged.
                let result = unsafe { real($( $arg ),*) };
                $changed();
                result
            }
        )*
    };
}

device_selection_hooks! {
    cudaSetDevice(device: c_int) => devices::thread_context_changed;
    cudaInitDevice(device: c_int, device_flags: c_uint, flags: c_uint) => devices::thread_context_changed;
    cudaDeviceReset() => devices::process_contexts_changed;
}
