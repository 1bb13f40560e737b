//! Hooks for streams, events and stream captures.
//!
//! - A stream's device is remembered when it is created, so that
//!   stream-ordered allocations on it need no driver call.
//! - The driver takes memory for streams and events as they are created, a
//!   chunk at a time, and for a stream's resources at its first launch (see
//!   `hooks::launch`). The first [`MEASURED_FIRST`] creations of each kind
//!   are measured around (two readings each, once per stream or event);
//!   past that, in a program that keeps creating them, one in each window of
//!   [`THEN_ONE_IN`], recorded as standing for that many: the report then
//!   calls the result an estimate.
//! - Captures are counted as they begin and end (see [`capture_state`]).

use crate::hooks::launch;
use crate::hooks::support::{per_thread, read, real_or_fail};
use crate::record::device_readings::Around;
use crate::record::recorder::Record;
use crate::record::{capture_state, device_readings, devices};
use crate::system::cuda_ffi::*;
use crate::system::tracing_switch::{guarded, tracing_on};
use cudatrace_events::{Api, Op};
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

/// Creations of each kind measured one by one.
pub(crate) const MEASURED_FIRST: u64 = 4096;
/// After those, one creation in this many is measured.
pub(crate) const THEN_ONE_IN: u64 = 16;

static STREAMS_CREATED: AtomicU64 = AtomicU64::new(0);
static EVENTS_CREATED: AtomicU64 = AtomicU64::new(0);

/// How many creations the next one stands for if it is measured, or
/// `None` if it is not. Past the first ones, one creation in each window of
/// [`THEN_ONE_IN`] is measured, at a place in the window that varies from
/// window to window, so that memory the driver takes every so many
/// creations is not always missed or always caught.
fn creation_weight(created: &AtomicU64) -> Option<u64> {
    let n = created.fetch_add(1, Ordering::Relaxed);
    if n < MEASURED_FIRST {
        return Some(1);
    }
    let (window, place) = ((n - MEASURED_FIRST) / THEN_ONE_IN, (n - MEASURED_FIRST) % THEN_ONE_IN);
    let chosen = (window.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % THEN_ONE_IN;
    (place == chosen).then_some(THEN_ONE_IN)
}

/// Runs `create`, measuring it when its turn comes; `handle` reads the
/// handle it made (on success only).
fn measured_creation(
    api: Api,
    created: &AtomicU64,
    create: impl FnOnce() -> CUresult,
    handle: impl FnOnce() -> u64,
) -> (CUresult, u64) {
    let around = if tracing_on() {
        creation_weight(created).and_then(|weight| Around::start(api).map(|around| (around, weight)))
    } else {
        None
    };
    let result = create();
    let handle = if result == CUDA_SUCCESS { handle() } else { 0 };
    if let Some((around, weight)) = around.filter(|_| result == CUDA_SUCCESS) {
        let record = Record {
            address: handle,
            size: weight,
            ..Record::new(Op::StreamObjects, api)
        };
        around.finish(record, false);
    }
    (result, handle)
}

fn stream_made(result: CUresult, stream: u64) {
    if result == CUDA_SUCCESS {
        guarded(|| {
            // Its handle may be one a stream destroyed with its context had.
            launch::forget_stream(stream);
            if let Some(device) = devices::current_device() {
                devices::stream_created(stream, device);
            }
        });
    }
}

/// Hook for `cuStreamCreate`: remembers the stream's device, measures the creation.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CUresult {
    let real = real_or_fail!(cuStreamCreate, unsafe extern "C" fn(*mut CUstream, c_uint) -> CUresult);
    let (result, handle) = measured_creation(
        Api::CuStreamCreate,
        &STREAMS_CREATED,
        // SAFETY: arguments forwarded unchanged.
        || unsafe { real(stream, flags) },
        || read(stream, std::ptr::null_mut()) as u64,
    );
    stream_made(result, handle);
    result
}

/// Hook for `cuStreamCreateWithPriority`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(stream: *mut CUstream, flags: c_uint, priority: c_int) -> CUresult {
    let real = real_or_fail!(
        cuStreamCreateWithPriority,
        unsafe extern "C" fn(*mut CUstream, c_uint, c_int) -> CUresult
    );
    let (result, handle) = measured_creation(
        Api::CuStreamCreateWithPriority,
        &STREAMS_CREATED,
        // SAFETY: arguments forwarded unchanged.
        || unsafe { real(stream, flags, priority) },
        || read(stream, std::ptr::null_mut()) as u64,
    );
    stream_made(result, handle);
    result
}

/// Hook for `cuEventCreate`: measures the creation.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CUresult {
    let real = real_or_fail!(cuEventCreate, unsafe extern "C" fn(*mut CUevent, c_uint) -> CUresult);
    measured_creation(
        Api::CuEventCreate,
        &EVENTS_CREATED,
        // SAFETY: arguments forwarded unchanged.
        || unsafe { real(event, flags) },
        || read(event, std::ptr::null_mut()) as u64,
    )
    .0
}

macro_rules! stream_destroy_hooks {
    ($( $name:ident; )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`: the stream's handle may be given out again.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(stream: CUstream) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn(CUstream) -> CUresult);
            guarded(|| {
                devices::stream_destroyed(stream as u64);
                launch::forget_stream(stream as u64);
            });
            // SAFETY: arguments forwarded unchanged.
            unsafe { real(stream) }
        }
    )*};
}

stream_destroy_hooks! {
    cuStreamDestroy;
    cuStreamDestroy_v2;
}

/// Counts a capture on `stream` before the real call, so that another
/// thread's allocation into it meanwhile is asked about; returns its key.
fn capture_beginning(stream: u64) -> Option<u64> {
    let mut key = None;
    guarded(|| {
        let k = capture_state::key(stream);
        capture_state::began(k);
        key = Some(k);
    });
    key
}

/// Takes the count back if the capture did not begin.
fn capture_began(result: CUresult, key: Option<u64>) {
    if let Some(key) = key.filter(|_| result != CUDA_SUCCESS) {
        guarded(|| capture_state::ended(key));
    }
}

/// Defines hooks that begin a capture on their first argument, `$stream`.
macro_rules! begin_capture_hooks {
    ($( $name:ident, $handle:expr, ( $stream:ident : CUstream $(, $arg:ident : $ty:ty )* ); )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`: counts the capture it begins.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($stream: CUstream $(, $arg: $ty )*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn(CUstream $(, $ty )*) -> CUresult);
            let key = capture_beginning(($handle)($stream));
            // SAFETY: arguments forwarded unchanged.
            let result = unsafe { real($stream $(, $arg )*) };
            capture_began(result, key);
            result
        }
    )*};
}

begin_capture_hooks! {
    cuStreamBeginCapture, |s: CUstream| s as u64, (stream: CUstream);
    cuStreamBeginCapture_ptsz, per_thread, (stream: CUstream);
    cuStreamBeginCapture_v2, |s: CUstream| s as u64, (stream: CUstream, mode: CUstreamCaptureMode);
    cuStreamBeginCapture_v2_ptsz, per_thread, (stream: CUstream, mode: CUstreamCaptureMode);
    cuStreamBeginCaptureToGraph, |s: CUstream| s as u64, (stream: CUstream, graph: CUgraph,
        dependencies: *const CUgraphNode, dependency_data: *const c_void, count: usize, mode: CUstreamCaptureMode);
    cuStreamBeginCaptureToGraph_ptsz, per_thread, (stream: CUstream, graph: CUgraph,
        dependencies: *const CUgraphNode, dependency_data: *const c_void, count: usize, mode: CUstreamCaptureMode);
}

/// After `cuStreamEndCapture` on `stream`: a capture ends there whether the
/// call succeeded or reported an invalidated capture; on any other error,
/// the driver is asked whether the stream is still capturing (an error
/// path, rare).
fn capture_ending(result: CUresult, stream: CUstream, handle: u64) {
    guarded(|| {
        let key = capture_state::key(handle);
        if !capture_state::is_remembered(key) {
            return;
        }
        if result == CUDA_SUCCESS || result == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED || !still_capturing(stream) {
            capture_state::ended(key);
        }
    });
}

fn still_capturing(stream: CUstream) -> bool {
    device_readings::stream_is_capturing(stream as u64) || device_readings::stream_capture_invalidated(stream as u64)
}

/// Hook for `cuStreamEndCapture`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) -> CUresult {
    let real = real_or_fail!(
        cuStreamEndCapture,
        unsafe extern "C" fn(CUstream, *mut CUgraph) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(stream, graph) };
    capture_ending(result, stream, stream as u64);
    result
}

/// Hook for `cuStreamEndCapture_ptsz`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamEndCapture_ptsz(stream: CUstream, graph: *mut CUgraph) -> CUresult {
    let real = real_or_fail!(
        cuStreamEndCapture_ptsz,
        unsafe extern "C" fn(CUstream, *mut CUgraph) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    let result = unsafe { real(stream, graph) };
    capture_ending(result, stream, per_thread(stream));
    result
}

/// In a forked child: its creations are measured afresh.
pub(crate) fn forget_parent() {
    STREAMS_CREATED.store(0, Ordering::Relaxed);
    EVENTS_CREATED.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_creations_are_measured_then_one_in_sixteen_standing_for_sixteen() {
        let created = AtomicU64::new(0);
        let weights: Vec<Option<u64>> = (0..MEASURED_FIRST + 2 * THEN_ONE_IN)
            .map(|_| creation_weight(&created))
            .collect();
        assert!(weights[..MEASURED_FIRST as usize].iter().all(|&w| w == Some(1)));
        let later: Vec<u64> = weights[MEASURED_FIRST as usize..].iter().flatten().copied().collect();
        assert_eq!(later, vec![THEN_ONE_IN, THEN_ONE_IN]);
        assert_eq!(weights.iter().flatten().sum::<u64>(), MEASURED_FIRST + 2 * THEN_ONE_IN);
        // The measured place moves from window to window.
        let places: std::collections::BTreeSet<u64> = (MEASURED_FIRST..MEASURED_FIRST + 64 * THEN_ONE_IN)
            .filter(|_| creation_weight(&created).is_some())
            .map(|n| n % THEN_ONE_IN)
            .collect();
        assert!(places.len() > 4, "{places:?}");
    }
}
