//! The slice of the CUDA driver and runtime ABI that the hooks need, written by
//! hand from `cuda.h`, `cuda_runtime_api.h` and `driver_types.h` (CUDA 12 and 13).
//!
//! Every enum is a plain integer: the driver may return values a newer header
//! added, and a Rust enum holding an unknown discriminant is undefined behaviour.
//!
//! Names, fields and values are the headers' own, documented there: only
//! what they mean to the hooks is said here.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `CUresult`.
pub type CUresult = c_int;
pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`: the capture ended, invalidated.
pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;

/// `cudaError_t`.
pub type cudaError_t = c_int;
pub const cudaErrorInitializationError: cudaError_t = 3;

pub type CUdeviceptr = u64;
/// The 32-bit device pointer of the pre-3.2 ABI (`cuMemAlloc` without `_v2`).
pub type CUdeviceptr_v1 = c_uint;
pub type CUdevice = c_int;
pub type CUstream = *mut c_void;
pub type CUmemoryPool = *mut c_void;
pub type CUarray = *mut c_void;
pub type CUmipmappedArray = *mut c_void;
pub type CUmemGenericAllocationHandle = u64;
pub type cuuint64_t = u64;
pub type CUcontext = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUlibrary = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUgraph = *mut c_void;
pub type CUgraphNode = *mut c_void;
/// `CUgraphExec`: an executable graph.
pub type CUgraphExec = *mut c_void;
/// `CUevent`.
pub type CUevent = *mut c_void;
/// `CUlimit` (an enum).
pub type CUlimit = c_int;
/// `CUjit_option` (an enum).
pub type CUjit_option = c_int;
/// `CUlibraryOption` (an enum).
pub type CUlibraryOption = c_int;
/// `CUmemPool_attribute` (an enum).
pub type CUmemPool_attribute = c_int;
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: CUmemPool_attribute = 5;
pub const CU_MEMPOOL_ATTR_USED_MEM_CURRENT: CUmemPool_attribute = 7;
/// `CUgraphMem_attribute` (an enum).
pub type CUgraphMem_attribute = c_int;
pub const CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: CUgraphMem_attribute = 0;
pub const CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: CUgraphMem_attribute = 2;
/// `CUstreamCaptureStatus` (an enum).
pub type CUstreamCaptureStatus = c_int;
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
/// `CUstreamCaptureMode` (an enum).
pub type CUstreamCaptureMode = c_int;
pub const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;
/// `cudaGraph_t`, `cudaGraphNode_t`.
pub type cudaGraph_t = *mut c_void;
pub type cudaGraphNode_t = *mut c_void;
/// `CUdriverProcAddressQueryResult` (an enum).
pub type CUdriverProcAddressQueryResult = c_int;

/// `CU_STREAM_PER_THREAD`: the handle `_ptsz` entry points use for stream 0.
pub const CU_STREAM_PER_THREAD: u64 = 2;
/// `CU_STREAM_LEGACY`: the legacy default stream's explicit handle.
pub const CU_STREAM_LEGACY: u64 = 1;
/// `CUstreamCaptureStatus` of a capture that was invalidated and awaits its end.
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: CUstreamCaptureStatus = 2;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;

/// `CUipcMemHandle`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUipcMemHandle {
    pub reserved: [c_char; 64],
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemLocation {
    pub type_: c_int,
    pub id: c_int,
}

/// The `allocFlags` member of `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAllocationPropAllocFlags {
    pub compressionType: u8,
    pub gpuDirectRDMACapable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAllocationProp {
    pub type_: c_int,
    pub requestedHandleTypes: c_int,
    pub location: CUmemLocation,
    pub win32HandleMetaData: *mut c_void,
    pub allocFlags: CUmemAllocationPropAllocFlags,
}

/// `CUuuid`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CUuuid {
    pub bytes: [u8; 16],
}

/// `CUmemPoolProps` (`cudaMemPoolProps` has the same layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemPoolProps {
    pub allocType: c_int,
    pub handleTypes: c_int,
    pub location: CUmemLocation,
    pub win32SecurityAttributes: *mut c_void,
    pub maxSize: usize,
    pub usage: u16,
    pub reserved: [u8; 54],
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS` (`cudaMemAllocNodeParams` has the same
/// layout): `dptr` is written by the driver.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_MEM_ALLOC_NODE_PARAMS {
    pub poolProps: CUmemPoolProps,
    pub accessDescs: *const c_void,
    pub accessDescCount: usize,
    pub bytesize: usize,
    pub dptr: CUdeviceptr,
}

/// `CUlaunchConfig`: `cuLaunchKernelEx`'s launch parameters, of which the
/// hooks read the stream.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUlaunchConfig {
    pub gridDimX: c_uint,
    pub gridDimY: c_uint,
    pub gridDimZ: c_uint,
    pub blockDimX: c_uint,
    pub blockDimY: c_uint,
    pub blockDimZ: c_uint,
    pub sharedMemBytes: c_uint,
    pub hStream: CUstream,
    pub attrs: *mut c_void,
    pub numAttrs: c_uint,
}

/// `CUDA_ARRAY_DESCRIPTOR` (the `_v2` layout, with `size_t` extents).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_ARRAY_DESCRIPTOR {
    pub Width: usize,
    pub Height: usize,
    pub Format: c_int,
    pub NumChannels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR` (the `_v2` layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_ARRAY3D_DESCRIPTOR {
    pub Width: usize,
    pub Height: usize,
    pub Depth: usize,
    pub Format: c_int,
    pub NumChannels: c_uint,
    pub Flags: c_uint,
}

/// `CUDA_ARRAY_DESCRIPTOR_v1`, taken by the unversioned `cuArrayCreate`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_ARRAY_DESCRIPTOR_v1 {
    pub Width: c_uint,
    pub Height: c_uint,
    pub Format: c_int,
    pub NumChannels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR_v1`, taken by the unversioned `cuArray3DCreate`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_ARRAY3D_DESCRIPTOR_v1 {
    pub Width: c_uint,
    pub Height: c_uint,
    pub Depth: c_uint,
    pub Format: c_int,
    pub NumChannels: c_uint,
    pub Flags: c_uint,
}

/// `cudaPitchedPtr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cudaPitchedPtr {
    pub ptr: *mut c_void,
    pub pitch: usize,
    pub xsize: usize,
    pub ysize: usize,
}

/// `cudaExtent`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cudaExtent {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

/// `cudaChannelFormatDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cudaChannelFormatDesc {
    pub x: c_int,
    pub y: c_int,
    pub z: c_int,
    pub w: c_int,
    pub f: c_int,
}

/// `cudaIpcMemHandle_t`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cudaIpcMemHandle_t {
    pub reserved: [c_char; 64],
}

/// `cudaStream_t`, `cudaMemPool_t`, `cudaArray_t`.
pub type cudaStream_t = *mut c_void;
pub type cudaMemPool_t = *mut c_void;
pub type cudaArray_t = *mut c_void;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn struct_layouts_match_the_c_headers() {
        assert_eq!(size_of::<CUmemAllocationProp>(), 32);
        assert_eq!(offset_of!(CUmemAllocationProp, location), 8);
        assert_eq!(offset_of!(CUmemAllocationProp, allocFlags), 24);
        assert_eq!(size_of::<CUDA_ARRAY_DESCRIPTOR>(), 24);
        assert_eq!(size_of::<CUDA_ARRAY3D_DESCRIPTOR>(), 40);
        assert_eq!(size_of::<CUDA_ARRAY_DESCRIPTOR_v1>(), 16);
        assert_eq!(size_of::<CUDA_ARRAY3D_DESCRIPTOR_v1>(), 24);
        assert_eq!(size_of::<CUipcMemHandle>(), 64);
        assert_eq!(size_of::<cudaPitchedPtr>(), 32);
        assert_eq!(size_of::<cudaExtent>(), 24);
        assert_eq!(size_of::<CUmemPoolProps>(), 88);
        assert_eq!(offset_of!(CUDA_MEM_ALLOC_NODE_PARAMS, bytesize), 104);
        assert_eq!(offset_of!(CUDA_MEM_ALLOC_NODE_PARAMS, dptr), 112);
        assert_eq!(size_of::<CUuuid>(), 16);
    }
}
