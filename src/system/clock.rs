//! Clocks: the vDSO's, and the records' own clock read from the TSC.
//!
//! A record's time is `CLOCK_MONOTONIC`. Read through the vDSO that is some
//! 33 ns in a tight loop but 70 to 100 in a training process, whose work
//! between two hooks has pushed the vDSO's data and code out of the caches.
//! Where the kernel itself keeps time with the TSC (clock source `tsc`, which
//! it chooses only for a TSC that is invariant and the same on every CPU),
//! [`record_ns`] reads the TSC and scales it the way the vDSO would, with
//! numbers kept in the thread's own block:
//!
//! - Each thread anchors its TSC to `CLOCK_MONOTONIC` with a pair of
//!   readings, and takes a new pair once a millisecond of ticks has passed
//!   since (or the TSC went backwards). The time between anchors is the
//!   anchor's plus the ticks scaled by the process's rate.
//! - The rate (nanoseconds a tick, 32.32 fixed point) is measured from
//!   pairs at least 10 ms apart, and measured again over each following
//!   second, so that it follows the kernel's slewing of `CLOCK_MONOTONIC`.
//!   Until it is first known, records take the vDSO's clock.
//! - A rate off by 1 ppm puts a time off by 1 ns at the end of a millisecond,
//!   and the next anchor corrects it; a thread's times never go backwards.

use crate::system::thread_block::{self, ClockAnchor};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Added to every `CLOCK_MONOTONIC` reading: `CUDATRACE_TEST_CLOCK_OFFSET_NS`,
/// 0 unless a test sets it. It makes this machine's monotonic clock read as
/// another host's would (one booted at another time), so that a test can
/// make the traces of two "hosts" on one machine and check that `cudatrace
/// merge` lines them up by their wall clocks. The TSC-based record times
/// are anchored to [`monotonic_ns`], so they carry it too.
#[unsafe(link_section = "cudatrace_hot")]
static MONOTONIC_OFFSET: AtomicU64 = AtomicU64::new(0);

/// Sets the offset `CUDATRACE_TEST_CLOCK_OFFSET_NS` gave, from the library
/// constructor, before any record.
pub(crate) fn configure(offset_ns: i64) {
    MONOTONIC_OFFSET.store(offset_ns as u64, Ordering::Relaxed);
}

/// `CLOCK_MONOTONIC` in nanoseconds, from the vDSO.
#[inline]
pub(crate) fn monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC).wrapping_add(MONOTONIC_OFFSET.load(Ordering::Relaxed))
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: a few nanoseconds to read, and
/// fine enough for rate limits of milliseconds.
#[inline]
pub(crate) fn coarse_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC_COARSE).wrapping_add(MONOTONIC_OFFSET.load(Ordering::Relaxed))
}

/// The time [`record_ns`] last gave the calling thread (0 before its first):
/// for a rate limit checked right after a record, with no clock read.
#[inline]
pub(crate) fn latest_record_ns() -> u64 {
    thread_block::current().clock_latest.get()
}

/// `CLOCK_REALTIME` in nanoseconds since the epoch.
pub(crate) fn realtime_ns() -> u64 {
    now_ns(libc::CLOCK_REALTIME)
}

/// Whether the TSC may stand in for `CLOCK_MONOTONIC`: not yet decided,
/// being decided by one thread, yes, no.
const UNDECIDED: u8 = 0;
const DECIDING: u8 = 1;
const USABLE: u8 = 2;
const NOT_USABLE: u8 = 3;
static TSC: AtomicU8 = AtomicU8::new(UNDECIDED);

/// The reference pair the rate is measured from, and the rate (0 until
/// known). Changed only by the holder of `CALIBRATING`.
static REFERENCE_TSC: AtomicU64 = AtomicU64::new(0);
static REFERENCE_NS: AtomicU64 = AtomicU64::new(0);
static RATE: AtomicU64 = AtomicU64::new(0);
static CALIBRATING: AtomicBool = AtomicBool::new(false);

/// A first rate is measured over at least this long.
const FIRST_RATE_NS: u64 = 10_000_000;
/// Later rates are measured over about this long each.
const RATE_WINDOW_NS: u64 = 1_000_000_000;
/// A thread's anchor is good for this long.
const ANCHOR_NS: u64 = 1_000_000;
/// The rates believed, nanoseconds a tick in 32.32 fixed point: a TSC of
/// 20 GHz to 100 MHz.
const PLAUSIBLE_RATES: std::ops::RangeInclusive<u64> = (1 << 32) / 20..=10 << 32;
/// A later rate more than this part of the last one away from it is not
/// believed (the window held a suspend, or a bad pair): a thousandth, twice
/// the most the kernel slews `CLOCK_MONOTONIC` by.
const RATE_CHANGE_PART: u64 = 1_000;

/// Whether records are stamped from the TSC, decided by the first thread
/// that asks: only on x86-64, with an invariant TSC, where the kernel's
/// clock source is `tsc`. The decider takes the first reference pair; other
/// threads take the vDSO's clock meanwhile. Decided at the first record
/// rather than at load, so that the processes of a traced tree that never
/// use CUDA do not read the clock source.
fn tsc_usable() -> bool {
    match TSC.load(Ordering::Acquire) {
        UNDECIDED => decide_tsc(),
        decided => decided == USABLE,
    }
}

#[cold]
fn decide_tsc() -> bool {
    if let Err(decided) = TSC.compare_exchange(UNDECIDED, DECIDING, Ordering::Acquire, Ordering::Acquire) {
        return decided == USABLE;
    }
    let reference = (tsc_is_invariant() && kernel_keeps_time_with_tsc())
        .then(reading_pair)
        .flatten();
    if let Some((tsc, ns)) = reference {
        REFERENCE_TSC.store(tsc, Ordering::Relaxed);
        REFERENCE_NS.store(ns, Ordering::Relaxed);
    }
    let usable = reference.is_some();
    TSC.store(if usable { USABLE } else { NOT_USABLE }, Ordering::Release);
    usable
}

#[cfg(target_arch = "x86_64")]
fn tsc_is_invariant() -> bool {
    // Leaf 0x80000007 is asked only when the highest extended leaf reaches it.
    let highest = std::arch::x86_64::__cpuid(0x8000_0000).eax;
    highest >= 0x8000_0007 && std::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc_is_invariant() -> bool {
    false
}

/// Whether the kernel's current clock source is the TSC: then the kernel
/// has checked that it is steady and the same on every CPU. Read into a
/// buffer on the stack, with no allocation: the first record may be a fork
/// record written in a signal handler.
fn kernel_keeps_time_with_tsc() -> bool {
    let path = c"/sys/devices/system/clocksource/clocksource0/current_clocksource";
    // SAFETY: a NUL-terminated path; the descriptor is ours and closed here.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut buffer = [0u8; 16];
    // SAFETY: reading at most the buffer's length into it.
    let read = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(fd) };
    usize::try_from(read).is_ok_and(|length| buffer[..length].trim_ascii() == b"tsc")
}

#[inline(always)]
fn read_tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC is on every x86-64 and has no preconditions.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// The most ticks a pair's two TSC readings may lie apart: about a
/// microsecond at 2 GHz, where the vDSO takes 30 to 100 ns. Wider, the
/// thread was interrupted between them, and the pair is taken again. Half
/// of it bounds the error of a pair.
const PAIR_TICKS: u64 = 2_000;

/// A TSC reading and the `CLOCK_MONOTONIC` reading taken between its two
/// halves; `None` when three tries were each interrupted.
fn reading_pair() -> Option<(u64, u64)> {
    for _ in 0..3 {
        let before = read_tsc();
        let ns = monotonic_ns();
        let after = read_tsc();
        let ticks = after.wrapping_sub(before);
        if ticks <= PAIR_TICKS {
            return Some((before + ticks / 2, ns));
        }
    }
    None
}

/// Nanoseconds a tick in 32.32 fixed point, from two pairs; 0 when the
/// ticks do not move forward.
fn rate_between(from: (u64, u64), to: (u64, u64)) -> u64 {
    let ticks = to.0.wrapping_sub(from.0);
    let ns = to.1.wrapping_sub(from.1);
    if ticks == 0 || ticks > i64::MAX as u64 || ns > i64::MAX as u64 {
        return 0;
    }
    u64::try_from((u128::from(ns) << 32) / u128::from(ticks)).unwrap_or(0)
}

/// The time of `tsc` by `anchor`, when the anchor covers it.
#[inline(always)]
fn scaled(anchor: ClockAnchor, tsc: u64) -> Option<u64> {
    let ticks = tsc.wrapping_sub(anchor.tsc);
    // A TSC that went backwards wraps past the span too. The span keeps
    // ticks × rate far inside 64 bits (about 2^52 for a millisecond).
    (ticks < anchor.span_ticks).then(|| anchor.ns + (ticks.wrapping_mul(anchor.rate) >> 32))
}

/// The anchor a pair gives at `rate`: good for [`ANCHOR_NS`].
fn anchor_at(pair: (u64, u64), rate: u64) -> ClockAnchor {
    ClockAnchor {
        tsc: pair.0,
        ns: pair.1,
        rate,
        span_ticks: (ANCHOR_NS << 32).checked_div(rate).unwrap_or(0),
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds for a record's time: from the TSC where
/// the kernel keeps time with it (see `tsc_usable`), else from the vDSO.
/// Never less than the calling thread's previous reading (but for a record
/// written by a signal handler that interrupted this very function, which
/// may stand a few nanoseconds after the interrupted one's).
#[inline]
pub(crate) fn record_ns() -> u64 {
    let block = thread_block::current();
    let anchor = block.clock.get();
    let ns = match scaled(anchor, read_tsc()) {
        Some(ns) => ns,
        None => reanchor(block),
    };
    let latest = block.clock_latest.get().max(ns);
    block.clock_latest.set(latest);
    latest
}

/// Takes a new pair for the calling thread and returns its time; measures
/// the process's rate when due.
#[cold]
#[inline(never)]
fn reanchor(block: &thread_block::ThreadBlock) -> u64 {
    if !tsc_usable() {
        return monotonic_ns();
    }
    let Some(pair) = reading_pair() else {
        return monotonic_ns();
    };
    set_anchor(block, anchor_at(pair, rate_now(pair)));
    pair.1
}

/// Stores a thread's anchor so that a signal handler interrupting the
/// store, and reading the anchor itself, never scales by a mix of the old
/// and the new: the anchor covers nothing until its last field is written.
fn set_anchor(block: &thread_block::ThreadBlock, anchor: ClockAnchor) {
    use std::sync::atomic::{compiler_fence, Ordering::SeqCst};
    block.clock.set(ClockAnchor {
        span_ticks: 0,
        ..block.clock.get()
    });
    compiler_fence(SeqCst);
    block.clock.set(ClockAnchor {
        span_ticks: 0,
        ..anchor
    });
    compiler_fence(SeqCst);
    block.clock.set(anchor);
}

/// In a forked child. A parent thread that was measuring the rate, or
/// deciding, is gone, perhaps between the stores of the reference pair: the
/// child decides again. (Its thread's anchor is dropped with the rest of
/// the block's fork-stale fields, `thread_block::forget_parent`.)
pub(crate) fn forget_parent() {
    if CALIBRATING.swap(false, Ordering::AcqRel) || TSC.load(Ordering::Acquire) == DECIDING {
        RATE.store(0, Ordering::Relaxed);
        TSC.store(UNDECIDED, Ordering::Release);
    }
}

/// Whether a pair taken at `ns` is due to measure the rate again, from a
/// reference taken at `reference_ns`, the rate being `rate` (0: unknown).
/// A pair older than the reference is not.
fn calibration_due(ns: u64, reference_ns: u64, rate: u64) -> bool {
    let due = if rate == 0 { FIRST_RATE_NS } else { RATE_WINDOW_NS };
    // Signed: a pair older than the reference gives a negative span.
    ns.wrapping_sub(reference_ns) as i64 >= due as i64
}

/// The rate to keep after measuring from `reference` to `pair`, the last
/// rate being `previous` (0: none yet): the measured one if it is plausible
/// and, after the first, within [`RATE_CHANGE_PART`] of the last.
fn next_rate(reference: (u64, u64), pair: (u64, u64), previous: u64) -> u64 {
    let measured = rate_between(reference, pair);
    let believed = PLAUSIBLE_RATES.contains(&measured)
        && (previous == 0 || measured.abs_diff(previous) <= previous / RATE_CHANGE_PART);
    if believed {
        measured
    } else {
        previous
    }
}

/// The process's rate, measured again from `pair` when due; 0 while unknown.
fn rate_now(pair: (u64, u64)) -> u64 {
    let rate = RATE.load(Ordering::Acquire);
    if !calibration_due(pair.1, REFERENCE_NS.load(Ordering::Relaxed), rate) || CALIBRATING.swap(true, Ordering::Acquire)
    {
        return rate;
    }
    // Another thread may have measured between the check and the flag:
    // judged again from what is there now.
    let reference = (
        REFERENCE_TSC.load(Ordering::Relaxed),
        REFERENCE_NS.load(Ordering::Relaxed),
    );
    let previous = RATE.load(Ordering::Relaxed);
    if calibration_due(pair.1, reference.1, previous) {
        RATE.store(next_rate(reference, pair, previous), Ordering::Release);
        // The reference moves on even when the rate was not believed, so
        // that one bad window does not spoil the next.
        REFERENCE_TSC.store(pair.0, Ordering::Relaxed);
        REFERENCE_NS.store(pair.1, Ordering::Relaxed);
    }
    CALIBRATING.store(false, Ordering::Release);
    RATE.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_nanoseconds_a_tick_in_fixed_point() {
        // 3 GHz: a third of a nanosecond a tick.
        assert_eq!(rate_between((1_000, 50), (3_001_000, 1_000_050)), (1u64 << 32) / 3);
        assert_eq!(rate_between((5, 0), (5, 10)), 0, "no ticks, no rate");
        assert_eq!(rate_between((10, 0), (5, 10)), 0, "ticks going backwards give no rate");
    }

    #[test]
    fn an_anchor_scales_ticks_within_its_millisecond_and_no_further() {
        // 2 GHz: half a nanosecond a tick.
        let anchor = anchor_at((1_000_000, 7_000), 1 << 31);
        assert_eq!(anchor.span_ticks, 2_000_000);
        assert_eq!(scaled(anchor, 1_000_000), Some(7_000));
        assert_eq!(scaled(anchor, 1_000_001), Some(7_000));
        assert_eq!(scaled(anchor, 1_002_000), Some(8_000));
        assert_eq!(scaled(anchor, 2_999_999), Some(7_000 + 999_999));
        assert_eq!(scaled(anchor, 3_000_000), None, "a millisecond of ticks later");
        assert_eq!(scaled(anchor, 999_999), None, "a TSC that went backwards");
        assert_eq!(scaled(anchor_at((1, 1), 0), 1), None, "no rate, no anchor");
        assert_eq!(scaled(ClockAnchor::default(), 5), None, "a new thread's empty anchor");
    }

    #[test]
    fn a_rate_is_due_after_its_window_and_never_from_an_older_pair() {
        assert!(!calibration_due(1_000 + FIRST_RATE_NS - 1, 1_000, 0));
        assert!(calibration_due(1_000 + FIRST_RATE_NS, 1_000, 0));
        assert!(
            !calibration_due(1_000 + FIRST_RATE_NS, 1_000, 1 << 31),
            "a known rate waits a second"
        );
        assert!(calibration_due(1_000 + RATE_WINDOW_NS, 1_000, 1 << 31));
        assert!(!calibration_due(500, 1_000, 0), "a pair older than the reference");
    }

    #[test]
    fn a_measured_rate_is_kept_only_when_plausible_and_close_to_the_last() {
        let half = 1u64 << 31; // 2 GHz
                               // 10 ms at 2 GHz, then a second 0.05% faster: both believed.
        assert_eq!(next_rate((0, 0), (20_000_000, 10_000_000), 0), half);
        let slewed = rate_between((0, 0), (2_000_000_000, 1_000_500_000));
        assert!(slewed > half);
        assert_eq!(next_rate((0, 0), (2_000_000_000, 1_000_500_000), half), slewed);
        // A suspend inside the window: CLOCK_MONOTONIC stood still while the
        // TSC ran on, so the rate would halve. The last one is kept.
        assert_eq!(next_rate((0, 0), (4_000_000_000, 1_000_000_000), half), half);
        // No first rate from a 40 GHz "TSC", nor from ticks going backwards.
        assert_eq!(next_rate((0, 0), (400_000_000, 10_000_000), 0), 0);
        assert_eq!(next_rate((100, 0), (50, 10_000_000), 0), 0);
    }

    #[test]
    fn record_times_follow_the_monotonic_clock_and_never_go_back() {
        let mut previous = 0;
        let mut checked = 0;
        let start = monotonic_ns();
        while monotonic_ns() - start < 40_000_000 {
            let before = monotonic_ns();
            let ns = record_ns();
            let after = monotonic_ns();
            assert!(ns >= previous, "went back from {previous} to {ns}");
            // Within 2 µs of the vDSO's clock either side: a pair's own error
            // is at most half of PAIR_TICKS (1 µs at 1 GHz), and a first rate
            // from 10 ms of such pairs is off by at most 200 ppm, 200 ns over
            // an anchor's millisecond. A preempted thread only widens the
            // window the time must fall in.
            assert!(
                ns + 2_000 >= before && ns <= after + 2_000,
                "{before} <= {ns} <= {after}"
            );
            previous = ns;
            checked += 1;
        }
        assert!(checked > 1_000);
        if tsc_usable() {
            assert_ne!(RATE.load(Ordering::Relaxed), 0, "a rate after 40 ms");
        }
    }
}
