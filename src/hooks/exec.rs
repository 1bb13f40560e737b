//! The `exec` family: an image that replaces itself does not exit, so its
//! spool says so. Just before the real call the spool header is marked
//! "exec under way"; if the call returns (it failed), the mark is taken
//! back. The collector then never gives an image that exec'd the exit
//! status of the image that replaced it.
//!
//! `execl`, `execlp` and `execle` take variable arguments, which stable Rust
//! cannot define: `exec_variadic.c` gathers their arguments and calls the
//! `execv`, `execvp` and `execve` here. `posix_spawn` and `vfork` do not
//! replace the calling image and are left alone.

use crate::record::memory_limit;
use crate::spool::writer;
use crate::system::loader::next_function;
use crate::system::tracing_switch::guarded;
use std::ffi::{c_char, c_int};
use std::sync::atomic::AtomicUsize;

type ExecveFn = unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
type FexecveFn = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;

static REAL_EXECVE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECV: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVP: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVPE: AtomicUsize = AtomicUsize::new(0);
static REAL_FEXECVE: AtomicUsize = AtomicUsize::new(0);

/// Finds the C library's exec functions, from the library constructor: an
/// exec may come from a signal handler or a `vfork` child.
pub(crate) fn resolve() {
    for (name, cache) in [
        (c"execve", &REAL_EXECVE),
        (c"execv", &REAL_EXECV),
        (c"execvp", &REAL_EXECVP),
        (c"execvpe", &REAL_EXECVPE),
        (c"fexecve", &REAL_FEXECVE),
    ] {
        next_function(name, cache);
    }
}

/// Runs the real call between the mark and its withdrawal (each guarded,
/// like every hook's bookkeeping), keeping the call's `errno`. With no real function, fails as the C library would.
/// `path` is the file the call names (null for `fexecve`): the header keeps
/// it as what the image exec'd.
fn marked(real: usize, path: *const c_char, call: impl FnOnce(usize) -> c_int) -> c_int {
    if real == 0 {
        // SAFETY: the thread's errno.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    guarded(|| {
        // SAFETY: the exec family's contract: a NUL-terminated path, or null.
        let into = (!path.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(path) });
        writer::note_exec(true, into);
        memory_limit::retire_for_exec();
    });
    let result = call(real);
    // `guarded` keeps the call's errno across the withdrawal.
    guarded(|| {
        memory_limit::restore_after_failed_exec();
        writer::note_exec(false, None)
    });
    result
}

/// `execve`.
///
/// # Safety
/// As the C library's `execve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    marked(next_function(c"execve", &REAL_EXECVE), path, |real| {
        // SAFETY: the C library's execve, with the caller's arguments.
        unsafe { std::mem::transmute::<usize, ExecveFn>(real)(path, argv, envp) }
    })
}

/// `execv`.
///
/// # Safety
/// As the C library's `execv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    marked(next_function(c"execv", &REAL_EXECV), path, |real| {
        // SAFETY: the C library's execv, with the caller's arguments.
        unsafe { std::mem::transmute::<usize, ExecvFn>(real)(path, argv) }
    })
}

/// `execvp`.
///
/// # Safety
/// As the C library's `execvp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    marked(next_function(c"execvp", &REAL_EXECVP), file, |real| {
        // SAFETY: the C library's execvp, with the caller's arguments.
        unsafe { std::mem::transmute::<usize, ExecvFn>(real)(file, argv) }
    })
}

/// `execvpe`.
///
/// # Safety
/// As the C library's `execvpe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    marked(next_function(c"execvpe", &REAL_EXECVPE), file, |real| {
        // SAFETY: the C library's execvpe, with the caller's arguments.
        unsafe { std::mem::transmute::<usize, ExecveFn>(real)(file, argv, envp) }
    })
}

/// `fexecve`.
///
/// # Safety
/// As the C library's `fexecve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    marked(next_function(c"fexecve", &REAL_FEXECVE), std::ptr::null(), |real| {
        // SAFETY: the C library's fexecve, with the caller's arguments.
        unsafe { std::mem::transmute::<usize, FexecveFn>(real)(fd, argv, envp) }
    })
}
