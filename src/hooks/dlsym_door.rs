//! The `dlsym` door. libcudart, JAX/XLA and others `dlopen("libcuda.so.1")`
//! and look entry points up on that handle, which plain symbol interposition
//! never sees. We export `dlsym` and hand out our hooks for the names we hook,
//! looked up on a CUDA library's handle or `RTLD_DEFAULT`.
//!
//! Everything else must behave exactly as if we were not there, including
//! `RTLD_NEXT`, which glibc resolves relative to the *caller's* return
//! address. A C-ABI wrapper would make us the caller, so `dlsym` is a naked
//! trampoline: it asks [`decide`] what to do and then either returns an
//! answer or tail-jumps into the real `dlsym` with the original arguments and
//! return address untouched.

use crate::hooks::{dlopen_door, table};
use crate::system::symbols::{self, CudaLibrary, Sym};
use crate::system::tracing_switch::tracing_on;
use std::ffi::{c_char, c_void, CStr};

/// What the trampoline does: return `value`, or jump to the real `dlsym`
/// (whose address is then `value`) when `forward` is non-zero.
#[repr(C)]
struct Decision {
    value: usize,
    forward: usize,
}

/// The exported `dlsym`. See the module documentation.
///
/// # Safety
/// Same contract as the C library's `dlsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        // Keep the arguments, realign the stack, pass our return address as the third argument.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "mov rdx, [rsp + 24]",
        "call {decide}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rdx, rdx",
        "jnz 2f",
        "ret",
        "2:",
        "jmp rax",
        decide = sym decide,
    )
}

#[cfg(not(target_arch = "x86_64"))]
compile_error!("the dlsym trampoline is written for x86-64 only");

extern "C" fn decide(handle: *mut c_void, symbol: *const c_char, caller: usize) -> Decision {
    let real = symbols::real_dlsym_address();
    let forward = Decision {
        value: real,
        forward: 1,
    };
    if real == 0 {
        // Without the real dlsym there is nothing to forward to.
        return Decision { value: 0, forward: 0 };
    }
    if !tracing_on() {
        return forward;
    }
    let _ = std::panic::catch_unwind(dlopen_door::catch_up);
    if handle == libc::RTLD_NEXT || symbol.is_null() {
        return forward;
    }
    // SAFETY: dlsym's contract: a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if !name.starts_with(b"cu") {
        return forward;
    }
    let Some(sym) = table::actively_hooked_by_name(name) else {
        return forward;
    };
    match std::panic::catch_unwind(|| redirect(handle, sym, caller)) {
        Ok(Some(value)) => Decision { value, forward: 0 },
        _ => forward,
    }
}

/// The answer for a hooked name, or `None` to pass the lookup through.
fn redirect(handle: *mut c_void, sym: Sym, caller: usize) -> Option<usize> {
    let library = if handle.is_null() {
        None
    } else {
        Some(cuda_library_of_handle(handle)?)
    };
    if let Some(library) = library {
        // Remembering the driver's handle also learns its address range, which
        // the caller check below needs even on the driver's very first lookup.
        // SAFETY: a CUDA library's link map, checked above.
        unsafe { symbols::remember_handle(library, handle) };
    }
    if symbols::is_driver_address(caller) {
        return None;
    }
    let hook = table::hook_address(sym)?;
    // SAFETY: the program's own handle, passed on as it gave it.
    let found = unsafe { symbols::real_dlsym(handle, sym.name()) };
    if found == 0 {
        return Some(0);
    }
    if found == hook {
        // RTLD_DEFAULT found our own export. Without us the program would get
        // the real one, or nothing if no CUDA library defines the name.
        return Some(if symbols::real(sym).is_some() { hook } else { 0 });
    }
    Some(if symbols::adopt_real(sym, found) { hook } else { found })
}

/// glibc's public `struct link_map`; a `dlopen` handle points at one.
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
    l_ld: *mut c_void,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

/// Which CUDA library a `dlopen` handle refers to, read from its link map
/// without taking the loader lock.
fn cuda_library_of_handle(handle: *mut c_void) -> Option<CudaLibrary> {
    // SAFETY: glibc handles are link maps; l_name is a NUL-terminated path.
    let name = unsafe {
        let map = &*handle.cast::<LinkMap>();
        if map.l_name.is_null() {
            return None;
        }
        CStr::from_ptr(map.l_name)
    };
    let file_name = name.to_bytes().rsplit(|&b| b == b'/').next().unwrap_or_default();
    if file_name.starts_with(b"libcudart.so") {
        Some(CudaLibrary::Runtime)
    } else if file_name.starts_with(b"libcuda.so") {
        Some(CudaLibrary::Driver)
    } else {
        None
    }
}
