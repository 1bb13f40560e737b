//! Every CUDA entry point we hook or call, and where its real
//! implementation lives.
//!
//! Real addresses are looked up lazily, on the first call that needs them, and
//! cached in atomics: the steady-state hook path costs one atomic load.

use crate::system::loader;
use crate::system::spare_stack;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Calls macro `$then` with the list of every CUDA symbol we hook, by the
/// hooks module that defines it, and those we only call. One list serves
/// this layer (the [`Sym`] enum, names, real addresses) and the hooks layer
/// (each symbol's hook), which sits above it.
macro_rules! with_cuda_symbols {
    ($then:ident) => {
        $then! {
            hooked in proc_address: cuGetProcAddress, cuGetProcAddress_v2;
            hooked in driver:
                cuInit, cuMemAlloc, cuMemAlloc_v2, cuMemAllocPitch, cuMemAllocPitch_v2, cuMemAllocManaged,
                cuMemAllocAsync, cuMemAllocAsync_ptsz, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz,
                cuMemCreate, cuArrayCreate, cuArrayCreate_v2, cuArray3DCreate, cuArray3DCreate_v2,
                cuMipmappedArrayCreate;
            hooked in driver_frees:
                cuMemFree, cuMemFree_v2, cuMemFreeAsync, cuMemFreeAsync_ptsz, cuMemRelease,
                cuArrayDestroy, cuMipmappedArrayDestroy;
            hooked in address_ranges: cuMemAddressReserve, cuMemAddressFree, cuMemMap, cuMemUnmap;
            hooked in driver:
                cuMemHostAlloc, cuMemAllocHost, cuMemAllocHost_v2, cuMemHostRegister, cuMemHostRegister_v2;
            hooked in driver_frees: cuMemFreeHost, cuMemHostUnregister;
            hooked in driver: cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2;
            hooked in driver_frees: cuIpcCloseMemHandle;
            hooked in driver: cuMemPoolCreate, cuMemPoolDestroy;
            hooked in runtime:
                cudaMalloc, cudaFree, cudaMallocAsync, cudaMallocAsync_ptsz, cudaFreeAsync, cudaFreeAsync_ptsz,
                cudaMallocFromPoolAsync, cudaMallocFromPoolAsync_ptsz, cudaMallocManaged, cudaMallocPitch,
                cudaMalloc3D, cudaMallocHost, cudaHostAlloc, cudaFreeHost, cudaMallocArray, cudaMalloc3DArray,
                cudaFreeArray, cudaHostRegister, cudaHostUnregister, cudaIpcOpenMemHandle, cudaIpcCloseMemHandle,
                cudaGraphAddMemAllocNode, cudaGraphAddMemFreeNode, cudaSetDevice, cudaInitDevice, cudaDeviceReset;
            hooked in context:
                cuCtxSetCurrent, cuCtxPushCurrent, cuCtxPushCurrent_v2, cuCtxCreate, cuCtxCreate_v2, cuCtxCreate_v3,
                cuCtxCreate_v4, cuCtxPopCurrent, cuCtxPopCurrent_v2, cuCtxDestroy, cuCtxDestroy_v2,
                cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2,
                cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2,
                cuCtxSetLimit, cuModuleLoad, cuModuleLoadData, cuModuleLoadDataEx, cuModuleLoadFatBinary,
                cuLibraryLoadData, cuLibraryLoadFromFile, cuGraphAddMemAllocNode, cuGraphAddMemFreeNode;
            hooked in streams:
                cuStreamCreate, cuStreamCreateWithPriority, cuStreamDestroy, cuStreamDestroy_v2,
                cuEventCreate, cuStreamBeginCapture, cuStreamBeginCapture_ptsz, cuStreamBeginCapture_v2,
                cuStreamBeginCapture_v2_ptsz, cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz,
                cuStreamEndCapture, cuStreamEndCapture_ptsz;
            hooked in graphs:
                cuGraphInstantiate, cuGraphInstantiate_v2, cuGraphInstantiateWithFlags,
                cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz, cuGraphExecUpdate,
                cuGraphExecUpdate_v2, cuGraphUpload, cuGraphUpload_ptsz, cuGraphLaunch, cuGraphLaunch_ptsz,
                cuGraphExecDestroy;
            hooked in launch:
                cuLaunchKernel, cuLaunchKernel_ptsz, cuLaunchKernelEx, cuLaunchKernelEx_ptsz,
                cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, cuFuncGetAttribute, cuFuncSetAttribute,
                cuKernelGetAttribute, cuKernelSetAttribute, cuKernelGetFunction, cuModuleGetFunction;
            hooked in limit_queries: cuMemGetInfo, cuMemGetInfo_v2, cuDeviceTotalMem, cuDeviceTotalMem_v2;
            support: cuCtxGetDevice, cuCtxGetLimit, cuDeviceGetUuid_v2, cuDeviceGetName, cuDeviceGetMemPool, cuMemPoolGetAttribute, cuDeviceGetGraphMemAttribute,
                cuThreadExchangeStreamCaptureMode, cuStreamIsCapturing, cuStreamGetDevice;
        }
    };
}
pub(crate) use with_cuda_symbols;

macro_rules! define_symbols {
    (
        $( hooked in $module:ident : $( $hook:ident ),* ; )*
        support: $( $support:ident ),* ;
    ) => {
        /// A CUDA symbol we hook, or call for our own bookkeeping.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Sym {
            $( $(
                #[doc = concat!("`", stringify!($hook), "`, hooked.")]
                $hook,
            )* )*
            $(
                #[doc = concat!("`", stringify!($support), "`, only called.")]
                $support,
            )*
        }

        impl Sym {
            /// Every symbol, in declaration order.
            pub(crate) const ALL: &'static [Sym] = &[ $( $( Sym::$hook, )* )* $( Sym::$support, )* ];

            /// The exported name.
            pub(crate) fn name(self) -> &'static CStr {
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

            /// Whether we export a hook for this symbol.
            pub(crate) fn is_hooked(self) -> bool {
                match self {
                    $( $( Sym::$hook => true, )* )*
                    $( Sym::$support => false, )*
                }
            }
        }
    };
}

with_cuda_symbols!(define_symbols);

/// Which CUDA library defines a symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CudaLibrary {
    /// `libcuda.so.1`, the driver.
    Driver,
    /// `libcudart.so.*`, the runtime.
    Runtime,
}

impl Sym {
    /// The library that defines this symbol.
    pub(crate) fn library(self) -> CudaLibrary {
        if self.name().to_bytes().starts_with(b"cuda") {
            CudaLibrary::Runtime
        } else {
            CudaLibrary::Driver
        }
    }

    /// Whether this is a kernel launch entry point, or one where a kernel
    /// may load (see `hooks::launch`).
    pub(crate) fn is_launch(self) -> bool {
        let name = self.name().to_bytes();
        name.starts_with(b"cuLaunch")
            || name.starts_with(b"cuFunc")
            || name.starts_with(b"cuKernel")
            || name == b"cuModuleGetFunction"
    }

    /// Whether this is a query of the device's memory, which the memory
    /// limit answers for (see `hooks::limit_queries`).
    pub(crate) fn is_limit_query(self) -> bool {
        let name = self.name().to_bytes();
        name.starts_with(b"cuMemGetInfo") || name.starts_with(b"cuDeviceTotalMem")
    }

    /// The hooked symbol called `name`, if any.
    pub(crate) fn hooked_by_name(name: &[u8]) -> Option<Sym> {
        Sym::ALL
            .iter()
            .copied()
            .find(|sym| sym.is_hooked() && sym.name().to_bytes() == name)
    }
}

const SYM_COUNT: usize = Sym::ALL.len();

/// Real addresses; 0 means not found yet.
static REAL: [AtomicUsize; SYM_COUNT] = [const { AtomicUsize::new(0) }; SYM_COUNT];
/// For a symbol not found: 1 + the `dlopen` count at the time of the last
/// search, so that it is searched again only once a library has loaded
/// since (0 = never searched).
static MISSING_SINCE: [AtomicU64; SYM_COUNT] = [const { AtomicU64::new(0) }; SYM_COUNT];
static DRIVER_HANDLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static RUNTIME_HANDLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
/// Load addresses of the libraries behind those handles (0 = not known):
/// a program may unload a CUDA library and load it again, elsewhere.
static DRIVER_BASE: AtomicUsize = AtomicUsize::new(0);
static RUNTIME_BASE: AtomicUsize = AtomicUsize::new(0);
/// How many times the driver's addresses were forgotten (it was unloaded,
/// or loaded again at another address).
static DRIVER_GENERATION: AtomicU64 = AtomicU64::new(0);
/// How many times the driver's image was found gone (unloaded) when its
/// addresses were forgotten: what it held went with it.
static DRIVER_UNLOADS: AtomicU64 = AtomicU64::new(0);
static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
/// Searches made for real functions so far (each takes the loader lock).
static SEARCHES: AtomicU64 = AtomicU64::new(0);
/// Address ranges of the driver's loaded image and of this library's own.
static DRIVER_RANGE: ImageRange = ImageRange::new();
static OWN_RANGE: ImageRange = ImageRange::new();

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Address of the C library's `dlsym`, found with `dlvsym` so that our own
/// `dlsym` is skipped. Resolved on first use: another library's constructor
/// may call `dlsym` before ours has run.
pub(crate) fn real_dlsym_address() -> usize {
    loader::glibc_function(c"dlsym", &REAL_DLSYM)
}

/// Calls the C library's `dlsym`. Our return address becomes the caller it
/// sees, so this is only for lookups whose result does not depend on the
/// caller (any handle but `RTLD_NEXT`, or `RTLD_NEXT` meant relative to us).
///
/// # Safety
/// `handle` must be a handle from `dlopen`, `RTLD_DEFAULT` or `RTLD_NEXT`.
pub(crate) unsafe fn real_dlsym(handle: *mut c_void, name: &CStr) -> usize {
    let address = real_dlsym_address();
    if address == 0 {
        return 0;
    }
    // SAFETY: `address` is glibc's dlsym, whose signature DlsymFn is.
    let dlsym: DlsymFn = unsafe { std::mem::transmute::<usize, DlsymFn>(address) };
    // SAFETY: `name` is NUL-terminated; the handle came from the loader or is special.
    unsafe { dlsym(handle, name.as_ptr()) as usize }
}

/// The real address of `sym`, looked up on first use. A symbol that was
/// not found is searched for again only after a library has loaded since:
/// the steady-state path never searches, and never takes the loader lock.
#[inline]
pub(crate) fn real(sym: Sym) -> Option<usize> {
    match REAL[sym as usize].load(Ordering::Acquire) {
        0 => resolve(sym),
        address => Some(address),
    }
}

/// The real address of `sym` if it was found already, without searching.
#[inline]
pub(crate) fn real_if_known(sym: Sym) -> Option<usize> {
    Some(REAL[sym as usize].load(Ordering::Acquire)).filter(|&address| address != 0)
}

/// The real implementation of `sym` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the function pointer type of `sym`'s C signature.
#[inline]
pub(crate) unsafe fn real_fn<F: Copy>(sym: Sym) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
    // SAFETY: the caller names the right signature; addresses are code addresses.
    real(sym).map(|address| unsafe { std::mem::transmute_copy::<usize, F>(&address) })
}

/// Looks `sym` up, on a spare stack: the loader's `dlopen` and `dlsym` are
/// deep, and a hook's first call may run on a small stack (a signal
/// handler's alternate stack, or a thread's of a few KiB).
#[cold]
#[inline(never)]
fn resolve(sym: Sym) -> Option<usize> {
    // The loader reads files (cancellation points): a pending cancellation
    // of the thread waits for the program's own.
    crate::system::no_cancel::without_cancellation(|| spare_stack::deep(|| resolve_here(sym)))
}

fn resolve_here(sym: Sym) -> Option<usize> {
    let searched_at = loader::dlopen_count() + 1;
    if MISSING_SINCE[sym as usize].load(Ordering::Acquire) == searched_at {
        return None;
    }
    let found = look_up_real(sym);
    // A failed lookup leaves a dlerror() message the program never asked for.
    // SAFETY: dlerror has no preconditions.
    unsafe { libc::dlerror() };
    let Some(address) = found else {
        MISSING_SINCE[sym as usize].store(searched_at, Ordering::Release);
        return None;
    };
    match REAL[sym as usize].compare_exchange(0, address, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(address),
        Err(first) => Some(first),
    }
}

fn look_up_real(sym: Sym) -> Option<usize> {
    SEARCHES.fetch_add(1, Ordering::Relaxed);
    let name = sym.name();
    let usable = |address: usize| address != 0 && !is_own_address(address);
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
        // The library was loaded already; our `dlopen` added a reference,
        // which would keep it loaded after the program unloads it.
        // SAFETY: the handle our own dlopen returned, released once.
        unsafe { loader::release_handle(handle) };
        if usable(address) {
            return Some(address);
        }
    }
    // Last resort: whatever follows us in the global scope.
    // SAFETY: RTLD_NEXT is a special handle.
    Some(unsafe { real_dlsym(libc::RTLD_NEXT, name) }).filter(|&address| usable(address))
}

fn loaded_library(soname: &CStr) -> Option<*mut c_void> {
    loader::loaded_handle(soname)
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
pub(crate) fn driver_handle_known() -> bool {
    !DRIVER_HANDLE.load(Ordering::Acquire).is_null()
}

/// Remembers the handle the program opened a CUDA library with, and for
/// the driver, the address range of its image.
///
/// # Safety
/// `handle` must be a handle from `dlopen` (a glibc link map).
pub(crate) unsafe fn remember_handle(library: CudaLibrary, handle: *mut c_void) {
    let (slot, base_slot) = slots_of(library);
    // SAFETY: a link map's first field is the object's load base.
    let base = unsafe { *handle.cast::<usize>() };
    let known_base = base_slot.load(Ordering::Acquire);
    if known_base != 0 && known_base != base {
        // Unloaded and loaded again elsewhere: what was found in the old
        // image points nowhere now.
        forget_library(library);
        if library == CudaLibrary::Driver && !loader::object_loaded_at(known_base) {
            DRIVER_UNLOADS.fetch_add(1, Ordering::AcqRel);
        }
    }
    let _ = slot.compare_exchange(std::ptr::null_mut(), handle, Ordering::AcqRel, Ordering::Acquire);
    let _ = base_slot.compare_exchange(0, base, Ordering::AcqRel, Ordering::Acquire);
    if library == CudaLibrary::Driver && !DRIVER_RANGE.known() {
        // SAFETY: a link map's first field is the object's load base.
        let base = unsafe { *handle.cast::<usize>() };
        // SAFETY: the driver is loaded at that base.
        unsafe { DRIVER_RANGE.learn(base) };
    }
}

fn slots_of(library: CudaLibrary) -> (&'static AtomicPtr<c_void>, &'static AtomicUsize) {
    match library {
        CudaLibrary::Driver => (&DRIVER_HANDLE, &DRIVER_BASE),
        CudaLibrary::Runtime => (&RUNTIME_HANDLE, &RUNTIME_BASE),
    }
}

/// Forgets everything found in `library` (its handle, its address range,
/// the real addresses of its functions): it was unloaded, or loaded again
/// elsewhere. Its functions are looked up again on their next use.
pub(crate) fn forget_library(library: CudaLibrary) {
    let (slot, base_slot) = slots_of(library);
    slot.store(std::ptr::null_mut(), Ordering::Release);
    base_slot.store(0, Ordering::Release);
    for &sym in Sym::ALL.iter().filter(|sym| sym.library() == library) {
        REAL[sym as usize].store(0, Ordering::Release);
        MISSING_SINCE[sym as usize].store(0, Ordering::Release);
    }
    if library == CudaLibrary::Driver {
        DRIVER_RANGE.forget();
        DRIVER_GENERATION.fetch_add(1, Ordering::AcqRel);
    }
}

/// After the program unloaded a library: forgets each CUDA library of ours
/// that is no longer loaded where it was.
pub(crate) fn forget_unloaded_libraries() {
    for library in [CudaLibrary::Driver, CudaLibrary::Runtime] {
        let base = slots_of(library).1.load(Ordering::Acquire);
        if base != 0 && !loader::object_loaded_at(base) {
            forget_library(library);
            if library == CudaLibrary::Driver {
                DRIVER_UNLOADS.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

/// How many times the driver's addresses were forgotten: tables built from
/// them are built again when it moves.
pub(crate) fn driver_generation() -> u64 {
    DRIVER_GENERATION.load(Ordering::Acquire)
}

/// How many times the driver was found unloaded: everything it held (its
/// memory, streams, pools, contexts) went with it.
pub(crate) fn driver_unloads() -> u64 {
    DRIVER_UNLOADS.load(Ordering::Acquire)
}

/// Whether `address` lies in the driver's image (once its handle is known).
pub(crate) fn is_driver_address(address: usize) -> bool {
    DRIVER_RANGE.contains(address)
}

/// Whether `address` lies in this library's own image.
fn is_own_address(address: usize) -> bool {
    if !OWN_RANGE.known() {
        let mut info = std::mem::MaybeUninit::<libc::Dl_info>::uninit();
        // SAFETY: dladdr fills `info` for an address inside this library.
        if unsafe { libc::dladdr(is_own_address as *const c_void, info.as_mut_ptr()) } != 0 {
            // SAFETY: dladdr succeeded; dli_fbase is our load base.
            unsafe { OWN_RANGE.learn(info.assume_init().dli_fbase as usize) };
        }
    }
    OWN_RANGE.contains(address)
}

/// Takes `address`, found by the program through a door of its own, as the
/// real `sym`. Returns false if a different real `sym` is already in use
/// (two copies of a library): the caller then must not hand out our hook.
pub(crate) fn adopt_real(sym: Sym, address: usize) -> bool {
    match REAL[sym as usize].compare_exchange(0, address, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(current) => current == address,
    }
}

/// Looks every driver symbol up once, so that [`real_if_known`] answers
/// for all of them (the `cuGetProcAddress` door compares against them).
pub(crate) fn resolve_all_driver_symbols() {
    for &sym in Sym::ALL {
        if sym.library() == CudaLibrary::Driver {
            let _ = real(sym);
        }
    }
}

/// The address range of a loaded ELF image, learnt from the program
/// headers mapped at its load base.
struct ImageRange {
    start: AtomicUsize,
    end: AtomicUsize,
}

impl ImageRange {
    const fn new() -> ImageRange {
        ImageRange {
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
        }
    }

    fn known(&self) -> bool {
        self.start.load(Ordering::Acquire) != 0
    }

    fn forget(&self) {
        self.start.store(0, Ordering::Release);
        self.end.store(0, Ordering::Release);
    }

    fn contains(&self, address: usize) -> bool {
        let start = self.start.load(Ordering::Acquire);
        start != 0 && address >= start && address < self.end.load(Ordering::Acquire)
    }

    /// # Safety
    /// `base` must be the load base of a loaded shared object.
    unsafe fn learn(&self, base: usize) {
        if base == 0 {
            return;
        }
        // SAFETY: a shared object's ELF header and program headers are mapped
        // at its load base; the magic is checked first.
        unsafe {
            let header = &*(base as *const libc::Elf64_Ehdr);
            if header.e_ident[..4] != *b"\x7fELF" {
                return;
            }
            let program_headers = std::slice::from_raw_parts(
                (base + header.e_phoff as usize) as *const libc::Elf64_Phdr,
                header.e_phnum as usize,
            );
            let loads = program_headers.iter().filter(|ph| ph.p_type == libc::PT_LOAD);
            let start = loads.clone().map(|ph| ph.p_vaddr as usize).min().unwrap_or(0);
            let end = loads.map(|ph| (ph.p_vaddr + ph.p_memsz) as usize).max().unwrap_or(0);
            if end > start {
                self.end.store(base + end, Ordering::Release);
                self.start.store(base + start, Ordering::Release);
            }
        }
    }
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
        assert_eq!(Sym::hooked_by_name(b"cuDeviceGetUuid_v2"), None);
        // The memory queries are hooked, for the memory limit alone.
        assert_eq!(Sym::hooked_by_name(b"cuMemGetInfo_v2"), Some(Sym::cuMemGetInfo_v2));
        assert!(Sym::cuDeviceTotalMem.is_limit_query() && !Sym::cuMemAlloc_v2.is_limit_query());
        assert_eq!(Sym::hooked_by_name(b"cuMemcpy"), None);
        assert_eq!(Sym::cudaFree.library(), CudaLibrary::Runtime);
        assert_eq!(Sym::cuGetProcAddress_v2.library(), CudaLibrary::Driver);
        assert!(!Sym::cuCtxGetDevice.is_hooked());
        assert!(Sym::cuMemFree.is_hooked());
    }

    #[test]
    fn a_missing_function_is_searched_for_again_only_after_a_library_loads() {
        // No CUDA library is loaded in the test process.
        let searches = || SEARCHES.load(Ordering::Relaxed);
        let before = searches();
        assert_eq!(real(Sym::cuStreamGetDevice), None);
        assert_eq!(real(Sym::cuStreamGetDevice), None);
        assert_eq!(real(Sym::cuStreamGetDevice), None);
        assert_eq!(searches() - before, 1);
        loader::note_dlopen();
        assert_eq!(real(Sym::cuStreamGetDevice), None);
        assert_eq!(real(Sym::cuStreamGetDevice), None);
        assert_eq!(searches() - before, 2);
    }

    #[test]
    fn every_hooked_symbol_is_an_api_the_event_format_knows() {
        for &sym in Sym::ALL {
            let name = sym.name().to_str().unwrap();
            let not_an_event = name.starts_with("cuGetProcAddress") || name == "cuInit" || sym.is_limit_query();
            if sym.is_hooked() && !not_an_event {
                assert!(
                    cudatrace_events::Api::from_name(name).is_some(),
                    "{name} has no Api code"
                );
            }
        }
    }
}
