//! The `dlopen` door: counts each `dlopen`, so that the module map is
//! rebuilt at the next point where taking the loader lock is allowed (the
//! next `dlsym`, `cuGetProcAddress` or `cuInit`, and at exit).
//!
//! glibc resolves a relative name against the *caller's* RUNPATH and
//! `$ORIGIN` (pip's `nvidia/*` libraries load that way), and finds the
//! caller from `dlopen`'s return address. A wrapper would make us the
//! caller, so `dlopen` is a naked trampoline that tail-jumps into the real
//! one with the arguments and return address untouched. The price is that
//! we never run after it returns: the map is refreshed lazily instead.

use crate::system::loader;
use std::ffi::{c_char, c_int, c_void};

/// The exported `dlopen`. See the module documentation.
///
/// # Safety
/// Same contract as the C library's `dlopen`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {prepare}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        "2:",
        "xor eax, eax",
        "ret",
        prepare = sym prepare,
    )
}

/// Counts the call and returns the real `dlopen`'s address (0 if none).
extern "C" fn prepare() -> usize {
    loader::note_dlopen();
    loader::real_dlopen_address()
}

/// Rebuilds the module map and looks for Python if a `dlopen` happened
/// since the last look; once the driver was found unloaded (by the
/// `dlclose` door, or by a lookup that found it moved), records what it
/// held as freed (see `record::unloaded_driver`). For places outside
/// allocation hooks only.
pub(crate) fn catch_up() {
    // Reading modules and PyTorch's files calls cancellation points: a
    // pending cancellation of the thread waits for the program's own.
    crate::system::no_cancel::without_cancellation(catch_up_here);
}

fn catch_up_here() {
    if crate::stacks::module_map::refresh_if_stale() {
        crate::stacks::python_frames::resolve();
        crate::hooks::torch_allocator::resolve_if_loaded();
    }
    // After the module map: the frees it records carry the caller's stack,
    // which must never be walked with an unloaded object's tables.
    if crate::record::unloaded_driver::settle() {
        // The driver loaded again loads its kernels again.
        crate::hooks::launch::forget_parent();
    }
}
