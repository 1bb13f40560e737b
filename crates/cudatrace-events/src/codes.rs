//! Small integer codes stored in every record: which API made the call, what
//! happened to memory, and what kind of memory it was.

/// An enum of small codes, each with the name users see: its `ALL`,
/// `from_code`, `name`, `from_name` and `Display`. The codes are read from
/// a byte, or from the type named after `read from` (a record's word).
macro_rules! code_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($body:tt)* }
    ) => {
        code_enum! { $(#[$meta])* pub enum $name read from u8 { $($body)* } }
    };
    (
        $(#[$meta:meta])*
        pub enum $name:ident read from $code:ty { $( $(#[$vmeta:meta])* $variant:ident = $value:expr => $text:expr, )* }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum $name { $( $(#[$vmeta])* #[doc = concat!("\n\nNamed `", $text, "` where users see it.")] $variant = $value, )* }

        impl $name {
            /// Every value, in code order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant, )* ];

            /// Decodes a stored code; `None` for a code this version does not know.
            pub fn from_code(code: $code) -> Option<Self> {
                match code {
                    $( $value => Some($name::$variant), )*
                    _ => None,
                }
            }

            /// The name users see in reports and JSON.
            pub fn name(self) -> &'static str {
                match self { $( $name::$variant => $text, )* }
            }

            /// Inverse of [`Self::name`].
            pub fn from_name(text: &str) -> Option<Self> {
                match text {
                    $( $text => Some($name::$variant), )*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

code_enum! {
    /// What a record says happened.
    pub enum Op {
        /// Memory (or an imported mapping) came into existence.
        Alloc = 1 => "alloc",
        /// Memory recorded by an earlier `Alloc` went away.
        Free = 2 => "free",
        /// An allocation failed with `CUDA_ERROR_OUT_OF_MEMORY`: `size` the
        /// bytes asked for; `arg1` and `arg2` the device's free and total
        /// bytes. `address` is [`crate::event_args::REFUSED_BY_LIMIT`] when
        /// the memory limit refused it (then `arg1` is what the limit had
        /// left and `arg2` the limit), 0 when the card did.
        Oom = 3 => "oom",
        /// A VMM physical handle was mapped at a virtual address (`cuMemMap`).
        Map = 4 => "map",
        /// A VMM mapping was removed (`cuMemUnmap`).
        Unmap = 5 => "unmap",
        /// Virtual address space was reserved (`cuMemAddressReserve`).
        Reserve = 6 => "reserve",
        /// Reserved address space was given back (`cuMemAddressFree`).
        Unreserve = 7 => "unreserve",
        /// A sequence number reserved by a free or unmap whose call failed:
        /// nothing changed. Kept so that sequence numbers have no gaps.
        Failed = 8 => "failed",
        /// Not a memory event: a call-stack node interned by the process
        /// (see [`crate::stacks`]).
        StackNode = 9 => "stack-node",
        /// Not a memory event: a piece of a module, code-object or device
        /// description (see [`crate::stacks`]).
        Blob = 10 => "blob",
        /// A reading of the device's memory (`cuMemGetInfo_v2`), rate-limited
        /// or at exit: `arg1` free, `arg2` total bytes, `stream` a
        /// [`crate::measures::sample_reason`].
        Sample = 11 => "sample",
        /// A context became current for the first time: `address` the
        /// context, `arg1` the device's free bytes and `arg2` its total.
        Context = 12 => "context",
        /// A context limit: `address` the `CUlimit`, `size` its value; set
        /// by `cuCtxSetLimit` when `api` says so, with the device's free
        /// bytes before and after in `arg1` and `arg2`.
        Limit = 13 => "limit",
        /// A module or library was loaded: `address` its handle, `arg1` and
        /// `arg2` the device's free bytes before and after.
        ModuleLoad = 14 => "module-load",
        /// A kernel launched for the first time (it may be loaded then):
        /// `address` the function, `arg1`/`arg2` free bytes before and after.
        KernelLoad = 15 => "kernel-load",
        /// A stream-ordered pool's memory: `address` the pool, `size` its
        /// reserved bytes, `arg1` the bytes in use.
        PoolSample = 16 => "pool-sample",
        /// The device's graph memory: `size` reserved, `arg1` in use.
        GraphSample = 17 => "graph-sample",
        /// A graph memory node was added: `address` the allocation's
        /// address, `size` its bytes (0 for a free node), `arg1` the graph.
        GraphNode = 18 => "graph-node",
        /// Streams or events were created (`api` says which), measured
        /// around one creation: `address` its handle, `arg1`/`arg2` free
        /// bytes before and after, `size` how many creations this one
        /// stands for (1, or the sampling interval once creations are many).
        StreamObjects = 19 => "stream-objects",
        /// An executable graph was instantiated, updated, uploaded or first
        /// launched: `address` the executable graph, `arg1`/`arg2` free bytes
        /// before and after, `size` what the device's graph memory grew by
        /// meanwhile (counted by graph samples, so not the graph's own cost).
        GraphExec = 20 => "graph-exec",
        /// A thread's cached device disagreed with the driver's answer
        /// (the context changed through a call that is not hooked):
        /// `device` the driver's answer, `arg1` the cached device.
        DeviceMismatch = 21 => "device-mismatch",
        /// One action of PyTorch's caching allocator, seen by the tracker
        /// the library attaches to it (see [`crate::tensors`]): `arg1` the
        /// action, `address`, `size`, `stream` and `device` as PyTorch gave
        /// them, `arg2` the memory pool.
        Tensor = 22 => "tensor",
        /// What became of tensor tracking in the process (see
        /// [`crate::tensors::status`]): `arg1` the status, `arg2` the
        /// reason or count, `address` the PyTorch version.
        TensorStatus = 23 => "tensor-status",
        /// The process forked (`fork`): `arg1` the child's pid. Written by
        /// a process that has a spool, so that a child that leaves none is
        /// still known.
        Fork = 24 => "fork",
        /// The process runs under a memory limit (`cudatrace run --limit`)
        /// on `device`: `size` the limit's bytes. Written once per device,
        /// when the process first uses it.
        MemoryLimit = 25 => "memory-limit",
    }
}

impl Op {
    /// Whether the record says something about memory allocations (rather
    /// than describing call stacks or measuring the device).
    pub fn is_memory_event(self) -> bool {
        !self.is_stack_record() && !self.is_measurement() && !self.is_tensor_record() && !self.is_process_record()
    }

    /// Whether the record is about the process itself ([`Op::Fork`]).
    pub fn is_process_record(self) -> bool {
        matches!(self, Op::Fork)
    }

    /// Whether the record is about PyTorch's tensors ([`Op::Tensor`],
    /// [`Op::TensorStatus`]): inside memory the driver events account for.
    pub fn is_tensor_record(self) -> bool {
        matches!(self, Op::Tensor | Op::TensorStatus)
    }

    /// Whether the record describes call stacks or devices ([`Op::StackNode`], [`Op::Blob`]).
    pub fn is_stack_record(self) -> bool {
        matches!(self, Op::StackNode | Op::Blob)
    }

    /// Whether the record measures the device rather than an allocation
    /// (samples, contexts, limits, loads, pools and graphs), or says what
    /// the device was limited to ([`Op::MemoryLimit`]).
    pub fn is_measurement(self) -> bool {
        (Op::Sample as u8..=Op::DeviceMismatch as u8).contains(&(self as u8)) || self == Op::MemoryLimit
    }
}

code_enum! {
    /// What sort of memory a record is about.
    pub enum Kind {
        /// Plain device memory (`cuMemAlloc`).
        Device = 0 => "device",
        /// Unified memory (`cuMemAllocManaged`).
        Managed = 1 => "managed",
        /// Pitched device memory; the size is pitch x height.
        Pitch = 2 => "pitch",
        /// Stream-ordered memory from a memory pool (`cuMemAllocAsync`).
        Pool = 3 => "pool",
        /// Physical memory behind a VMM handle (`cuMemCreate`).
        VmmPhysical = 4 => "vmm-physical",
        /// A CUDA array or mipmapped array.
        Array = 5 => "array",
        /// Page-locked host memory, allocated or registered.
        HostPinned = 6 => "host-pinned",
        /// Another process's memory opened through CUDA IPC.
        IpcImport = 7 => "ipc-import",
        /// Virtual address space only (reservations and VMM mappings).
        VirtualAddress = 8 => "virtual-address",
        /// A stream-ordered allocation made while its stream was being
        /// captured into a CUDA graph: an address the graph's memory pool
        /// backs once the graph runs, counted as graph memory, never as an
        /// allocation of its own.
        GraphAllocation = 9 => "graph-allocation",
    }
}

impl Kind {
    /// Whether bytes of this kind count towards a device's footprint.
    pub fn counts_as_device_memory(self) -> bool {
        matches!(
            self,
            Kind::Device | Kind::Managed | Kind::Pitch | Kind::Pool | Kind::VmmPhysical | Kind::Array
        )
    }
}

code_enum! {
    /// The entry point the program called. For driver calls made inside a
    /// runtime call, this is the runtime entry point (the runtime tags them).
    pub enum Api {
        Unknown = 0 => "unknown",
        CuMemAlloc = 1 => "cuMemAlloc",
        CuMemAllocV2 = 2 => "cuMemAlloc_v2",
        CuMemAllocPitch = 3 => "cuMemAllocPitch",
        CuMemAllocPitchV2 = 4 => "cuMemAllocPitch_v2",
        CuMemAllocManaged = 5 => "cuMemAllocManaged",
        CuMemAllocAsync = 6 => "cuMemAllocAsync",
        CuMemAllocAsyncPtsz = 7 => "cuMemAllocAsync_ptsz",
        CuMemAllocFromPoolAsync = 8 => "cuMemAllocFromPoolAsync",
        CuMemAllocFromPoolAsyncPtsz = 9 => "cuMemAllocFromPoolAsync_ptsz",
        CuMemCreate = 10 => "cuMemCreate",
        CuArrayCreate = 11 => "cuArrayCreate",
        CuArrayCreateV2 = 12 => "cuArrayCreate_v2",
        CuArray3DCreate = 13 => "cuArray3DCreate",
        CuArray3DCreateV2 = 14 => "cuArray3DCreate_v2",
        CuMipmappedArrayCreate = 15 => "cuMipmappedArrayCreate",
        CuMemFree = 16 => "cuMemFree",
        CuMemFreeV2 = 17 => "cuMemFree_v2",
        CuMemFreeAsync = 18 => "cuMemFreeAsync",
        CuMemFreeAsyncPtsz = 19 => "cuMemFreeAsync_ptsz",
        CuMemRelease = 20 => "cuMemRelease",
        CuArrayDestroy = 21 => "cuArrayDestroy",
        CuMipmappedArrayDestroy = 22 => "cuMipmappedArrayDestroy",
        CuMemAddressReserve = 23 => "cuMemAddressReserve",
        CuMemAddressFree = 24 => "cuMemAddressFree",
        CuMemMap = 25 => "cuMemMap",
        CuMemUnmap = 26 => "cuMemUnmap",
        CuMemHostAlloc = 27 => "cuMemHostAlloc",
        CuMemAllocHost = 28 => "cuMemAllocHost",
        CuMemAllocHostV2 = 29 => "cuMemAllocHost_v2",
        CuMemHostRegister = 30 => "cuMemHostRegister",
        CuMemHostRegisterV2 = 31 => "cuMemHostRegister_v2",
        CuMemFreeHost = 32 => "cuMemFreeHost",
        CuMemHostUnregister = 33 => "cuMemHostUnregister",
        CuIpcOpenMemHandle = 34 => "cuIpcOpenMemHandle",
        CuIpcOpenMemHandleV2 = 35 => "cuIpcOpenMemHandle_v2",
        CuIpcCloseMemHandle = 36 => "cuIpcCloseMemHandle",
        CuCtxSetCurrent = 37 => "cuCtxSetCurrent",
        CuCtxPushCurrent = 38 => "cuCtxPushCurrent",
        CuCtxPushCurrentV2 = 39 => "cuCtxPushCurrent_v2",
        CuCtxCreate = 40 => "cuCtxCreate",
        CuCtxCreateV2 = 41 => "cuCtxCreate_v2",
        CuCtxCreateV3 = 42 => "cuCtxCreate_v3",
        CuCtxCreateV4 = 43 => "cuCtxCreate_v4",
        CuCtxSetLimit = 45 => "cuCtxSetLimit",
        CuCtxGetLimit = 46 => "cuCtxGetLimit",
        CuModuleLoad = 47 => "cuModuleLoad",
        CuModuleLoadData = 48 => "cuModuleLoadData",
        CuModuleLoadDataEx = 49 => "cuModuleLoadDataEx",
        CuModuleLoadFatBinary = 50 => "cuModuleLoadFatBinary",
        CuLibraryLoadData = 51 => "cuLibraryLoadData",
        CuLibraryLoadFromFile = 52 => "cuLibraryLoadFromFile",
        CuLaunchKernel = 53 => "cuLaunchKernel",
        CuLaunchKernelPtsz = 54 => "cuLaunchKernel_ptsz",
        CuLaunchKernelEx = 55 => "cuLaunchKernelEx",
        CuLaunchKernelExPtsz = 56 => "cuLaunchKernelEx_ptsz",
        CuLaunchCooperativeKernel = 57 => "cuLaunchCooperativeKernel",
        CuLaunchCooperativeKernelPtsz = 58 => "cuLaunchCooperativeKernel_ptsz",
        CuGraphAddMemAllocNode = 59 => "cuGraphAddMemAllocNode",
        CuGraphAddMemFreeNode = 60 => "cuGraphAddMemFreeNode",
        CuMemGetInfoV2 = 61 => "cuMemGetInfo_v2",
        CuMemPoolGetAttribute = 62 => "cuMemPoolGetAttribute",
        CuDeviceGetGraphMemAttribute = 63 => "cuDeviceGetGraphMemAttribute",
        CudaMalloc = 64 => "cudaMalloc",
        CudaFree = 65 => "cudaFree",
        CudaMallocAsync = 66 => "cudaMallocAsync",
        CudaMallocAsyncPtsz = 67 => "cudaMallocAsync_ptsz",
        CudaFreeAsync = 68 => "cudaFreeAsync",
        CudaFreeAsyncPtsz = 69 => "cudaFreeAsync_ptsz",
        CudaMallocFromPoolAsync = 70 => "cudaMallocFromPoolAsync",
        CudaMallocFromPoolAsyncPtsz = 71 => "cudaMallocFromPoolAsync_ptsz",
        CudaMallocManaged = 72 => "cudaMallocManaged",
        CudaMallocPitch = 73 => "cudaMallocPitch",
        CudaMalloc3D = 74 => "cudaMalloc3D",
        CudaMallocHost = 75 => "cudaMallocHost",
        CudaHostAlloc = 76 => "cudaHostAlloc",
        CudaFreeHost = 77 => "cudaFreeHost",
        CudaMallocArray = 78 => "cudaMallocArray",
        CudaMalloc3DArray = 79 => "cudaMalloc3DArray",
        CudaFreeArray = 80 => "cudaFreeArray",
        CudaHostRegister = 81 => "cudaHostRegister",
        CudaHostUnregister = 82 => "cudaHostUnregister",
        CudaIpcOpenMemHandle = 83 => "cudaIpcOpenMemHandle",
        CudaIpcCloseMemHandle = 84 => "cudaIpcCloseMemHandle",
        CudaGraphAddMemAllocNode = 85 => "cudaGraphAddMemAllocNode",
        CudaGraphAddMemFreeNode = 86 => "cudaGraphAddMemFreeNode",
        CudaSetDevice = 87 => "cudaSetDevice",
        CudaInitDevice = 88 => "cudaInitDevice",
        CudaDeviceReset = 89 => "cudaDeviceReset",
        CuFuncGetAttribute = 128 => "cuFuncGetAttribute",
        CuFuncSetAttribute = 129 => "cuFuncSetAttribute",
        CuKernelGetAttribute = 130 => "cuKernelGetAttribute",
        CuKernelSetAttribute = 131 => "cuKernelSetAttribute",
        CuKernelGetFunction = 132 => "cuKernelGetFunction",
        CuModuleGetFunction = 133 => "cuModuleGetFunction",
        CuMemPoolDestroy = 134 => "cuMemPoolDestroy",
        CuMemPoolCreate = 135 => "cuMemPoolCreate",
        CuCtxPopCurrent = 136 => "cuCtxPopCurrent",
        CuCtxPopCurrentV2 = 137 => "cuCtxPopCurrent_v2",
        CuCtxDestroy = 138 => "cuCtxDestroy",
        CuCtxDestroyV2 = 139 => "cuCtxDestroy_v2",
        CuDevicePrimaryCtxRetain = 140 => "cuDevicePrimaryCtxRetain",
        CuDevicePrimaryCtxRelease = 141 => "cuDevicePrimaryCtxRelease",
        CuDevicePrimaryCtxReleaseV2 = 142 => "cuDevicePrimaryCtxRelease_v2",
        CuDevicePrimaryCtxReset = 143 => "cuDevicePrimaryCtxReset",
        CuDevicePrimaryCtxResetV2 = 144 => "cuDevicePrimaryCtxReset_v2",
        CuStreamCreate = 145 => "cuStreamCreate",
        CuStreamCreateWithPriority = 146 => "cuStreamCreateWithPriority",
        CuStreamDestroy = 147 => "cuStreamDestroy",
        CuStreamDestroyV2 = 148 => "cuStreamDestroy_v2",
        CuEventCreate = 149 => "cuEventCreate",
        CuStreamBeginCapture = 150 => "cuStreamBeginCapture",
        CuStreamBeginCapturePtsz = 151 => "cuStreamBeginCapture_ptsz",
        CuStreamBeginCaptureV2 = 152 => "cuStreamBeginCapture_v2",
        CuStreamBeginCaptureV2Ptsz = 153 => "cuStreamBeginCapture_v2_ptsz",
        CuStreamBeginCaptureToGraph = 154 => "cuStreamBeginCaptureToGraph",
        CuStreamBeginCaptureToGraphPtsz = 155 => "cuStreamBeginCaptureToGraph_ptsz",
        CuStreamEndCapture = 156 => "cuStreamEndCapture",
        CuStreamEndCapturePtsz = 157 => "cuStreamEndCapture_ptsz",
        CuGraphInstantiate = 158 => "cuGraphInstantiate",
        CuGraphInstantiateV2 = 159 => "cuGraphInstantiate_v2",
        CuGraphInstantiateWithFlags = 160 => "cuGraphInstantiateWithFlags",
        CuGraphInstantiateWithParams = 161 => "cuGraphInstantiateWithParams",
        CuGraphInstantiateWithParamsPtsz = 162 => "cuGraphInstantiateWithParams_ptsz",
        CuGraphExecUpdate = 163 => "cuGraphExecUpdate",
        CuGraphExecUpdateV2 = 164 => "cuGraphExecUpdate_v2",
        CuGraphUpload = 165 => "cuGraphUpload",
        CuGraphUploadPtsz = 166 => "cuGraphUpload_ptsz",
        CuGraphLaunch = 167 => "cuGraphLaunch",
        CuGraphLaunchPtsz = 168 => "cuGraphLaunch_ptsz",
        CuGraphExecDestroy = 169 => "cuGraphExecDestroy",
        CuCtxGetDevice = 170 => "cuCtxGetDevice",
        /// PyTorch's CUDA caching allocator, through its trace tracker.
        TorchCachingAllocator = 171 => "c10::cuda::CUDACachingAllocator",
    }
}

impl Api {
    /// Whether this is a CUDA runtime (`cuda*`) entry point.
    pub fn is_runtime(self) -> bool {
        (64..128).contains(&(self as u8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_byte_and_its_name() {
        for &api in Api::ALL {
            assert_eq!(Api::from_code(api as u8), Some(api));
            assert_eq!(Api::from_name(api.name()), Some(api));
        }
        for &kind in Kind::ALL {
            assert_eq!(Kind::from_code(kind as u8), Some(kind));
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
        }
        for &op in Op::ALL {
            assert_eq!(Op::from_code(op as u8), Some(op));
        }
        assert_eq!(Api::from_code(90), None);
        assert_eq!(Api::from_code(172), None);
        assert_eq!(Kind::from_code(10), None);
        assert!(!Kind::GraphAllocation.counts_as_device_memory());
        // Zero is never an op: it marks a slot not yet written.
        assert_eq!(Op::from_code(0), None);
        assert_eq!(Op::from_code(26), None);
        assert!(Op::MemoryLimit.is_measurement() && !Op::MemoryLimit.is_memory_event());
        assert!(Op::Tensor.is_tensor_record() && !Op::Tensor.is_memory_event() && !Op::Tensor.is_measurement());
        assert!(Op::Free.is_memory_event() && !Op::Free.is_measurement());
        assert!(Op::Blob.is_stack_record() && !Op::Blob.is_memory_event());
        assert!(Op::GraphNode.is_measurement() && !Op::Sample.is_memory_event());
        assert!(Op::Fork.is_process_record() && !Op::Fork.is_memory_event() && !Op::Fork.is_measurement());
    }

    #[test]
    fn runtime_apis_are_told_apart_from_driver_apis() {
        assert!(Api::CudaMalloc.is_runtime());
        assert!(Api::CudaIpcCloseMemHandle.is_runtime());
        assert!(!Api::CuMemAllocV2.is_runtime());
        assert!(!Api::CuIpcCloseMemHandle.is_runtime());
        assert!(!Api::CuFuncGetAttribute.is_runtime());
    }
}
