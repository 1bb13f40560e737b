//! The `dlclose` door. Launchers and health checks load the driver, probe
//! the GPU and unload it; a program may load it again later, often at
//! another address. Everything found in an unloaded library (its handle,
//! the real addresses of its functions, its place in the module map) must
//! be forgotten, or the next hook would call into memory that is gone, or
//! hand out the new driver's functions unhooked.
//!
//! Memory the driver held when it unloaded went with it: it is recorded
//! freed there (see `record::unloaded_driver`).
//!
//! `dlclose` does not depend on its caller (unlike `dlopen` and `dlsym`),
//! so this is a plain wrapper: it calls the C library's `dlclose`, and when
//! the loader's count of unloaded objects moved, it forgets what was
//! unloaded and rebuilds the module map.

use crate::hooks::dlopen_door;
use crate::system::loader;
use crate::system::symbols;
use crate::system::tracing_switch::{keeping_errno, tracing_on};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

/// The loader's count of unloaded objects when this door last looked.
static UNLOADS_SEEN: AtomicU64 = AtomicU64::new(0);

/// The exported `dlclose`.
///
/// # Safety
/// Same contract as the C library's `dlclose`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;
    let address = loader::real_dlclose_address();
    if address == 0 {
        return -1;
    }
    // SAFETY: `address` is glibc's dlclose, whose signature DlcloseFn is.
    let real: DlcloseFn = unsafe { std::mem::transmute::<usize, DlcloseFn>(address) };
    // SAFETY: forwarding the caller's handle unchanged.
    let result = unsafe { real(handle) };
    if tracing_on() {
        keeping_errno(|| {
            let _ = std::panic::catch_unwind(after_dlclose);
        });
    }
    result
}

/// Forgets what the loader unloaded, if it unloaded anything.
fn after_dlclose() {
    let unloads = loader::unloads_so_far();
    if UNLOADS_SEEN.swap(unloads, Ordering::AcqRel) == unloads {
        return;
    }
    symbols::forget_unloaded_libraries();
    // A change of the loaded set, as a `dlopen` is: the module map is built
    // again now (a walk must never read an unloaded object's unwinding
    // tables), and symbols missing before are looked up again. If the
    // driver was unloaded, what it held is recorded freed there, before the
    // driver loaded again hands its addresses out again.
    loader::note_dlopen();
    dlopen_door::catch_up();
    // Lookups that failed in there (Python's functions, in a program
    // without Python) left a message the program's next `dlerror` would
    // read: the program's successful `dlclose` left none.
    // SAFETY: dlerror has no preconditions.
    unsafe { libc::dlerror() };
}
