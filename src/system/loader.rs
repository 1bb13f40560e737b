//! The dynamic loader's activity as far as the hooks need it: how many
//! `dlopen` calls were started. The `dlopen` door counts them; the module
//! map is rebuilt, and CUDA entry points that were missing are looked up
//! again, only once the count has moved.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

static DLOPENS: AtomicU64 = AtomicU64::new(0);

/// Counts a `dlopen` (called by the `dlopen` door before the real one runs).
#[inline]
pub(crate) fn note_dlopen() {
    DLOPENS.fetch_add(1, Ordering::SeqCst);
}

/// `dlopen` calls started so far.
#[inline]
pub(crate) fn dlopen_count() -> u64 {
    DLOPENS.load(Ordering::SeqCst)
}

static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);

/// Address of the C library's `dlopen`, found with `dlvsym` so that the
/// library's own `dlopen` (the door, which counts calls) is skipped; 0 if
/// none is found.
pub(crate) fn real_dlopen_address() -> usize {
    glibc_function(c"dlopen", &REAL_DLOPEN)
}

/// The C library's own `name` (a loader function this library also
/// exports), found with `dlvsym` past this library and cached in `cache`; 0
/// if none is found. Resolved on first use: another library's constructor
/// may call it before ours has run.
pub(crate) fn glibc_function(name: &std::ffi::CStr, cache: &AtomicUsize) -> usize {
    let cached = cache.load(Ordering::Acquire);
    if cached != 0 {
        return cached;
    }
    let found = [c"GLIBC_2.34", c"GLIBC_2.2.5"]
        .iter()
        // SAFETY: NUL-terminated names; RTLD_NEXT searches the libraries after ours.
        .map(|version| unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), version.as_ptr()) } as usize)
        .find(|&address| address != 0)
        .unwrap_or(0);
    cache.store(found, Ordering::Release);
    found
}

/// The next definition of `name` after this library (whatever its symbol
/// version), cached in `cache`; 0 if none. For C library functions this
/// library also defines (`fork`, the `exec` family): resolve them from the
/// constructor, since the program may call them from a signal handler,
/// where a lookup (which may allocate) is not safe; a call before the
/// constructor ran looks it up then.
pub(crate) fn next_function(name: &std::ffi::CStr, cache: &AtomicUsize) -> usize {
    let cached = cache.load(Ordering::Acquire);
    if cached != 0 {
        return cached;
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT searches the libraries after ours.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    cache.store(found, Ordering::Release);
    found
}

static REAL_DLCLOSE: AtomicUsize = AtomicUsize::new(0);

/// Address of the C library's `dlclose`, past this library's own (the
/// door that notices unloaded libraries); 0 if none is found.
pub(crate) fn real_dlclose_address() -> usize {
    glibc_function(c"dlclose", &REAL_DLCLOSE)
}

/// Gives back a reference this library took with `dlopen`, through the C
/// library's `dlclose` (not the door).
///
/// # Safety
/// `handle` must come from a `dlopen` of ours, released once.
pub(crate) unsafe fn release_handle(handle: *mut std::ffi::c_void) {
    type DlcloseFn = unsafe extern "C" fn(*mut std::ffi::c_void) -> std::ffi::c_int;
    let address = real_dlclose_address();
    if address != 0 {
        // SAFETY: `address` is glibc's dlclose, whose signature DlcloseFn is.
        let dlclose: DlcloseFn = unsafe { std::mem::transmute::<usize, DlcloseFn>(address) };
        // SAFETY: the caller's handle, from dlopen.
        unsafe { dlclose(handle) };
    }
}

/// Objects unloaded since the process started, as the loader counts them
/// (`dlpi_subs`), read under the loader's lock.
pub(crate) fn unloads_so_far() -> u64 {
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, _size: usize, data: *mut std::ffi::c_void) -> i32 {
        // SAFETY: the loader passes a valid info; data is our u64.
        unsafe { *data.cast::<u64>() = (*info).dlpi_subs };
        1
    }
    let mut subs = 0u64;
    // SAFETY: the callback writes one u64 that outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut subs).cast()) };
    subs
}

/// Whether an object is loaded at load address `base`.
pub(crate) fn object_loaded_at(base: usize) -> bool {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut std::ffi::c_void) -> i32 {
        // SAFETY: the loader passes a valid info; data is our usize.
        unsafe { i32::from((*info).dlpi_addr as usize == *data.cast::<usize>()) }
    }
    let mut wanted = base;
    // SAFETY: the callback only reads what it is handed.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut wanted).cast()) != 0 }
}

/// The handle of `file` if it is loaded already, from the C library's
/// `dlopen` with `RTLD_NOLOAD`: our own lookups are not the program's
/// `dlopen` calls, and must not count as one.
pub(crate) fn loaded_handle(file: &std::ffi::CStr) -> Option<*mut std::ffi::c_void> {
    type DlopenFn = unsafe extern "C" fn(*const std::ffi::c_char, std::ffi::c_int) -> *mut std::ffi::c_void;
    let address = real_dlopen_address();
    if address == 0 {
        return None;
    }
    // SAFETY: `address` is glibc's dlopen, whose signature DlopenFn is.
    let dlopen: DlopenFn = unsafe { std::mem::transmute::<usize, DlopenFn>(address) };
    // SAFETY: a NUL-terminated name; RTLD_NOLOAD only returns a library already loaded.
    let handle = unsafe { dlopen(file.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    (!handle.is_null()).then_some(handle)
}
