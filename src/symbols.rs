//! Every CUDA entry point we hook, where its real implementation lives, and
//! how to map a real driver pointer back to the hook with the same ABI.
//!
//! Real addresses are looked up lazily, on the first call that needs them, and
//! cached in atomics: the steady-state hook path costs one atomic load.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

macro_rules! symbol_table {
    (
        $( hooked in $module:ident : $( $hook:ident ),* ; )*
        support: $( $support:ident ),* ;
    ) => {
        /// A CUDA symbol we hook, or call for our own bookkeeping.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Sym { $( $( $hook, )* )* $( $support, )* }

        impl Sym {
            /// Every symbol, in declaration order.
            pub const ALL: &'static [Sym] = &[ $( $( Sym::$hook, )* )* $( Sym::$support, )* ];

            /// The exported name.
            pub fn name(self) -> &'static CStr {
                match self {
                    $( $( Sym::$hook => {
                        // SAFETY: a literal with exactly one NUL, at its end.
                        unsafe { CStr::from_bytes_with_nul_unchecked(concat!(stringify!($hook), "\0").as_bytes()) }
                    } )* )*
                    $( Sym::$support => {
                        // SAFETY: as above.
                        unsafe { CStr::from_bytes_with_nul_unchecked(concat!(stringify!($support), "\0").as_bytes()) }
                    } )*
                }
            }

            /// Address of our hook, or `None` for a symbol we only call.
            pub fn hook(self) -> Option<usize> {
                match self {
                    $( $( Sym::$hook => Some(crate::$module::$hook as *const () as usize), )* )*
                    $( Sym::$support => None, )*
                }
            }
        }
    };
}

symbol_table! {
    hooked in proc_address: cuGetProcAddress, cuGetProcAddress_v2;
    hooked in driver_hooks:
        cuInit, cuMemAlloc, cuMemAlloc_v2, cuMemAllocPitch, cuMemAllocPitch_v2, cuMemAllocManaged,
        cuMemAllocAsync, cuMemAllocAsync_ptsz, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz,
        cuMemCreate, cuArrayCreate, cuArrayCreate_v2, cuArray3DCreate, cuArray3DCreate_v2,
        cuMipmappedArrayCreate,
        cuMemFree, cuMemFree_v2, cuMemFreeAsync, cuMemFreeAsync_ptsz, cuMemRelease,
        cuArrayDestroy, cuMipmappedArrayDestroy,
        cuMemAddressReserve, cuMemAddressFree, cuMemMap, cuMemUnmap,
        cuMemHostAlloc, cuMemAllocHost, cuMemAllocHost_v2, cuMemHostRegister, cuMemHostRegister_v2,
        cuMemFreeHost, cuMemHostUnregister,
        cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle, cuMemPoolDestroy;
    hooked in runtime_hooks:
        cudaMalloc, cudaFree, cudaMallocAsync, cudaMallocAsync_ptsz, cudaFreeAsync, cudaFreeAsync_ptsz,
        cudaMallocFromPoolAsync, cudaMallocFromPoolAsync_ptsz, cudaMallocManaged, cudaMallocPitch,
        cudaMalloc3D, cudaMallocHost, cudaHostAlloc, cudaFreeHost, cudaMallocArray, cudaMalloc3DArray,
        cudaFreeArray, cudaHostRegister, cudaHostUnregister, cudaIpcOpenMemHandle, cudaIpcCloseMemHandle,
        cudaGraphAddMemAllocNode, cudaGraphAddMemFreeNode;
    hooked in context_hooks:
        cuCtxSetCurrent, cuCtxPushCurrent, cuCtxPushCurrent_v2, cuCtxCreate, cuCtxCreate_v2, cuCtxCreate_v3,
        cuCtxCreate_v4, cuCtxSetLimit, cuModuleLoad, cuModuleLoadData, cuModuleLoadDataEx, cuModuleLoadFatBinary,
        cuLibraryLoadData, cuLibraryLoadFromFile, cuGraphAddMemAllocNode, cuGraphAddMemFreeNode;
    hooked in launch_hooks:
        cuLaunchKernel, cuLaunchKernel_ptsz, cuLaunchKernelEx, cuLaunchKernelEx_ptsz,
        cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, cuFuncGetAttribute, cuFuncSetAttribute,
        cuKernelGetAttribute, cuKernelSetAttribute, cuKernelGetFunction, cuModuleGetFunction;
    support: cuMemGetInfo_v2, cuCtxGetDevice, cuCtxGetLimit, cuDeviceGetUuid_v2, cuDeviceGetName,
        cuDeviceTotalMem_v2, cuDeviceGetMemPool, cuMemPoolGetAttribute, cuDeviceGetGraphMemAttribute,
        cuThreadExchangeStreamCaptureMode, cuStreamIsCapturing;
}

/// Which CUDA library defines a symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaLibrary {
    /// `libcuda.so.1`, the driver.
    Driver,
    /// `libcudart.so.*`, the runtime.
    Runtime,
}

impl Sym {
    /// The library that defines this symbol.
    pub fn library(self) -> CudaLibrary {
        if self.name().to_bytes().starts_with(b"cuda") {
            CudaLibrary::Runtime
        } else {
            CudaLibrary::Driver
        }
    }

    /// Whether this is a kernel launch entry point, or one where a kernel
    /// may load (see [`crate::launch_hooks`]).
    pub fn is_launch(self) -> bool {
        let name = self.name().to_bytes();
        name.starts_with(b"cuLaunch")
            || name.starts_with(b"cuFunc")
            || name.starts_with(b"cuKernel")
            || name == b"cuModuleGetFunction"
    }

    /// Our hook, unless it is turned off (`--no-launch-hooks`): then the
    /// program is handed the real function and pays nothing at all.
    pub fn active_hook(self) -> Option<usize> {
        if self.is_launch() && !crate::launch_hooks::enabled() {
            return None;
        }
        self.hook()
    }

    /// The hooked symbol called `name`, if any.
    pub fn hooked_by_name(name: &[u8]) -> Option<Sym> {
        Sym::ALL
            .iter()
            .copied()
            .find(|sym| sym.active_hook().is_some() && sym.name().to_bytes() == name)
    }
}

const SYM_COUNT: usize = Sym::ALL.len();

/// Real addresses; 0 means not looked up yet (or not found last time).
static REAL: [AtomicUsize; SYM_COUNT] = [const { AtomicUsize::new(0) }; SYM_COUNT];
static DRIVER_HANDLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static RUNTIME_HANDLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static DRIVER_TABLE_COMPLETE: AtomicBool = AtomicBool::new(false);
static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Address of the C library's `dlsym`, found with `dlvsym` so that our own
/// `dlsym` is skipped. Resolved on first use: another library's constructor
/// may call `dlsym` before ours has run.
pub fn real_dlsym_address() -> usize {
    let cached = REAL_DLSYM.load(Ordering::Acquire);
    if cached != 0 {
        return cached;
    }
    let found = [c"GLIBC_2.34", c"GLIBC_2.2.5"]
        .iter()
        // SAFETY: NUL-terminated names; RTLD_NEXT searches the libraries after ours.
        .map(|version| unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) } as usize)
        .find(|&address| address != 0)
        .unwrap_or(0);
    REAL_DLSYM.store(found, Ordering::Release);
    found
}

/// Calls the C library's `dlsym`. Our return address becomes the caller it
/// sees, so this is only for lookups whose result does not depend on the
/// caller (any handle but `RTLD_NEXT`, or `RTLD_NEXT` meant relative to us).
///
/// # Safety
/// `handle` must be a handle from `dlopen`, `RTLD_DEFAULT` or `RTLD_NEXT`.
pub unsafe fn real_dlsym(handle: *mut c_void, name: &CStr) -> usize {
    let address = real_dlsym_address();
    if address == 0 {
        return 0;
    }
    // SAFETY: `address` is glibc's dlsym, whose signature DlsymFn is.
    let dlsym: DlsymFn = unsafe { std::mem::transmute::<usize, DlsymFn>(address) };
    // SAFETY: `name` is NUL-terminated; the handle came from the loader or is special.
    unsafe { dlsym(handle, name.as_ptr()) as usize }
}

/// The real address of `sym`, looked up on first use.
#[inline]
pub fn real(sym: Sym) -> Option<usize> {
    match REAL[sym as usize].load(Ordering::Acquire) {
        0 => resolve(sym),
        address => Some(address),
    }
}

/// The real implementation of `sym` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the function pointer type of `sym`'s C signature.
#[inline]
pub unsafe fn real_fn<F: Copy>(sym: Sym) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
    // SAFETY: the caller names the right signature; addresses are code addresses.
    real(sym).map(|address| unsafe { std::mem::transmute_copy::<usize, F>(&address) })
}

#[cold]
fn resolve(sym: Sym) -> Option<usize> {
    let found = look_up_real(sym);
    // A failed lookup leaves a dlerror() message the program never asked for.
    // SAFETY: dlerror has no preconditions.
    unsafe { libc::dlerror() };
    let address = found?;
    match REAL[sym as usize].compare_exchange(0, address, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(address),
        Err(first) => Some(first),
    }
}

fn look_up_real(sym: Sym) -> Option<usize> {
    let name = sym.name();
    let own = sym.hook();
    let usable = |address: usize| address != 0 && Some(address) != own;
    let remembered = match sym.library() {
        CudaLibrary::Driver => DRIVER_HANDLE.load(Ordering::Acquire),
        CudaLibrary::Runtime => RUNTIME_HANDLE.load(Ordering::Acquire),
    };
    if !remembered.is_null() {
        // SAFETY: a handle the program or we got from the loader.
        let address = unsafe { real_dlsym(remembered, name) };
        if usable(address) {
            return Some(address);
        }
    }
    let loaded = match sym.library() {
        CudaLibrary::Driver => loaded_library(c"libcuda.so.1").or_else(|| loaded_library_with_prefix(b"libcuda.so")),
        CudaLibrary::Runtime => loaded_library_with_prefix(b"libcudart.so"),
    };
    if let Some(handle) = loaded {
        // SAFETY: a handle from dlopen.
        unsafe { remember_handle(sym.library(), handle) };
        // SAFETY: a handle from dlopen.
        let address = unsafe { real_dlsym(handle, name) };
        if usable(address) {
            return Some(address);
        }
    }
    // Last resort: whatever follows us in the global scope.
    // SAFETY: RTLD_NEXT is a special handle.
    Some(unsafe { real_dlsym(libc::RTLD_NEXT, name) }).filter(|&address| usable(address))
}

fn loaded_library(soname: &CStr) -> Option<*mut c_void> {
    // SAFETY: RTLD_NOLOAD only returns a library that is already loaded.
    let handle = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    (!handle.is_null()).then_some(handle)
}

/// A handle to the first loaded library whose file name starts with `prefix`:
/// a library opened with `RTLD_LOCAL` (as Python extensions' dependencies are)
/// is invisible to `RTLD_NEXT` but can still be reached this way.
fn loaded_library_with_prefix(prefix: &[u8]) -> Option<*mut c_void> {
    struct Search<'a> {
        prefix: &'a [u8],
        path: Option<std::ffi::CString>,
    }
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> i32 {
        // SAFETY: the loader passes a valid info; data is our Search.
        let (info, search) = unsafe { (&*info, &mut *data.cast::<Search>()) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: dlpi_name is a NUL-terminated path.
        let path = unsafe { CStr::from_ptr(info.dlpi_name) };
        let file_name = path.to_bytes().rsplit(|&b| b == b'/').next().unwrap_or_default();
        if file_name.starts_with(search.prefix) {
            search.path = Some(path.to_owned());
            return 1;
        }
        0
    }
    let mut search = Search { prefix, path: None };
    // SAFETY: the callback only reads what the loader hands it.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut search).cast()) };
    loaded_library(&search.path?)
}

/// Whether the driver's handle is known yet.
pub fn driver_handle_known() -> bool {
    !DRIVER_HANDLE.load(Ordering::Acquire).is_null()
}

/// Remembers the handle the program opened a CUDA library with.
///
/// # Safety
/// `handle` must be a handle from `dlopen` (a glibc link map).
pub unsafe fn remember_handle(library: CudaLibrary, handle: *mut c_void) {
    let slot = match library {
        CudaLibrary::Driver => &DRIVER_HANDLE,
        CudaLibrary::Runtime => &RUNTIME_HANDLE,
    };
    let _ = slot.compare_exchange(std::ptr::null_mut(), handle, Ordering::AcqRel, Ordering::Acquire);
    if library == CudaLibrary::Driver {
        // SAFETY: the caller passes a link map.
        unsafe { crate::dlsym_door::remember_driver_range(handle) };
    }
}

/// Takes `address`, found by the program through a door of its own, as the
/// real `sym`. Returns false if a different real `sym` is already in use
/// (two copies of a library): the caller then must not hand out our hook.
pub fn adopt_real(sym: Sym, address: usize) -> bool {
    match REAL[sym as usize].compare_exchange(0, address, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(current) => current == address,
    }
}

/// Our hook for the driver export at `address`, if `address` is the real
/// version of a driver symbol we hook. The driver's `cuGetProcAddress` returns
/// export addresses exactly, so an address identifies the versioned export,
/// and with it the ABI the caller expects.
pub fn hook_for_real_driver_address(address: usize) -> Option<usize> {
    if !DRIVER_TABLE_COMPLETE.load(Ordering::Acquire) {
        for &sym in Sym::ALL {
            if sym.library() == CudaLibrary::Driver {
                let _ = real(sym);
            }
        }
        DRIVER_TABLE_COMPLETE.store(true, Ordering::Release);
    }
    Sym::ALL
        .iter()
        .find(|&&sym| sym.library() == CudaLibrary::Driver && REAL[sym as usize].load(Ordering::Acquire) == address)
        .and_then(|sym| sym.active_hook())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_libraries_and_lookup_agree() {
        assert_eq!(Sym::cuMemAlloc_v2.name(), c"cuMemAlloc_v2");
        assert_eq!(
            Sym::hooked_by_name(b"cuMemAllocAsync_ptsz"),
            Some(Sym::cuMemAllocAsync_ptsz)
        );
        assert_eq!(
            Sym::hooked_by_name(b"cudaMallocAsync_ptsz"),
            Some(Sym::cudaMallocAsync_ptsz)
        );
        // Symbols we only call are not hooked, so lookups of them pass through.
        assert_eq!(Sym::hooked_by_name(b"cuMemGetInfo_v2"), None);
        assert_eq!(Sym::hooked_by_name(b"cuMemcpy"), None);
        assert_eq!(Sym::cudaFree.library(), CudaLibrary::Runtime);
        assert_eq!(Sym::cuGetProcAddress_v2.library(), CudaLibrary::Driver);
        assert_eq!(Sym::cuCtxGetDevice.hook(), None);
        assert!(Sym::cuMemFree.hook().is_some());
    }

    #[test]
    fn every_hooked_symbol_is_an_api_the_event_format_knows() {
        for &sym in Sym::ALL {
            let name = sym.name().to_str().unwrap();
            let not_an_event = name.starts_with("cuGetProcAddress") || name == "cuInit";
            if sym.hook().is_some() && !not_an_event {
                assert!(
                    cudatrace_events::Api::from_name(name).is_some(),
                    "{name} has no Api code"
                );
            }
        }
    }
}
