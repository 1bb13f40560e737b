//! When this process started, as the kernel counts it: the 22nd field of
//! `/proc/self/stat`, in clock ticks after boot. It stays the same across
//! `exec`, and two processes that had the same pid one after the other
//! started at different times: with the pid it names one process.

/// The process's start time in clock ticks after boot; 0 if it cannot be
/// read. Reads `/proc/self/stat` into a buffer on the stack (no allocation).
pub(crate) fn process_start_ticks() -> u64 {
    let mut buffer = [0u8; 1024];
    // SAFETY: a NUL-terminated path; the descriptor is ours and closed below.
    let fd = unsafe { libc::open(c"/proc/self/stat".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return 0;
    }
    // SAFETY: reading into our own buffer, within its length.
    let read = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    if read <= 0 {
        return 0;
    }
    start_ticks_of(&buffer[..read as usize]).unwrap_or(0)
}

/// The start time in a `/proc/PID/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces and parentheses itself: fields
/// are counted from the last `)`.
fn start_ticks_of(stat: &[u8]) -> Option<u64> {
    let after_name = stat.iter().rposition(|&b| b == b')')? + 1;
    // Field 3 (the state) is the first after the name; field 22 the 20th.
    let field = stat[after_name..]
        .split(|&b| b == b' ')
        .filter(|word| !word.is_empty())
        .nth(19)?;
    std::str::from_utf8(field).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_read_after_a_name_with_spaces_and_parentheses() {
        let line = b"4242 (a (b) c) S 1 4242 4242 0 -1 4194304 120 0 0 0 3 1 0 0 20 0 1 0 987654 8675328 200 18446744073709551615";
        assert_eq!(start_ticks_of(line), Some(987654));
        assert_eq!(start_ticks_of(b"4242 (cut) S 1 2"), None);
        let own = process_start_ticks();
        assert!(own > 0);
        assert_eq!(process_start_ticks(), own);
    }
}
