//! The spool file's descriptor, and the file it must still be.
//!
//! A descriptor number is not ours for ever: programs close every
//! descriptor up to 1023 (or call `closefrom`), then open files of their
//! own, which get the old numbers. Writing through the number after that
//! would write into the program's file. So the file's device and inode are
//! kept from when it was created, and before anything is done through the
//! descriptor (growing the file, mapping a chunk of it) they are compared
//! with what the descriptor names now. When it names something else, the
//! spool is opened again by its path, and used only if it is the same file;
//! else nothing more is stored, and the records are counted as dropped.
//! The program's descriptor is never closed or touched.

use crate::system::thread::last_errno;
use std::ffi::CString;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};

static FD: AtomicI32 = AtomicI32::new(-1);
static DEVICE: AtomicU64 = AtomicU64::new(0);
static INODE: AtomicU64 = AtomicU64::new(0);
/// The spool's path, leaked (a few bytes a process image): read while
/// other threads may be storing records, never freed.
static PATH: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat buffer for fstat to fill.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only writes into `stat`.
    (unsafe { libc::fstat(fd, &mut stat) } == 0).then_some((stat.st_dev, stat.st_ino))
}

/// Maps the header page of the spool file open on `fd`, shared and
/// writable; `None` when it cannot be mapped. The caller unmaps it (or
/// keeps it for the process's life).
pub(crate) fn map_header(fd: i32) -> Option<*mut cudatrace_events::SpoolHeader> {
    // SAFETY: a shared mapping of the file's first page, through a
    // descriptor the caller holds; nothing of anyone else's is touched.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            cudatrace_events::layout::HEADER_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    (page != libc::MAP_FAILED).then(|| page.cast())
}

/// Takes `fd`, just created at `path`, as the spool. `false` if it cannot
/// be identified (then it is not used).
pub(crate) fn adopt(fd: i32, path: CString) -> bool {
    let Some((device, inode)) = identity(fd) else {
        return false;
    };
    DEVICE.store(device, Ordering::Relaxed);
    INODE.store(inode, Ordering::Relaxed);
    PATH.store(path.into_raw(), Ordering::Release);
    FD.store(fd, Ordering::Release);
    true
}

/// The descriptor, checked to name the spool file still, or the spool
/// opened again; the errno to count drops under otherwise. Called before
/// each growth of the file, under the spool's growth lock.
pub(crate) fn checked() -> Result<i32, i32> {
    let fd = FD.load(Ordering::Acquire);
    if fd < 0 {
        return Err(libc::EBADF);
    }
    let saved = (DEVICE.load(Ordering::Relaxed), INODE.load(Ordering::Relaxed));
    if identity(fd) == Some(saved) {
        return Ok(fd);
    }
    // The program closed our descriptor (and may have reused the number):
    // the number is the program's now, and is left alone.
    let path = PATH.load(Ordering::Acquire);
    if path.is_null() {
        return Err(libc::EBADF);
    }
    // SAFETY: a NUL-terminated path, leaked and never freed.
    let reopened = unsafe { libc::open(path, libc::O_RDWR | libc::O_CLOEXEC) };
    if reopened < 0 {
        return Err(last_errno());
    }
    if identity(reopened) != Some(saved) {
        // Another file at the spool's path: not ours to write.
        // SAFETY: closing the descriptor this function just opened.
        unsafe { libc::close(reopened) };
        return Err(libc::ESTALE);
    }
    FD.store(reopened, Ordering::Release);
    Ok(reopened)
}

/// In a forked child: the inherited descriptor is the parent's spool.
/// Closes it only if it still names that file (never a descriptor the
/// program reused), and forgets it.
pub(crate) fn forget_parent() {
    let fd = FD.swap(-1, Ordering::AcqRel);
    let saved = (DEVICE.load(Ordering::Relaxed), INODE.load(Ordering::Relaxed));
    if fd >= 0 && identity(fd) == Some(saved) {
        // SAFETY: the child's copy of the parent's spool descriptor.
        unsafe { libc::close(fd) };
    }
    PATH.store(std::ptr::null_mut(), Ordering::Release);
}
