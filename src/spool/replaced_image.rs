//! Telling the spool of the image this one replaced that it was replaced.
//!
//! An image that calls a function of the `exec` family marks its spool
//! header "exec under way" itself (see `hooks::exec`). One that makes the
//! raw system call (`syscall(SYS_execve, ...)`, `SYS_execveat`, or the C
//! library's `execveat`, which calls it directly) goes unseen, and its
//! spool would look like an image that died: the collector would give it
//! the exit status of whatever replaced it. So every image, as the library
//! loads, looks for a spool of an earlier image of its own process (the
//! same pid and the same process start time) that neither exited nor said
//! it exec'd, and marks it: exec'd, into this image's `/proc/self/exe`.
//!
//! The look costs a few failed `access` calls in a process whose pid has
//! no spool, which is nearly every process.

use crate::spool::{spool_descriptor, tree_root};
use crate::system::process_start::process_start_ticks;
use cudatrace_events::layout::{EXEC_INTO_CAPACITY, HEADER_SIZE, SPOOL_MAGIC, SPOOL_VERSION};
use cudatrace_events::{naming, SpoolHeader};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Image numbers looked for past the last one found: spools of earlier
/// images may already be collected and gone.
const MISSES_BEFORE_GIVING_UP: u32 = 4;

/// This image's pid (high half) and the image number after the last spool
/// of its pid found when it loaded (low half): its own spool's number is
/// never below, so that image numbers of one process only grow, even once
/// the spools of its earlier images are collected and gone.
static FIRST_FREE_IMAGE: AtomicU64 = AtomicU64::new(0);

/// The lowest image number a spool of process `pid` may take (0 unless
/// this image found spools of its pid when it loaded; a forked child,
/// another pid, starts from 0).
pub(crate) fn first_free_image(pid: u32) -> u32 {
    let packed = FIRST_FREE_IMAGE.load(Ordering::Acquire);
    if (packed >> 32) as u32 == pid {
        packed as u32
    } else {
        0
    }
}

/// Marks the spool of the image this process replaced, if there is one
/// that does not say so yet. Called once, as the library loads.
pub(crate) fn mark_the_image_replaced() {
    let Some(directory) = tree_root::spool_dir() else {
        return;
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut latest = None;
    let mut misses = 0;
    let mut image = 0;
    while misses < MISSES_BEFORE_GIVING_UP && image < 1000 {
        let path = directory.join(naming::spool_file_name(pid, image));
        let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
            return;
        };
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::access(c_path.as_ptr(), libc::F_OK) } == 0 {
            latest = Some((image, c_path));
            misses = 0;
        } else {
            misses += 1;
        }
        image += 1;
    }
    if let Some((image, path)) = latest {
        FIRST_FREE_IMAGE.store(u64::from(pid) << 32 | u64::from(image + 1), Ordering::Release);
        mark(&path, pid);
    }
}

fn mark(path: &std::ffi::CStr, pid: u32) {
    // SAFETY: a NUL-terminated path; the descriptor is ours, closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW) };
    if fd < 0 {
        return;
    }
    // SAFETY: an out-value the kernel fills.
    let mut status: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: our own descriptor and a valid out-pointer.
    let whole = unsafe { libc::fstat(fd, &mut status) } == 0
        && status.st_mode & libc::S_IFMT == libc::S_IFREG
        // SAFETY: no preconditions.
        && status.st_uid == unsafe { libc::geteuid() }
        && status.st_size >= HEADER_SIZE as i64;
    if let Some(header) = whole.then(|| spool_descriptor::map_header(fd)).flatten() {
        // SAFETY: a header page of HEADER_SIZE bytes, mapped; the fields
        // another process writes are read and written atomically.
        unsafe { mark_header(header, pid) };
        // SAFETY: our own mapping.
        unsafe { libc::munmap(header.cast(), HEADER_SIZE) };
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
}

/// # Safety
/// `header` must point at a mapped spool header page.
unsafe fn mark_header(header: *mut SpoolHeader, pid: u32) {
    // SAFETY: the caller's mapped page; plain fields are written once, when
    // the spool is made, before the magic is published.
    let h = unsafe { &mut *header };
    let magic = u64::from_le_bytes(SPOOL_MAGIC);
    // SAFETY: the magic is 8-byte aligned at the page's start.
    let published =
        unsafe { std::sync::atomic::AtomicU64::from_ptr((&raw mut h.magic).cast()) }.load(Ordering::Acquire);
    // SAFETY: aligned u32 fields of the mapped page.
    let (exited, exec_started) = unsafe {
        (
            AtomicU32::from_ptr(&raw mut h.exit_recorded).load(Ordering::Acquire),
            AtomicU32::from_ptr(&raw mut h.exec_started).load(Ordering::Acquire),
        )
    };
    let ticks = process_start_ticks();
    if published != magic || h.version != SPOOL_VERSION || h.pid != pid || exited != 0 {
        return;
    }
    // A spool of a dead process that had this pid before: not ours.
    if ticks == 0 || h.process_start_ticks != ticks {
        return;
    }
    // SAFETY: as above.
    let into_len = unsafe { AtomicU32::from_ptr(&raw mut h.exec_into_len) };
    if exec_started == 0 || into_len.load(Ordering::Acquire) == 0 {
        let mut exe = [0u8; EXEC_INTO_CAPACITY];
        // SAFETY: a NUL-terminated path and our own buffer, within its length.
        let len = unsafe { libc::readlink(c"/proc/self/exe".as_ptr(), exe.as_mut_ptr().cast(), exe.len()) };
        if len > 0 {
            let len = len as usize;
            h.exec_into[..len].copy_from_slice(&exe[..len]);
            into_len.store(len as u32, Ordering::Release);
        }
    }
    // SAFETY: as above.
    unsafe { AtomicU32::from_ptr(&raw mut h.exec_started) }.store(1, Ordering::Release);
}
