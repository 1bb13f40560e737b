//! Where this process runs and which rank of a distributed job it is, for
//! its spool's header: the host's name (`uname`) and the `RANK`,
//! `LOCAL_RANK` and `WORLD_SIZE` of its environment. A rank is only ever
//! taken from those variables, never guessed from the command line.
//!
//! Everything here reads with `libc::getenv` and parses by hand: it runs
//! while the spool is created, which may be inside a hook or a signal
//! handler, so it allocates nothing and takes no lock.
//!
//! `CUDATRACE_TEST_HOST` replaces the host name. It exists for tests that
//! make the traces of two "hosts" on one machine (see `cudatrace merge`).
//! Like the ranks, it is read when the spool is made, not with the other
//! settings at load: these are the spool header's, read where it is filled.

use crate::system::environment;
use cudatrace_events::layout::HOST_NAME_CAPACITY;
use cudatrace_events::settings::{self, Variable};
use cudatrace_events::ProcessIdentity;
use std::sync::atomic::{AtomicU32, Ordering};

/// A decimal environment variable, plus one (0: unset or not a number).
fn number_plus_one(variable: &Variable) -> u32 {
    // SAFETY: parsed at once, without allocating (getenv).
    let Some(value) = (unsafe { environment::value(variable) }) else {
        return 0;
    };
    parse_plus_one(value.trim_ascii())
}

/// `text` as a decimal number below `u32::MAX`, plus one; 0 when it is not one.
fn parse_plus_one(text: &[u8]) -> u32 {
    if text.is_empty() || text.len() > 10 || !text.iter().all(u8::is_ascii_digit) {
        return 0;
    }
    let value = text.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    u32::try_from(value + 1).ok().filter(|&v| v != u32::MAX).unwrap_or(0)
}

/// The three numbers, plus one each: rank, local rank, world size.
fn ranks() -> [u32; 3] {
    [
        number_plus_one(&settings::RANK),
        number_plus_one(&settings::LOCAL_RANK),
        number_plus_one(&settings::WORLD_SIZE),
    ]
}

/// Copies the host name into `out`, NUL-padded: `CUDATRACE_TEST_HOST`
/// where set, else the kernel's node name.
fn host_name(out: &mut [u8; HOST_NAME_CAPACITY]) {
    // SAFETY: copied at once, without allocating (getenv).
    if let Some(chosen) = unsafe { environment::value(&settings::TEST_HOST) } {
        copy_padded(chosen, out);
        return;
    }
    // SAFETY: utsname is plain bytes; uname fills it or fails.
    let mut names: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::uname(&mut names) } != 0 {
        out.fill(0);
        return;
    }
    // SAFETY: c_char and u8 have the same size and alignment.
    let node: &[u8] = unsafe { std::slice::from_raw_parts(names.nodename.as_ptr().cast(), names.nodename.len()) };
    let end = node.iter().position(|&b| b == 0).unwrap_or(node.len());
    copy_padded(&node[..end], out);
}

/// `name` into `out`, cut to its size, the rest zeros.
fn copy_padded(name: &[u8], out: &mut [u8; HOST_NAME_CAPACITY]) {
    let length = name.len().min(HOST_NAME_CAPACITY);
    out[..length].copy_from_slice(&name[..length]);
    out[length..].fill(0);
}

/// Fills a new header's identity (before its magic is published).
pub(crate) fn fill(identity: &mut ProcessIdentity) {
    let [rank, local_rank, world_size] = ranks();
    identity.rank = rank;
    identity.local_rank = local_rank;
    identity.world_size = world_size;
    host_name(&mut identity.host);
}

/// At exit: the numbers that were not set when the spool was created, read
/// again, since a program may set them itself once running. Each word is
/// stored atomically, for a reader that may be looking.
///
/// # Safety
/// `identity` points into a live, mapped spool header.
pub(crate) unsafe fn fill_missing_ranks(identity: *mut ProcessIdentity) {
    let now = ranks();
    // SAFETY: the caller's pointer; the three words are 4-byte aligned.
    let words = unsafe {
        [
            AtomicU32::from_ptr(&raw mut (*identity).rank),
            AtomicU32::from_ptr(&raw mut (*identity).local_rank),
            AtomicU32::from_ptr(&raw mut (*identity).world_size),
        ]
    };
    for (word, value) in words.into_iter().zip(now) {
        if value != 0 && word.load(Ordering::Relaxed) == 0 {
            word.store(value, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_decimal_and_stored_plus_one() {
        assert_eq!(parse_plus_one(b"0"), 1);
        assert_eq!(parse_plus_one(b"15"), 16);
        assert_eq!(parse_plus_one(b"4294967294"), 0, "u32::MAX - 1 would store as MAX");
        assert_eq!(parse_plus_one(b"4294967293"), 4294967294);
        for bad in [&b""[..], b"-1", b"1.5", b"one", b"12345678901", b"0x1"] {
            assert_eq!(parse_plus_one(bad), 0, "{bad:?}");
        }
    }
}
