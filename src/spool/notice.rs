//! Saying "this process could not record" when there is no spool to say it
//! in. Two ways, tried in this order:
//!
//! - the run's notice file (see `cudatrace_events::notices`), under
//!   `cudatrace run`: its collector reads it to the end of the run, so it
//!   holds for any process of the tree, however late;
//! - without it, a forked child still has its parent's spool header mapped,
//!   shared, from before the fork: it claims one of the header's
//!   child-failure slots (`cudatrace_events::layout::ChildFailure`). This
//!   needs no descriptor, no permission on the spool folder and no
//!   `cudatrace run`, so it works in plain `LD_PRELOAD` trees, after
//!   `setuid`, and with every descriptor taken; it is read while the
//!   parent's spool is followed, so a child that fails after its parent's
//!   spool was read to its end goes unnamed.
//!
//! The notice descriptor comes from `cudatrace run`, inherited. It is the
//! program's as much as ours once inherited, so it is used only while it
//! still names the file it was opened on (device and inode, checked right
//! before the write): a program that closed it, or reused its number for a
//! file of its own, is never written to. One line, one `write`, appended:
//! lines of several processes never interleave.

use crate::system::clock::monotonic_ns;
use cudatrace_events::layout::{ChildFailure, HEADER_SIZE};
use cudatrace_events::notices::{NoSpool, Notice};
use cudatrace_events::SpoolHeader;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

static FD: AtomicI32 = AtomicI32::new(-1);
static DEVICE: AtomicU64 = AtomicU64::new(0);
static INODE: AtomicU64 = AtomicU64::new(0);
/// This process image has written its line (one is enough).
static SENT: AtomicBool = AtomicBool::new(false);
/// The header of the nearest forked-from process with a spool, while this
/// process has none of its own (null otherwise).
static PARENT_HEADER: AtomicPtr<SpoolHeader> = AtomicPtr::new(std::ptr::null_mut());

/// Keeps the descriptor's description, `(fd, device, inode)`, as
/// `CUDATRACE_NOTICE` gave it. Called from the library constructor, before
/// `main`.
pub(crate) fn settle(descriptor: Option<(i32, u64, u64)>) {
    let Some((fd, device, inode)) = descriptor else {
        return;
    };
    DEVICE.store(device, Ordering::Relaxed);
    INODE.store(inode, Ordering::Relaxed);
    FD.store(fd, Ordering::Release);
}

/// The process's name, NUL-padded, without opening a file (there may be no
/// descriptor free): `prctl(PR_GET_NAME)`.
fn process_name_bytes() -> [u8; 16] {
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL-terminated.
    if unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) } != 0 {
        return [0; 16];
    }
    let mut out = [0u8; 16];
    out.copy_from_slice(&name[..16]);
    out
}

/// The process's name, as text.
fn process_name() -> String {
    let name = process_name_bytes();
    let end = name.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&name[..end]).into_owned()
}

/// Tells the collector that this process image records nothing, and why:
/// `errno` of the failure (0 if none), `reason`, the spool folder if it
/// has one. At most once per process image; the caller's `errno` is kept.
pub(crate) fn could_not_record(errno: i32, reason: NoSpool, folder: Option<&Path>) {
    if SENT.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: the calling thread's errno.
    let saved_errno = unsafe { *libc::__errno_location() };
    // The run's notice file first: the collector reads it to the end of the
    // run, while a parent's header is read only as long as its collector
    // follows that spool (a child may outlive its parent, or fail after the
    // parent exec'd), and has sixteen slots.
    if !tell_notice_file(errno, &reason.to_field(folder.unwrap_or(Path::new("")))) {
        tell_parent(errno, reason);
    }
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Claims a child-failure slot in the parent's header, if there is one
/// (or counts the child when every slot is taken).
fn tell_parent(errno: i32, reason: NoSpool) {
    let header = PARENT_HEADER.load(Ordering::Acquire);
    if header.is_null() {
        return;
    }
    // SAFETY: no preconditions.
    let (pid, ppid, uid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32, libc::getuid()) };
    // SAFETY: the parent's header stays mapped while PARENT_HEADER names it;
    // every field touched is naturally aligned, and a slot is written only
    // by the process that claimed it.
    unsafe {
        let slots = &raw mut (*header).child_failures;
        for index in 0..(*slots).len() {
            let slot: *mut ChildFailure = (&raw mut (*slots)[index]).cast();
            let claimed = AtomicU32::from_ptr(&raw mut (*slot).pid)
                .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
            if !claimed {
                continue;
            }
            (*slot).uid = uid;
            (*slot).errno = errno;
            (*slot).reason = reason as u32;
            (*slot).time_ns = monotonic_ns();
            (*slot).name = process_name_bytes();
            (*slot).ppid = ppid;
            AtomicU32::from_ptr(&raw mut (*slot).published).store(1, Ordering::Release);
            return;
        }
        AtomicU32::from_ptr(&raw mut (*header).child_failures_lost).fetch_add(1, Ordering::AcqRel);
    }
}

/// Writes the line through the run's notice descriptor, if it has one and
/// it still names the notice file; false if not written.
fn tell_notice_file(errno: i32, reason: &str) -> bool {
    let fd = FD.load(Ordering::Acquire);
    if fd < 0 {
        return false;
    }
    // SAFETY: a zeroed stat buffer for fstat to fill.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only writes into `stat`.
    let ours = unsafe { libc::fstat(fd, &mut stat) } == 0
        && stat.st_dev == DEVICE.load(Ordering::Relaxed)
        && stat.st_ino == INODE.load(Ordering::Relaxed);
    if !ours {
        return false;
    }
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
    unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) == line.len() as isize }
}

/// This process's spool exists: it says what it has to say there, and the
/// parent's header is no longer needed.
pub(crate) fn spool_opened() {
    let header = PARENT_HEADER.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !header.is_null() {
        // SAFETY: the inherited view of the parent's header page, unused from here on.
        unsafe { libc::munmap(header.cast(), HEADER_SIZE) };
    }
}

/// Called in a forked child: a new process, which may have its own line to
/// write. `parent_header` is the parent's spool header, mapped, or null
/// when the parent had none (the child then keeps the one the parent
/// inherited, if any: the nearest process up the tree with a spool).
pub(crate) fn forget_parent(parent_header: *mut SpoolHeader) {
    SENT.store(false, Ordering::Release);
    if !parent_header.is_null() {
        let older = PARENT_HEADER.swap(parent_header, Ordering::AcqRel);
        if !older.is_null() {
            // SAFETY: a header page inherited from further up, replaced by the parent's.
            unsafe { libc::munmap(older.cast(), HEADER_SIZE) };
        }
    }
}
