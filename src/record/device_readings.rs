//! Readings of the device's memory, taken from hooks the program calls
//! anyway, at the moments a category of driver memory appears: a context
//! becoming current, a module loading, a kernel's first launch, a limit
//! changing; and, rate-limited, whenever a hook runs, with the pools and
//! graph memory the process uses.
//!
//! Every driver call made here is read-only and one of those the README
//! lists. None is made from a thread of our own: each runs on the thread of
//! the hook that asked for it, with that thread's current context.

use crate::record::devices::{self, current_device};
use crate::record::memory_limit;
use crate::record::recorder::{self, Record};
use crate::stacks::stack_table;
use crate::system::cuda_ffi::*;
use crate::system::no_cancel::without_cancellation;
use crate::system::spare_stack;
use crate::system::symbols::{real_fn, Sym};
use crate::system::tracing_switch::{guarded, tracing_on};
use cudatrace_events::measures::{limit, sample_reason, DeviceInfo, DEVICE_BLOB};
use cudatrace_events::{Api, Op};
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Devices whose ordinal fits here are measured; others are left alone.
const MAX_DEVICES: usize = 64;
/// Contexts remembered as seen.
const MAX_CONTEXTS: usize = 64;
/// Pools sampled, besides each device's current pool.
const MAX_POOLS: usize = 16;
/// At most one rate-limited reading per device this often.
const SAMPLE_INTERVAL_NS: u64 = 50_000_000;
/// Hooks look at the clock's device table at most this often.
const GATE_INTERVAL_NS: u64 = 10_000_000;

static CONTEXTS: [AtomicU64; MAX_CONTEXTS] = [const { AtomicU64::new(0) }; MAX_CONTEXTS];
static DEVICE_HAS_CONTEXT: [AtomicBool; MAX_DEVICES] = [const { AtomicBool::new(false) }; MAX_DEVICES];
static DEVICE_DESCRIBED: [AtomicBool; MAX_DEVICES] = [const { AtomicBool::new(false) }; MAX_DEVICES];
static LAST_SAMPLE: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
#[unsafe(link_section = "cudatrace_hot")]
static LAST_GATE: AtomicU64 = AtomicU64::new(0);
/// Cleared by `CUDATRACE_SAMPLES=0`: no rate-limited or exit readings.
#[unsafe(link_section = "cudatrace_hot")]
static SAMPLES_ON: AtomicBool = AtomicBool::new(true);
/// Devices whose current pool serves `cuMemAllocAsync`: one bit each.
#[unsafe(link_section = "cudatrace_hot")]
static DEFAULT_POOL_DEVICES: AtomicU64 = AtomicU64::new(0);
/// Explicit pools: (pool handle, device + 1); 0 = free slot.
static POOLS: [(AtomicU64, AtomicU64); MAX_POOLS] = [const { (AtomicU64::new(0), AtomicU64::new(0)) }; MAX_POOLS];
/// A digest of the last (reserved, used) reading recorded per device's graph
/// memory and per pool slot (0 = none yet), so that unchanged readings are not stored.
static LAST_GRAPH_READING: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
static LAST_DEFAULT_POOL_READING: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
static LAST_POOL_READING: [AtomicU64; MAX_POOLS] = [const { AtomicU64::new(0) }; MAX_POOLS];

fn slot(device: i8) -> Option<usize> {
    usize::try_from(device).ok().filter(|&d| d < MAX_DEVICES)
}

/// This thread's stream-capture mode, relaxed while it lives: a reading
/// taken while some stream is being captured into a graph must not
/// invalidate the capture, as a call the program did not make would under
/// the default (global) mode.
struct RelaxedCapture {
    previous: Option<CUstreamCaptureMode>,
}

type ExchangeCaptureMode = unsafe extern "C" fn(*mut CUstreamCaptureMode) -> CUresult;

impl RelaxedCapture {
    fn enter() -> RelaxedCapture {
        // SAFETY: the signature of cuThreadExchangeStreamCaptureMode.
        let exchange = unsafe { real_fn::<ExchangeCaptureMode>(Sym::cuThreadExchangeStreamCaptureMode) };
        let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a valid in/out pointer.
        let swapped = exchange.is_some_and(|exchange| unsafe { exchange(&mut mode) } == CUDA_SUCCESS);
        RelaxedCapture {
            previous: swapped.then_some(mode),
        }
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        let Some(mut mode) = self.previous else { return };
        // SAFETY: as in `enter`.
        if let Some(exchange) = unsafe { real_fn::<ExchangeCaptureMode>(Sym::cuThreadExchangeStreamCaptureMode) } {
            // SAFETY: a valid in/out pointer; this puts back the program's mode.
            unsafe { exchange(&mut mode) };
        }
    }
}

/// The device's (free, total) bytes as `cuMemGetInfo_v2` gives them for the
/// calling thread's current context; `None` without one.
pub(crate) fn memory_info() -> Option<(u64, u64)> {
    // SAFETY: cuMemGetInfo_v2(size_t*, size_t*) is the driver's signature.
    let get_info =
        unsafe { real_fn::<unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult>(Sym::cuMemGetInfo_v2) }?;
    let (mut free, mut total) = (0usize, 0usize);
    let _relaxed = RelaxedCapture::enter();
    // SAFETY: valid out-pointers.
    (unsafe { get_info(&mut free, &mut total) } == CUDA_SUCCESS).then_some((free as u64, total as u64))
}

fn capture_status(stream: u64) -> Option<CUstreamCaptureStatus> {
    // SAFETY: cuStreamIsCapturing(CUstream, CUstreamCaptureStatus*) is the driver's signature.
    let is_capturing = unsafe {
        real_fn::<unsafe extern "C" fn(CUstream, *mut CUstreamCaptureStatus) -> CUresult>(Sym::cuStreamIsCapturing)
    }?;
    let mut status: CUstreamCaptureStatus = 0;
    // SAFETY: a valid out-pointer; the stream is the one the program just used.
    (unsafe { is_capturing(stream as CUstream, &mut status) } == CUDA_SUCCESS).then_some(status)
}

/// Whether `stream` is being captured into a graph: a stream-ordered
/// allocation made then is the graph's, not memory of its own. A driver
/// call: ask only while a capture is under way.
pub(crate) fn stream_is_capturing(stream: u64) -> bool {
    capture_status(stream) == Some(CU_STREAM_CAPTURE_STATUS_ACTIVE)
}

/// Whether `stream`'s capture was invalidated and still awaits its end.
pub(crate) fn stream_capture_invalidated(stream: u64) -> bool {
    capture_status(stream) == Some(CU_STREAM_CAPTURE_STATUS_INVALIDATED)
}

/// A measurement record of `op` by `api` on `device`, its other fields empty.
fn measurement(op: Op, api: Api, device: i8) -> Record {
    Record {
        device,
        ..Record::new(op, api)
    }
}

/// A call measured around: the device it runs on and its free bytes before
/// (and its graph memory's reserved bytes, when that is measured too).
pub(crate) struct Around {
    device: i8,
    before: Option<u64>,
    graph_before: Option<u64>,
}

impl Around {
    /// Reads the calling thread's device before a call that may take memory
    /// from it (after recording its context, if this is the first event on it).
    pub(crate) fn start(api: Api) -> Option<Around> {
        Around::start_on(api, false)
    }

    /// Like [`Around::start`], and reads the device's graph memory too, whose
    /// growth during the call is left out of the call's own cost (graph
    /// samples count it).
    pub(crate) fn start_with_graph_memory(api: Api) -> Option<Around> {
        Around::start_on(api, true)
    }

    fn start_on(api: Api, graph_memory: bool) -> Option<Around> {
        if !tracing_on() {
            return None;
        }
        let mut around = None;
        guarded(|| {
            let device = current_device().unwrap_or(-1);
            note_device_in_use(device, api);
            around = Some(Around {
                device,
                graph_before: if graph_memory {
                    graph_memory_usage(device).map(|(reserved, _)| reserved)
                } else {
                    None
                },
                before: memory_info().map(|(free, _)| free),
            });
        });
        around
    }

    /// Reads the device again after the call and writes `record` with both
    /// readings (`arg1` before, `arg2` after), unless either failed: a
    /// reading that failed is no cost. With graph memory measured, `size` is
    /// its growth, and a graph sample is taken.
    pub(crate) fn finish(self, mut record: Record, with_stack: bool) {
        guarded(|| {
            let (Some(before), Some((after, total))) = (self.before, memory_info()) else {
                return;
            };
            memory_limit::note_reading(self.device, after, total);
            record.device = self.device;
            record.arg1 = before;
            record.arg2 = after;
            if let Some(graph_before) = self.graph_before {
                if let Some((reserved, used)) = graph_memory_usage(self.device) {
                    record.size = reserved.saturating_sub(graph_before);
                    store_graph_sample(self.device, record.api, reserved, used);
                }
            }
            recorder::write_measurement(record, with_stack);
        });
    }
}

/// Called after a context became current on this thread (`cuCtxSetCurrent`,
/// `cuCtxPushCurrent`, `cuCtxCreate`): the first time for each context,
/// reads the device's memory and the context's limits.
pub(crate) fn context_became_current(context: u64, api: Api) {
    if context == 0 || !tracing_on() || !first_sight_of(context) {
        return;
    }
    if let Some(device) = current_device() {
        describe_context(device, context, api);
    }
}

/// Called with the device of an event: if no context of the process was seen
/// on it yet, this is the first event on one.
#[inline]
pub(crate) fn note_device_in_use(device: i8, api: Api) {
    let Some(d) = slot(device) else { return };
    if !DEVICE_HAS_CONTEXT[d].load(Ordering::Relaxed) {
        describe_context(device, 0, api);
    }
}

/// Whether a context of this process was seen on `device`.
pub(crate) fn has_context(device: i8) -> bool {
    slot(device).is_some_and(|d| DEVICE_HAS_CONTEXT[d].load(Ordering::Relaxed))
}

fn first_sight_of(context: u64) -> bool {
    for slot in &CONTEXTS {
        match slot.load(Ordering::Acquire) {
            0 => {}
            seen if seen == context => return false,
            _ => continue,
        }
        match slot.compare_exchange(0, context, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(seen) if seen == context => return false,
            Err(_) => {}
        }
    }
    // More contexts than slots: each further one is measured every time it
    // becomes current, which costs readings but loses nothing.
    true
}

fn describe_context(device: i8, context: u64, api: Api) {
    // Once a device, and deep (the driver's symbols may be looked up and
    // bound here, through the loader): on a spare stack, so that it fits
    // beside a program running on a small one.
    // Its driver calls and lookups may reach cancellation points: a pending
    // cancellation of the thread waits for the program's own.
    without_cancellation(|| spare_stack::deep(|| describe_context_here(device, context, api)));
}

fn describe_context_here(device: i8, context: u64, api: Api) {
    // Without a reading there is nothing to record: the next event on the
    // device tries again.
    let Some((free, total)) = memory_info() else { return };
    if let Some(d) = slot(device) {
        DEVICE_HAS_CONTEXT[d].store(true, Ordering::Relaxed);
    }
    memory_limit::note_first_context(device, free, total);
    describe_device(device);
    let mut record = measurement(Op::Context, api, device);
    (record.address, record.arg1, record.arg2) = (context, free, total);
    recorder::write_measurement(record, false);
    // SAFETY: cuCtxGetLimit(size_t*, CUlimit) is the driver's signature.
    let get_limit = unsafe { real_fn::<unsafe extern "C" fn(*mut usize, CUlimit) -> CUresult>(Sym::cuCtxGetLimit) };
    if let Some(get_limit) = get_limit {
        for which in [limit::STACK_SIZE, limit::PRINTF_FIFO_SIZE, limit::MALLOC_HEAP_SIZE] {
            let mut value = 0usize;
            // SAFETY: a valid out-pointer and limit.
            if unsafe { get_limit(&mut value, which as CUlimit) } == CUDA_SUCCESS {
                let mut record = measurement(Op::Limit, Api::CuCtxGetLimit, device);
                (record.address, record.size) = (which, value as u64);
                recorder::write_measurement(record, false);
            }
        }
    }
}

/// Records, once per process, which device is behind `ordinal`.
fn describe_device(ordinal: i8) {
    let Some(d) = slot(ordinal) else { return };
    if DEVICE_DESCRIBED[d].swap(true, Ordering::AcqRel) {
        return;
    }
    let device = CUdevice::from(ordinal);
    let mut uuid = CUuuid::default();
    // SAFETY: cuDeviceGetUuid_v2(CUuuid*, CUdevice) is the driver's signature.
    let get_uuid =
        unsafe { real_fn::<unsafe extern "C" fn(*mut CUuuid, CUdevice) -> CUresult>(Sym::cuDeviceGetUuid_v2) };
    if let Some(get_uuid) = get_uuid {
        // SAFETY: a valid out-pointer.
        if unsafe { get_uuid(&mut uuid, device) } != CUDA_SUCCESS {
            uuid = CUuuid::default();
        }
    }
    let mut name = [0 as c_char; 128];
    // SAFETY: cuDeviceGetName(char*, int, CUdevice) is the driver's signature.
    let get_name =
        unsafe { real_fn::<unsafe extern "C" fn(*mut c_char, c_int, CUdevice) -> CUresult>(Sym::cuDeviceGetName) };
    if let Some(get_name) = get_name {
        // SAFETY: the buffer's length is passed.
        if unsafe { get_name(name.as_mut_ptr(), name.len() as c_int, device) } != CUDA_SUCCESS {
            name[0] = 0;
        }
    }
    let mut total = 0usize;
    // SAFETY: cuDeviceTotalMem_v2(size_t*, CUdevice) is the driver's signature.
    let get_total =
        unsafe { real_fn::<unsafe extern "C" fn(*mut usize, CUdevice) -> CUresult>(Sym::cuDeviceTotalMem_v2) };
    if let Some(get_total) = get_total {
        // SAFETY: a valid out-pointer.
        if unsafe { get_total(&mut total, device) } != CUDA_SUCCESS {
            total = 0;
        }
    }
    let name_len = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    let name_bytes: Vec<u8> = name[..name_len].iter().map(|&c| c as u8).collect();
    let info = DeviceInfo {
        ordinal: d as u32,
        uuid: uuid.bytes,
        total_bytes: total as u64,
        name: String::from_utf8_lossy(&name_bytes).into_owned(),
    };
    stack_table::write_blob(DEVICE_BLOB, d as u64, &info.encode());
}

/// A stream-ordered allocation on `device` came from `pool` (0: the
/// device's current pool); its pool is sampled from then on.
pub(crate) fn note_pool(pool: u64, device: i8) {
    let Some(d) = slot(device) else { return };
    if pool == 0 {
        if DEFAULT_POOL_DEVICES.load(Ordering::Relaxed) & (1 << d) == 0 {
            DEFAULT_POOL_DEVICES.fetch_or(1 << d, Ordering::Relaxed);
        }
        return;
    }
    for (handle, owner) in &POOLS {
        match handle.load(Ordering::Acquire) {
            0 => {}
            seen if seen == pool => {
                // A handle given out again after `cuMemPoolDestroy`.
                if owner.load(Ordering::Relaxed) == 0 {
                    owner.store(d as u64 + 1, Ordering::Release);
                }
                return;
            }
            _ => continue,
        }
        match handle.compare_exchange(0, pool, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                owner.store(d as u64 + 1, Ordering::Release);
                return;
            }
            Err(seen) if seen == pool => return,
            Err(_) => {}
        }
    }
}

/// Turns the rate-limited and exit readings off (`CUDATRACE_SAMPLES=0`);
/// the readings at contexts, loads and limits are still taken.
pub(crate) fn disable_samples() {
    SAMPLES_ON.store(false, Ordering::Relaxed);
}

/// Called by hooks: at most once per [`SAMPLE_INTERVAL_NS`] per device,
/// reads the memory of the calling thread's current device, its pools and
/// its graph memory. `now` is `CLOCK_MONOTONIC` in nanoseconds, as cheaply
/// as the hook has it: right after a record, the thread's latest record
/// time; on the launch path, the coarse clock. Either may stand a little
/// behind a time another thread has set the gate to, or be 0 when the
/// thread wrote no record: such a `now` is never due.
#[inline]
pub(crate) fn maybe_sample(api: Api, now: u64) {
    let gate = LAST_GATE.load(Ordering::Relaxed);
    if !elapsed(now, gate, GATE_INTERVAL_NS) {
        return;
    }
    if LAST_GATE
        .compare_exchange(gate, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Only the reading itself, past the gate, calls the driver.
    guarded(|| sample_if_due(api, now));
}

/// Whether `interval` has passed from `since` to `now`; never when `now`
/// is earlier (a difference taken signed, so that it cannot wrap).
fn elapsed(now: u64, since: u64, interval: u64) -> bool {
    now.wrapping_sub(since) as i64 >= interval as i64
}

#[cold]
fn sample_if_due(api: Api, now: u64) {
    if !tracing_on() || !SAMPLES_ON.load(Ordering::Relaxed) {
        return;
    }
    // The reading is of the current context's device, whatever device the
    // event that brought us here was about; asking the driver for it here
    // also checks the thread's cached device, at this rate only.
    let Some(device) = devices::check_current_device() else {
        return;
    };
    let Some(d) = slot(device) else { return };
    let last = LAST_SAMPLE[d].load(Ordering::Relaxed);
    if last != 0 && !elapsed(now, last, SAMPLE_INTERVAL_NS) {
        return;
    }
    if LAST_SAMPLE[d]
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    without_cancellation(|| {
        note_device_in_use(device, api);
        sample(device, api, sample_reason::PERIODIC);
    });
}

fn sample(device: i8, api: Api, reason: u64) {
    let Some((free, total)) = memory_info() else { return };
    memory_limit::note_reading(device, free, total);
    let mut record = measurement(Op::Sample, api, device);
    (record.stream, record.arg1, record.arg2) = (reason, free, total);
    recorder::write_measurement(record, false);
    sample_pools(device, api);
    sample_graph_memory(device, api);
}

/// Whether a (reserved, used) reading differs from the last one stored in
/// `last` (as a digest; 0 = none yet), which it then replaces.
fn changed(last: &AtomicU64, reserved: u64, used: u64) -> bool {
    let digest = (reserved ^ used.rotate_left(32)) | 1;
    last.swap(digest, Ordering::Relaxed) != digest
}

fn pool_usage(pool: u64) -> Option<(u64, u64)> {
    // SAFETY: cuMemPoolGetAttribute(CUmemoryPool, CUmemPool_attribute, void*) is the driver's signature.
    let get = unsafe {
        real_fn::<unsafe extern "C" fn(CUmemoryPool, CUmemPool_attribute, *mut u64) -> CUresult>(
            Sym::cuMemPoolGetAttribute,
        )
    }?;
    let (mut reserved, mut used) = (0u64, 0u64);
    let _relaxed = RelaxedCapture::enter();
    // SAFETY: both attributes are cuuint64_t values.
    let ok = unsafe {
        get(
            pool as CUmemoryPool,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            &mut reserved,
        ) == CUDA_SUCCESS
            && get(pool as CUmemoryPool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &mut used) == CUDA_SUCCESS
    };
    ok.then_some((reserved, used))
}

fn sample_pools(device: i8, api: Api) {
    let Some(d) = slot(device) else { return };
    if DEFAULT_POOL_DEVICES.load(Ordering::Relaxed) & (1 << d) != 0 {
        let mut pool: CUmemoryPool = std::ptr::null_mut();
        // SAFETY: cuDeviceGetMemPool(CUmemoryPool*, CUdevice) is the driver's signature.
        let get_pool = unsafe {
            real_fn::<unsafe extern "C" fn(*mut CUmemoryPool, CUdevice) -> CUresult>(Sym::cuDeviceGetMemPool)
        };
        // SAFETY: a valid out-pointer.
        if get_pool.is_some_and(|get_pool| unsafe { get_pool(&mut pool, CUdevice::from(device)) } == CUDA_SUCCESS) {
            if let Some((reserved, used)) = pool_usage(pool as u64) {
                if changed(&LAST_DEFAULT_POOL_READING[d], reserved, used) {
                    store_pool_sample(device, api, pool as u64, reserved, used);
                }
            }
        }
    }
    for (i, (handle, owner)) in POOLS.iter().enumerate() {
        let pool = handle.load(Ordering::Acquire);
        if pool == 0 {
            break;
        }
        if owner.load(Ordering::Acquire) != d as u64 + 1 {
            continue;
        }
        if let Some((reserved, used)) = pool_usage(pool) {
            if changed(&LAST_POOL_READING[i], reserved, used) {
                store_pool_sample(device, api, pool, reserved, used);
            }
        }
    }
}

fn store_pool_sample(device: i8, api: Api, pool: u64, reserved: u64, used: u64) {
    let mut record = measurement(Op::PoolSample, api, device);
    (record.address, record.size, record.arg1) = (pool, reserved, used);
    recorder::write_measurement(record, false);
}

/// The device's graph memory: (reserved, used) bytes.
fn graph_memory_usage(device: i8) -> Option<(u64, u64)> {
    // SAFETY: cuDeviceGetGraphMemAttribute(CUdevice, CUgraphMem_attribute, void*) is the driver's signature.
    let get = unsafe {
        real_fn::<unsafe extern "C" fn(CUdevice, CUgraphMem_attribute, *mut u64) -> CUresult>(
            Sym::cuDeviceGetGraphMemAttribute,
        )
    }?;
    if device < 0 {
        return None;
    }
    let (mut reserved, mut used) = (0u64, 0u64);
    let _relaxed = RelaxedCapture::enter();
    // SAFETY: both attributes are cuuint64_t values.
    let ok = unsafe {
        get(
            CUdevice::from(device),
            CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
            &mut reserved,
        ) == CUDA_SUCCESS
            && get(CUdevice::from(device), CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &mut used) == CUDA_SUCCESS
    };
    ok.then_some((reserved, used))
}

/// Stores a graph-memory reading unless it equals the last one stored.
fn store_graph_sample(device: i8, api: Api, reserved: u64, used: u64) {
    let Some(d) = slot(device) else { return };
    if changed(&LAST_GRAPH_READING[d], reserved, used) {
        let mut record = measurement(Op::GraphSample, api, device);
        (record.size, record.arg1) = (reserved, used);
        recorder::write_measurement(record, false);
    }
}

fn sample_graph_memory(device: i8, api: Api) {
    if let Some((reserved, used)) = graph_memory_usage(device) {
        store_graph_sample(device, api, reserved, used);
    }
}

/// One more reading from the library's exit path, on the exiting thread's
/// current context, if it still has one.
pub(crate) fn sample_at_exit() {
    if !tracing_on() || !SAMPLES_ON.load(Ordering::Relaxed) {
        return;
    }
    if let Some(device) = current_device() {
        without_cancellation(|| sample(device, Api::CuMemGetInfoV2, sample_reason::EXIT));
    }
}

/// `pool` is being destroyed: it must not be asked about again.
pub(crate) fn forget_pool(pool: u64) {
    for (i, (handle, owner)) in POOLS.iter().enumerate() {
        if pool != 0 && handle.load(Ordering::Acquire) == pool {
            owner.store(0, Ordering::Release);
            LAST_POOL_READING[i].store(0, Ordering::Relaxed);
        }
    }
}

/// In a forked child: the parent's contexts are not the child's.
pub(crate) fn forget_parent() {
    let all = CONTEXTS.iter().chain(&LAST_SAMPLE).chain(&LAST_GRAPH_READING);
    all.chain(&LAST_DEFAULT_POOL_READING)
        .chain(&LAST_POOL_READING)
        .for_each(|v| v.store(0, Ordering::Relaxed));
    DEVICE_HAS_CONTEXT
        .iter()
        .chain(&DEVICE_DESCRIBED)
        .for_each(|v| v.store(false, Ordering::Relaxed));
    for (handle, owner) in &POOLS {
        handle.store(0, Ordering::Relaxed);
        owner.store(0, Ordering::Relaxed);
    }
    DEFAULT_POOL_DEVICES.store(0, Ordering::Relaxed);
    LAST_GATE.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_has_elapsed_only_forward_in_time() {
        assert!(elapsed(1_050, 1_000, 50));
        assert!(!elapsed(1_049, 1_000, 50));
        assert!(!elapsed(999, 1_000, 50), "a time behind the gate is not due");
        assert!(!elapsed(0, 5_000_000_000, 50_000_000), "nor a thread's missing time");
        assert!(elapsed(5_000_000_000, 0, 50_000_000), "the first time after start is");
    }
}
