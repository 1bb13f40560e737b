//! How much address space the library may take: all it wants, or, in a
//! process with a limit on its address space (`RLIMIT_AS`, `ulimit -v`),
//! as little as it can.
//!
//! The address space a process reserves counts against `RLIMIT_AS` whether
//! or not any memory backs it. The library's tables are reserved whole,
//! for the largest jobs (two million live allocations, a million call
//! stacks), and a small program under `ulimit -v` would find its own
//! `malloc` failing for the library's reservations. Under a limit below
//! 16 GiB, the
//! tables are made small (what does not fit is counted where it is lost:
//! allocations the live table has no room for, stacks not stored) and the
//! spool's ring of chunk places is kept short, so that the library takes a
//! few MiB in all.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set when the process has a tight limit on its address space.
static LEAN: AtomicBool = AtomicBool::new(false);

/// A limit under which the library keeps small. Above it (a generous limit,
/// as some schedulers set) the full tables (some 130 MB) and a ring reserved
/// as it is used fit with room to spare; a CUDA process itself reserves far
/// more.
const TIGHT_LIMIT: u64 = 16 << 30;

/// Reads the process's address-space limit. Called once, when the library
/// loads, before anything of ours is mapped.
pub(crate) fn configure() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    let limited = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } == 0 && limit.rlim_cur < TIGHT_LIMIT;
    LEAN.store(limited, Ordering::Relaxed);
}

/// Whether the library keeps its address space small (the process has a
/// limit on its own).
#[inline]
pub(crate) fn lean() -> bool {
    LEAN.load(Ordering::Relaxed)
}
