//! This machine: its clocks and its name.
//!
//! Two variables, for tests only, make one machine stand for another host,
//! as the library does (see `docs/usage.md`, "Many nodes"):
//! `CUDATRACE_TEST_HOST` replaces the host name, and
//! `CUDATRACE_TEST_CLOCK_OFFSET_NS` is added to `CLOCK_MONOTONIC`.

use cudatrace_events::settings::{self, TEST_CLOCK_OFFSET_NS, TEST_HOST};
use std::sync::OnceLock;

/// `CUDATRACE_TEST_CLOCK_OFFSET_NS`, read once; 0 unless a test sets it.
fn monotonic_offset() -> u64 {
    static OFFSET: OnceLock<u64> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        TEST_CLOCK_OFFSET_NS
            .value_os()
            .map_or(0, |value| settings::parse_clock_offset(value.as_encoded_bytes())) as u64
    })
}

/// `CLOCK_MONOTONIC` now, the clock of event times.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid clock and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64).wrapping_add(monotonic_offset())
}

/// `CLOCK_REALTIME` now, in ns since the epoch.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// This machine's host name (`CUDATRACE_TEST_HOST` where a test sets it).
pub fn host_name() -> String {
    if let Some(chosen) = TEST_HOST.value_os() {
        return chosen.to_string_lossy().into_owned();
    }
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most buffer.len() bytes.
    if unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } != 0 {
        return String::new();
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}
