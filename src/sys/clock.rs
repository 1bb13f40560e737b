//! Clocks read through the vDSO: no system call.

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in nanoseconds: record timestamps.
#[inline]
pub fn monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: a few nanoseconds to read, and
/// fine enough for rate limits of milliseconds.
#[inline]
pub fn coarse_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// `CLOCK_REALTIME` in nanoseconds since the epoch.
pub fn realtime_ns() -> u64 {
    now_ns(libc::CLOCK_REALTIME)
}
