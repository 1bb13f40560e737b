//! Saying "this process could not record" when there is no spool to say it
//! in (see `cudatrace_events::notices`).
//!
//! The descriptor comes from `cudatrace run`, inherited. It is the
//! program's as much as ours once inherited, so it is used only while it
//! still names the file it was opened on (device and inode, checked right
//! before the write): a program that closed it, or reused its number for a
//! file of its own, is never written to. One line, one `write`, appended:
//! lines of several processes never interleave.

use crate::sys::clock::monotonic_ns;
use cudatrace_events::notices::{parse_descriptor, Notice, NOTICE_ENV};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

static FD: AtomicI32 = AtomicI32::new(-1);
static DEVICE: AtomicU64 = AtomicU64::new(0);
static INODE: AtomicU64 = AtomicU64::new(0);
/// This process image has written its line (one is enough).
static SENT: AtomicBool = AtomicBool::new(false);

/// Reads the descriptor's description from the environment. Called from
/// the library constructor, before `main`.
pub fn settle_from_environment() {
    let Some((fd, device, inode)) = std::env::var(NOTICE_ENV).ok().as_deref().and_then(parse_descriptor) else {
        return;
    };
    DEVICE.store(device, Ordering::Relaxed);
    INODE.store(inode, Ordering::Relaxed);
    FD.store(fd, Ordering::Release);
}

/// Whether the run gave this process a way to say it could not record.
pub fn available() -> bool {
    FD.load(Ordering::Acquire) >= 0
}

/// The process's name, without opening a file (there may be no descriptor
/// free): `prctl(PR_GET_NAME)`.
fn process_name() -> String {
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL-terminated.
    if unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) } != 0 {
        return String::new();
    }
    let end = name.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&name[..end]).into_owned()
}

/// Tells the collector that this process image records nothing, and why:
/// `errno` of the failure (0 if none), `reason` in words. At most once per
/// process image; the caller's `errno` is kept.
pub fn could_not_record(errno: i32, reason: &str) {
    let fd = FD.load(Ordering::Acquire);
    if fd < 0 || SENT.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: the calling thread's errno.
    let saved_errno = unsafe { *libc::__errno_location() };
    // SAFETY: a zeroed stat buffer for fstat to fill.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only writes into `stat`.
    let ours = unsafe { libc::fstat(fd, &mut stat) } == 0
        && stat.st_dev == DEVICE.load(Ordering::Relaxed)
        && stat.st_ino == INODE.load(Ordering::Relaxed);
    if ours {
        // SAFETY: no preconditions.
        let (pid, ppid, uid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32, libc::getuid()) };
        let line = Notice {
            pid,
            ppid,
            uid,
            time_ns: monotonic_ns(),
            errno,
            name: process_name(),
            reason: reason.to_string(),
        }
        .to_line();
        // SAFETY: writing a buffer we own through the descriptor just checked.
        unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
    }
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Called in a forked child: a new process, which may have its own line to write.
pub fn forget_parent() {
    SENT.store(false, Ordering::Release);
}
