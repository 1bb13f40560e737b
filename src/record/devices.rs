//! Which device an event is on, with no driver call on the steady path.
//!
//! - **The calling thread's device** is cached per thread. Every hooked call
//!   that can change the thread's current context (set, push, pop, create)
//!   clears the caller's cache; those that can change other threads'
//!   (destroy, primary-context release and reset) clear every thread's. A
//!   context can also change through calls we do not see (the runtime's
//!   internal table), so [`check_current_device`], run at the rate-limited
//!   readings, compares the cache with the driver and records each
//!   mismatch.
//! - **A stream's device** is recorded when the stream is created, or asked
//!   once when a stream is first seen (`cuStreamGetDevice`); stream-ordered
//!   calls use it, whatever the thread's current context.
//! - **A pool's device** is recorded when the pool is created (its location).

use crate::record::recorder::{self, Record};
use crate::system::cuda_ffi::*;
use crate::system::lazy_mapping::{LazyMapping, ZeroIsEmpty};
use crate::system::symbols::{real_fn, Sym};
use crate::system::thread_block;
use cudatrace_events::{Api, Op};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped when a call may have changed other threads' current contexts.
#[unsafe(link_section = "cudatrace_hot")]
static PROCESS_EPOCH: AtomicU64 = AtomicU64::new(1);

/// The hooked call changed the calling thread's current context.
#[inline]
pub(crate) fn thread_context_changed() {
    thread_block::current().device.set((0, 0));
}

/// The hooked call may have changed any thread's current context.
pub(crate) fn process_contexts_changed() {
    PROCESS_EPOCH.fetch_add(1, Ordering::AcqRel);
}

fn cached() -> Option<i8> {
    let (epoch, device) = thread_block::current().device.get();
    (epoch != 0 && epoch == PROCESS_EPOCH.load(Ordering::Acquire)).then_some(device)
}

/// Caches `device`, asked of the driver when the process epoch was `epoch`
/// (read before asking, so that a change made meanwhile makes it stale).
fn remember(device: i8, epoch: u64) {
    thread_block::current().device.set((epoch, device));
}

/// The driver's answer: the device of the calling thread's current context.
fn ask_driver() -> Option<i8> {
    // SAFETY: cuCtxGetDevice(CUdevice*) is the driver's signature.
    let get_device = unsafe { real_fn::<unsafe extern "C" fn(*mut CUdevice) -> CUresult>(Sym::cuCtxGetDevice) }?;
    let mut device: CUdevice = -1;
    // SAFETY: a valid out-pointer.
    if unsafe { get_device(&mut device) } != CUDA_SUCCESS {
        return None;
    }
    i8::try_from(device).ok().filter(|&d| d >= 0)
}

/// The device of the calling thread's current context; `None` when the
/// thread has none (a worker thread): the caller then never guesses. Asks
/// the driver only when the thread's cache is empty.
#[inline]
pub(crate) fn current_device() -> Option<i8> {
    if let Some(device) = cached() {
        return Some(device);
    }
    let epoch = PROCESS_EPOCH.load(Ordering::Acquire);
    let device = ask_driver()?;
    remember(device, epoch);
    Some(device)
}

/// Asks the driver for the calling thread's device and compares it with the
/// cache; a disagreement is recorded (a context changed through a call we
/// do not hook) and the cache corrected. For the rate-limited readings only.
pub(crate) fn check_current_device() -> Option<i8> {
    let cached = cached();
    let epoch = PROCESS_EPOCH.load(Ordering::Acquire);
    let device = ask_driver()?;
    if let Some(cached) = cached.filter(|&cached| cached != device) {
        let mut record = Record::new(Op::DeviceMismatch, Api::CuCtxGetDevice);
        record.device = device;
        record.arg1 = cached as u8 as u64;
        recorder::write_measurement(record, false);
    }
    remember(device, epoch);
    Some(device)
}

/// One remembered stream or pool: its handle and device + 1.
#[repr(C)]
struct HandleSlot {
    handle: AtomicU64,
    device: AtomicU64,
}

// SAFETY: zeroed, a slot is empty (handle 0).
unsafe impl ZeroIsEmpty for HandleSlot {}

const STREAM_SLOTS: usize = 1 << 14;
const POOL_SLOTS: usize = 1 << 8;
const MAX_PROBES: usize = 64;
/// A handle given up (stream destroyed): the slot stays claimed, unused.
const GONE: u64 = u64::MAX;

#[unsafe(link_section = "cudatrace_hot")]
static STREAMS: LazyMapping<HandleSlot> = LazyMapping::new(STREAM_SLOTS);
#[unsafe(link_section = "cudatrace_hot")]
static POOLS: LazyMapping<HandleSlot> = LazyMapping::new(POOL_SLOTS);

fn first_slot(handle: u64, slots: usize) -> usize {
    ((handle >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - slots.trailing_zeros())) as usize
}

fn remember_handle(table: &LazyMapping<HandleSlot>, handle: u64, device: i8) {
    let Some(slots) = table.get() else { return };
    let start = first_slot(handle, slots.len());
    let slot_at = |probe: usize| &slots[(start + probe) & (slots.len() - 1)];
    // The handle's own slot if it has one; else the first slot given up
    // (a handle destroyed), so that recycled handles do not fill the table;
    // else the first empty one.
    let mut free = None;
    for probe in 0..MAX_PROBES {
        let seen = slot_at(probe).handle.load(Ordering::Acquire);
        if seen == handle {
            slot_at(probe).device.store(device as u8 as u64 + 1, Ordering::Release);
            return;
        }
        if seen == GONE && free.is_none() {
            free = Some((probe, GONE));
        }
        if seen == 0 {
            free.get_or_insert((probe, 0));
            break;
        }
    }
    let Some((probe, expected)) = free else { return };
    let slot = slot_at(probe);
    if slot
        .handle
        .compare_exchange(expected, handle, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        slot.device.store(device as u8 as u64 + 1, Ordering::Release);
    }
}

fn device_of_handle(table: &LazyMapping<HandleSlot>, handle: u64) -> Option<i8> {
    let slots = table.get_if_mapped()?;
    let start = first_slot(handle, slots.len());
    for probe in 0..MAX_PROBES {
        let slot = &slots[(start + probe) & (slots.len() - 1)];
        match slot.handle.load(Ordering::Acquire) {
            0 => return None,
            seen if seen == handle => {
                let device = slot.device.load(Ordering::Acquire);
                return (device != 0).then(|| (device - 1) as u8 as i8);
            }
            _ => {}
        }
    }
    None
}

fn forget_handle(table: &LazyMapping<HandleSlot>, handle: u64) {
    let Some(slots) = table.get_if_mapped() else { return };
    let start = first_slot(handle, slots.len());
    for probe in 0..MAX_PROBES {
        let slot = &slots[(start + probe) & (slots.len() - 1)];
        match slot.handle.load(Ordering::Acquire) {
            0 => return,
            seen if seen == handle => {
                slot.device.store(0, Ordering::Release);
                slot.handle.store(GONE, Ordering::Release);
                return;
            }
            _ => {}
        }
    }
}

fn is_default_stream(stream: u64) -> bool {
    stream == 0 || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD
}

/// Asks for the line where the look-up of `stream`'s device starts.
#[inline(always)]
pub(crate) fn prefetch_stream(stream: u64) {
    if !is_default_stream(stream) {
        STREAMS.prefetch(first_slot(stream, STREAM_SLOTS));
    }
}

/// A stream was created on `device`.
pub(crate) fn stream_created(stream: u64, device: i8) {
    if !is_default_stream(stream) {
        remember_handle(&STREAMS, stream, device);
    }
}

/// A stream is being destroyed: its handle may be given out again.
pub(crate) fn stream_destroyed(stream: u64) {
    forget_handle(&STREAMS, stream);
}

/// The device a stream-ordered call on `stream` works on: the current
/// context's for the default streams; the stream's own otherwise, asked
/// from the driver the first time a stream we did not see created is used.
#[inline]
pub(crate) fn device_of_stream(stream: u64) -> Option<i8> {
    if is_default_stream(stream) {
        return current_device();
    }
    device_of_handle(&STREAMS, stream).or_else(|| first_sight_of_stream(stream))
}

#[cold]
fn first_sight_of_stream(stream: u64) -> Option<i8> {
    // SAFETY: cuStreamGetDevice(CUstream, CUdevice*) is the driver's signature (CUDA 12.8+).
    let asked = unsafe { real_fn::<unsafe extern "C" fn(CUstream, *mut CUdevice) -> CUresult>(Sym::cuStreamGetDevice) }
        .and_then(|get_device| {
            let mut device: CUdevice = -1;
            // SAFETY: the program's own stream, just used by it; a valid out-pointer.
            (unsafe { get_device(stream as CUstream, &mut device) } == CUDA_SUCCESS)
                .then(|| i8::try_from(device).ok())
                .flatten()
        });
    let device = asked.or_else(current_device)?;
    remember_handle(&STREAMS, stream, device);
    Some(device)
}

/// A pool was created with its memory on `device`.
pub(crate) fn pool_created(pool: u64, device: i8) {
    remember_handle(&POOLS, pool, device);
}

/// A pool is being destroyed.
pub(crate) fn pool_destroyed(pool: u64) {
    forget_handle(&POOLS, pool);
}

/// The device of a pool created in this process, if it was seen created.
#[inline]
pub(crate) fn device_of_pool(pool: u64) -> Option<i8> {
    device_of_handle(&POOLS, pool)
}

/// The driver was unloaded: its streams and pools are gone (the driver
/// loaded again may give their handles out on other devices), and so are
/// the threads' current contexts.
pub(crate) fn driver_unloaded() {
    for table in [&STREAMS, &POOLS] {
        for slot in table.get_if_mapped().unwrap_or_default() {
            if slot.handle.load(Ordering::Acquire) != 0 {
                slot.device.store(0, Ordering::Release);
                slot.handle.store(GONE, Ordering::Release);
            }
        }
    }
    process_contexts_changed();
}

/// In a forked child: streams and pools are the parent's.
pub(crate) fn forget_parent() {
    STREAMS.forget();
    POOLS.forget();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_keep_their_device_until_destroyed() {
        stream_created(0x7000_1230, 3);
        stream_created(0x7000_4560, 1);
        assert_eq!(device_of_handle(&STREAMS, 0x7000_1230), Some(3));
        assert_eq!(device_of_handle(&STREAMS, 0x7000_4560), Some(1));
        stream_destroyed(0x7000_1230);
        assert_eq!(device_of_handle(&STREAMS, 0x7000_1230), None);
        stream_created(0x7000_1230, 0);
        assert_eq!(device_of_handle(&STREAMS, 0x7000_1230), Some(0));
        pool_created(0x5000, 2);
        assert_eq!(device_of_pool(0x5000), Some(2));
        pool_destroyed(0x5000);
        assert_eq!(device_of_pool(0x5000), None);
    }
}
