//! The library's settings (`cudatrace_events::settings`), read from the
//! environment once, when it loads, into one [`Settings`] value that every
//! layer reads without a lock or an allocation.
//!
//! They are read with `libc::getenv`, which takes no lock and copies
//! nothing. A few variables are read later than load, at the moment they
//! matter, as they always were (each place says why): the tree's own
//! variables when a spool is made (`spool::tree_root`), and the host name
//! for a spool's header (`system::process_place`), which may be made inside a
//! hook or a signal handler, and so is read through [`value`] too.

use cudatrace_events::settings::{Settings, Variable};
use std::ffi::CStr;
use std::sync::OnceLock;

/// The settings read at load; unset only before the constructor has run.
static LOADED: OnceLock<Settings> = OnceLock::new();

/// `variable`'s value in the environment now, as bytes; `None` when unset.
///
/// # Safety
/// The bytes belong to the environment: the caller uses them before
/// anything (this process's other threads included) can change it.
pub(crate) unsafe fn value(variable: &Variable) -> Option<&'static [u8]> {
    // SAFETY: a NUL-terminated name; getenv returns null or a
    // NUL-terminated string, read here without allocating.
    let found = unsafe { libc::getenv(variable.c_name.as_ptr()) };
    // SAFETY: non-null, NUL-terminated (above); valid as long as the caller
    // promised.
    (!found.is_null()).then(|| unsafe { CStr::from_ptr(found) }.to_bytes())
}

/// Reads every setting. Called once, from the library constructor (before
/// `main`, or while `dlopen` loads it); a forked child keeps its parent's,
/// and an `exec` loads the library, and so reads them, again.
pub(crate) fn load() -> &'static Settings {
    // SAFETY: each value is parsed before the next is looked up, in the
    // constructor: before `main`, where no other thread runs, or inside
    // `dlopen`, where a thread of the program changing its environment at
    // that moment would race with any `getenv`, the program's own too.
    let settings = Settings::read(|variable| unsafe { value(variable) });
    LOADED.get_or_init(|| settings)
}

/// The settings read at load (every default before then): one atomic load.
#[inline]
pub(crate) fn settings() -> &'static Settings {
    LOADED.get().unwrap_or(&Settings::DEFAULT)
}
