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
pub(crate) type CUresult = c_int;
pub(crate) const CUDA_SUCCESS: CUresult = 0;
pub(crate) const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub(crate) const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`: the capture ended, invalidated.
pub(crate) const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;

/// `cudaError_t`.
pub(crate) type cudaError_t = c_int;
pub(crate) const cudaErrorInitializationError: cudaError_t = 3;

pub(crate) type CUdeviceptr = u64;
/// The 32-bit device pointer of the pre-3.2 ABI (`cuMemAlloc` without `_v2`).
pub(crate) type CUdeviceptr_v1 = c_uint;
pub(crate) type CUdevice = c_int;
pub(crate) type CUstream = *mut c_void;
pub(crate) type CUmemoryPool = *mut c_void;
pub(crate) type CUarray = *mut c_void;
pub(crate) type CUmipmappedArray = *mut c_void;
pub(crate) type CUmemGenericAllocationHandle = u64;
pub(crate) type cuuint64_t = u64;
pub(crate) type CUcontext = *mut c_void;
pub(crate) type CUmodule = *mut c_void;
pub(crate) type CUlibrary = *mut c_void;
pub(crate) type CUfunction = *mut c_void;
pub(crate) type CUgraph = *mut c_void;
pub(crate) type CUgraphNode = *mut c_void;
/// `CUgraphExec`: an executable graph.
pub(crate) type CUgraphExec = *mut c_void;
/// `CUevent`.
pub(crate) type CUevent = *mut c_void;
/// `CUlimit` (an enum).
pub(crate) type CUlimit = c_int;
/// `CUjit_option` (an enum).
pub(crate) type CUjit_option = c_int;
/// `CUlibraryOption` (an enum).
pub(crate) type CUlibraryOption = c_int;
/// `CUmemPool_attribute` (an enum).
pub(crate) type CUmemPool_attribute = c_int;
pub(crate) const CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: CUmemPool_attribute = 5;
pub(crate) const CU_MEMPOOL_ATTR_USED_MEM_CURRENT: CUmemPool_attribute = 7;
/// `CUgraphMem_attribute` (an enum).
pub(crate) type CUgraphMem_attribute = c_int;
pub(crate) const CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: CUgraphMem_attribute = 0;
pub(crate) const CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: CUgraphMem_attribute = 2;
/// `CUstreamCaptureStatus` (an enum).
pub(crate) type CUstreamCaptureStatus = c_int;
pub(crate) const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
/// `CUstreamCaptureMode` (an enum).
pub(crate) type CUstreamCaptureMode = c_int;
pub(crate) const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;
/// `cudaGraph_t`, `cudaGraphNode_t`.
pub(crate) type cudaGraph_t = *mut c_void;
pub(crate) type cudaGraphNode_t = *mut c_void;
/// `CUdriverProcAddressQueryResult` (an enum).
pub(crate) type CUdriverProcAddressQueryResult = c_int;

/// `CU_STREAM_PER_THREAD`: the handle `_ptsz` entry points use for stream 0.
pub(crate) const CU_STREAM_PER_THREAD: u64 = 2;
/// `CU_STREAM_LEGACY`: the legacy default stream's explicit handle.
pub(crate) const CU_STREAM_LEGACY: u64 = 1;
/// `CUstreamCaptureStatus` of a capture that was invalidated and awaits its end.
pub(crate) const CU_STREAM_CAPTURE_STATUS_INVALIDATED: CUstreamCaptureStatus = 2;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub(crate) const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;

/// `CUipcMemHandle`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUipcMemHandle {
    pub(crate) reserved: [c_char; 64],
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUmemLocation {
    pub(crate) type_: c_int,
    pub(crate) id: c_int,
}

/// The `allocFlags` member of `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUmemAllocationPropAllocFlags {
    pub(crate) compressionType: u8,
    pub(crate) gpuDirectRDMACapable: u8,
    pub(crate) usage: u16,
    pub(crate) reserved: [u8; 4],
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUmemAllocationProp {
    pub(crate) type_: c_int,
    pub(crate) requestedHandleTypes: c_int,
    pub(crate) location: CUmemLocation,
    pub(crate) win32HandleMetaData: *mut c_void,
    pub(crate) allocFlags: CUmemAllocationPropAllocFlags,
}

/// `CUuuid`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct CUuuid {
    pub(crate) bytes: [u8; 16],
}

/// `CUmemPoolProps` (`cudaMemPoolProps` has the same layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUmemPoolProps {
    pub(crate) allocType: c_int,
    pub(crate) handleTypes: c_int,
    pub(crate) location: CUmemLocation,
    pub(crate) win32SecurityAttributes: *mut c_void,
    pub(crate) maxSize: usize,
    pub(crate) usage: u16,
    pub(crate) reserved: [u8; 54],
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS` (`cudaMemAllocNodeParams` has the same
/// layout): `dptr` is written by the driver.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUDA_MEM_ALLOC_NODE_PARAMS {
    pub(crate) poolProps: CUmemPoolProps,
    pub(crate) accessDescs: *const c_void,
    pub(crate) accessDescCount: usize,
    pub(crate) bytesize: usize,
    pub(crate) dptr: CUdeviceptr,
}

/// `CUlaunchConfig`: `cuLaunchKernelEx`'s launch parameters, of which the
/// hooks read the stream.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUlaunchConfig {
    pub(crate) gridDimX: c_uint,
    pub(crate) gridDimY: c_uint,
    pub(crate) gridDimZ: c_uint,
    pub(crate) blockDimX: c_uint,
    pub(crate) blockDimY: c_uint,
    pub(crate) blockDimZ: c_uint,
    pub(crate) sharedMemBytes: c_uint,
    pub(crate) hStream: CUstream,
    pub(crate) attrs: *mut c_void,
    pub(crate) numAttrs: c_uint,
}

/// `CUDA_ARRAY_DESCRIPTOR` (the `_v2` layout, with `size_t` extents).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUDA_ARRAY_DESCRIPTOR {
    pub(crate) Width: usize,
    pub(crate) Height: usize,
    pub(crate) Format: c_int,
    pub(crate) NumChannels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR` (the `_v2` layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUDA_ARRAY3D_DESCRIPTOR {
    pub(crate) Width: usize,
    pub(crate) Height: usize,
    pub(crate) Depth: usize,
    pub(crate) Format: c_int,
    pub(crate) NumChannels: c_uint,
    pub(crate) Flags: c_uint,
}

/// `CUDA_ARRAY_DESCRIPTOR_v1`, taken by the unversioned `cuArrayCreate`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUDA_ARRAY_DESCRIPTOR_v1 {
    pub(crate) Width: c_uint,
    pub(crate) Height: c_uint,
    pub(crate) Format: c_int,
    pub(crate) NumChannels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR_v1`, taken by the unversioned `cuArray3DCreate`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUDA_ARRAY3D_DESCRIPTOR_v1 {
    pub(crate) Width: c_uint,
    pub(crate) Height: c_uint,
    pub(crate) Depth: c_uint,
    pub(crate) Format: c_int,
    pub(crate) NumChannels: c_uint,
    pub(crate) Flags: c_uint,
}

/// `cudaPitchedPtr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct cudaPitchedPtr {
    pub(crate) ptr: *mut c_void,
    pub(crate) pitch: usize,
    pub(crate) xsize: usize,
    pub(crate) ysize: usize,
}

/// `cudaExtent`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct cudaExtent {
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) depth: usize,
}

/// `cudaChannelFormatDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct cudaChannelFormatDesc {
    pub(crate) x: c_int,
    pub(crate) y: c_int,
    pub(crate) z: c_int,
    pub(crate) w: c_int,
    pub(crate) f: c_int,
}

/// `cudaIpcMemHandle_t`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct cudaIpcMemHandle_t {
    pub(crate) reserved: [c_char; 64],
}

/// `cudaStream_t`, `cudaMemPool_t`, `cudaArray_t`.
pub(crate) type cudaStream_t = *mut c_void;
pub(crate) type cudaMemPool_t = *mut c_void;
pub(crate) type cudaArray_t = *mut c_void;

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
