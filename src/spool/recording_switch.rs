//! The job's recording switch: `cudatrace pause` and `cudatrace resume`
//! write one word in a file of the spool folder
//! (`cudatrace_events::recording_switch`), and every event reads it.
//!
//! The page is mapped when this process creates its spool, a point where
//! system calls are fine; from then on, reading the switch is one load from
//! shared memory, with no system call. A forked child keeps its parent's
//! mapping (the same folder, the same switch); an `exec` maps it again.
//! When the file cannot be opened or made, the process records as if the
//! switch were on, and nothing else changes.

use cudatrace_events::recording_switch::{self as layout, SwitchState};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// The mapped page, or null before this process has a spool.
#[unsafe(link_section = "cudatrace_hot")]
static PAGE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

/// `CUDATRACE_START_PAUSED=1`: a switch file this process makes starts paused.
static START_PAUSED: AtomicBool = AtomicBool::new(false);

/// Keeps `CUDATRACE_START_PAUSED` (from the library constructor).
pub(crate) fn configure(start_paused: bool) {
    if start_paused {
        START_PAUSED.store(true, Ordering::Relaxed);
    }
}

/// The switch's state word (0, recording as set up, before a spool exists).
#[inline]
pub(crate) fn state_word() -> u64 {
    let page = PAGE.load(Ordering::Relaxed);
    if page.is_null() {
        return 0;
    }
    // SAFETY: `page` is a live shared mapping of `PAGE_SIZE` bytes, never
    // unmapped, and the word at `STATE_OFFSET` is 8-byte aligned.
    let word = unsafe { &*page.add(layout::STATE_OFFSET).cast::<AtomicU64>() };
    word.load(Ordering::Relaxed)
}

/// Whether events are recorded without stacks now.
#[inline]
pub(crate) fn paused() -> bool {
    state_word() & 1 != 0
}

/// A stack setting that replaces the job's own: its code (as
/// `StackSetting`), or `None`.
#[inline]
pub(crate) fn stack_setting() -> Option<u8> {
    match (state_word() >> 8) & 0xff {
        0 => None,
        code @ 1..=4 => Some(code as u8 - 1),
        _ => None,
    }
}

/// Maps the switch of the spool folder `dir`, making the file if no
/// process of the job has yet. Called when this process creates its spool;
/// a process that already has it mapped (a forked child) keeps it.
pub(crate) fn map(dir: &Path) {
    if !PAGE.load(Ordering::Acquire).is_null() {
        return;
    }
    let path = dir.join(layout::FILE_NAME);
    let file = match open(&path) {
        Some(file) => file,
        None => {
            make(dir);
            match open(&path) {
                Some(file) => file,
                None => return,
            }
        }
    };
    let long_enough = file.metadata().is_ok_and(|m| m.len() >= layout::PAGE_SIZE as u64);
    if !long_enough {
        return;
    }
    // SAFETY: a read-only shared mapping of the file's first page, which
    // exists; the mapping outlives the descriptor.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            layout::PAGE_SIZE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if page == libc::MAP_FAILED {
        return;
    }
    // SAFETY: the page was just mapped, readable, `PAGE_SIZE` bytes long.
    let magic = unsafe { std::slice::from_raw_parts(page.cast::<u8>(), 8) };
    if magic != layout::MAGIC {
        // SAFETY: unmapping the page mapped above, which nothing else uses.
        unsafe { libc::munmap(page, layout::PAGE_SIZE) };
        return;
    }
    if PAGE
        .compare_exchange(std::ptr::null_mut(), page.cast(), Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // SAFETY: another thread mapped it first; this copy is unused.
        unsafe { libc::munmap(page, layout::PAGE_SIZE) };
    }
}

fn open(path: &Path) -> Option<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()
}

/// Makes the file (`layout::make`), paused if this process was started
/// so; when another process made it first, its file stays. A failure is
/// left to the open that follows.
fn make(dir: &Path) {
    let paused = START_PAUSED.load(Ordering::Relaxed);
    // The clock is read only for the log entry of a paused start.
    let now = if paused {
        crate::system::clock::monotonic_ns()
    } else {
        0
    };
    let _ = layout::make(dir, SwitchState { paused, stacks: None }, now);
}
