//! Disk blocks for files the library maps and stores into: a store to a
//! page of a file with no block behind it (a sparse file on a full disk)
//! raises `SIGBUS` in the program, and growing a file past `ulimit -f`
//! raises `SIGXFSZ`. Space is reserved for real, after checking the size
//! limit, so that neither can happen.

use crate::system::thread::last_errno;

/// Whether a file may grow to `end` bytes under `RLIMIT_FSIZE`.
pub(crate) fn within_size_limit(end: u64) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    let limited =
        unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } == 0 && limit.rlim_cur != libc::RLIM_INFINITY;
    !limited || end <= limit.rlim_cur
}

/// Gives bytes `offset..offset + length` of the file disk blocks with
/// `fallocate`, growing the file if needed; the errno when it cannot
/// (`EFBIG` past the size limit, `EOPNOTSUPP` on a file system without
/// `fallocate`). Safe on a file other processes have mapped and store
/// into: it never writes a byte.
pub(crate) fn allocate_blocks(fd: i32, offset: u64, length: u64) -> Result<(), i32> {
    if !within_size_limit(offset + length) {
        return Err(libc::EFBIG);
    }
    loop {
        // SAFETY: allocating blocks of a file the caller opened for writing.
        if unsafe { libc::fallocate(fd, 0, offset as libc::off_t, length as libc::off_t) } == 0 {
            return Ok(());
        }
        match last_errno() {
            libc::EINTR => continue,
            other => return Err(other),
        }
    }
}

/// [`allocate_blocks`], writing zeros where the file system has no
/// `fallocate`: only for bytes that nothing has written yet.
pub(crate) fn reserve(fd: i32, offset: u64, length: u64) -> Result<(), i32> {
    match allocate_blocks(fd, offset, length) {
        Err(libc::EOPNOTSUPP) => reserve_by_writing(fd, offset, length),
        other => other,
    }
}

/// For file systems without `fallocate`: writing zeros makes them allocate.
fn reserve_by_writing(fd: i32, offset: u64, length: u64) -> Result<(), i32> {
    static ZEROS: [u8; 4096] = [0; 4096];
    let mut at = offset;
    while at < offset + length {
        let piece = (offset + length - at).min(ZEROS.len() as u64) as usize;
        // SAFETY: writing from a static buffer into our own file.
        let written = unsafe { libc::pwrite(fd, ZEROS.as_ptr().cast(), piece, at as libc::off_t) };
        match written {
            n if n > 0 => at += n as u64,
            0 => return Err(libc::EIO),
            _ if last_errno() == libc::EINTR => {}
            _ => return Err(last_errno()),
        }
    }
    Ok(())
}
