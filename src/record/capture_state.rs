//! Which streams are being captured into a graph, counted from the capture
//! calls the hooks see, so that a stream-ordered allocation asks the
//! driver whether its stream is capturing only while some capture is under
//! way. A stream that joins a capture (by waiting on an event recorded in a
//! capturing stream) is never begun itself, but it can only be capturing
//! while its origin stream is, so the count covers it.
//!
//! Each capture is remembered by its stream; the per-thread default stream
//! has the same handle in every thread, so it is remembered with its thread.
//! A capture ends only at `cuStreamEndCapture`, also when it was
//! invalidated before.

use crate::system::cuda_ffi::CU_STREAM_PER_THREAD;
use crate::system::thread::current_tid;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Captures remembered by stream; more at once are counted but never
/// forgotten, which costs a driver call per stream-ordered allocation from
/// then on, and loses nothing.
const SLOTS: usize = 64;

#[unsafe(link_section = "cudatrace_hot")]
static ACTIVE: AtomicU32 = AtomicU32::new(0);
static CAPTURING: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// The key a capture on `stream` is remembered by.
pub(crate) fn key(stream: u64) -> u64 {
    if stream == CU_STREAM_PER_THREAD {
        stream | u64::from(current_tid()) << 8
    } else {
        stream
    }
}

/// A capture began on the stream with key `key`.
pub(crate) fn began(key: u64) {
    ACTIVE.fetch_add(1, Ordering::AcqRel);
    for slot in &CAPTURING {
        if slot
            .compare_exchange(0, key, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// The capture on the stream with key `key` ended, if one was under way.
pub(crate) fn ended(key: u64) {
    for slot in &CAPTURING {
        if slot.load(Ordering::Acquire) == key
            && slot
                .compare_exchange(key, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
            return;
        }
    }
}

/// Whether the stream with key `key` is remembered as capturing.
pub(crate) fn is_remembered(key: u64) -> bool {
    CAPTURING.iter().any(|slot| slot.load(Ordering::Acquire) == key)
}

/// Whether any capture is under way: only then can an allocation be a graph's.
#[inline]
pub(crate) fn any_active() -> bool {
    ACTIVE.load(Ordering::Acquire) != 0
}

/// In a forked child: captures are the parent's, on contexts the child cannot use.
pub(crate) fn forget_parent() {
    ACTIVE.store(0, Ordering::Relaxed);
    CAPTURING.iter().for_each(|slot| slot.store(0, Ordering::Relaxed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_are_counted_until_their_stream_ends_them() {
        assert!(!any_active());
        began(0x1000);
        began(key(CU_STREAM_PER_THREAD));
        assert!(any_active());
        ended(0x2000);
        ended(0x1000);
        assert!(any_active(), "the per-thread stream's capture is still under way");
        let other_thread = std::thread::spawn(|| {
            ended(key(CU_STREAM_PER_THREAD));
            any_active()
        });
        assert!(
            other_thread.join().unwrap(),
            "another thread's per-thread stream is another stream"
        );
        ended(key(CU_STREAM_PER_THREAD));
        assert!(!any_active());
    }
}
