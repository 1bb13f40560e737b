//! Hooks for the kernel launch entry points. Since CUDA 11.7 the driver
//! loads a module's kernels lazily, at their first launch, so that is where
//! their memory appears: the first launch of each function on each device
//! is measured, and every later one costs the calling thread's cached
//! device, a lookup in a lock-free set and a look at a coarse clock (the launch hooks are also where rate-limited samples come
//! from once a caching allocator has stopped calling the allocation hooks).
//!
//! `CUkernel` handles from `cuLibraryGetKernel` (what the runtime launches
//! since CUDA 12) go through the same entry points, cast to `CUfunction`.
//!
//! A kernel also loads when it is first asked about before any launch
//! (`cuFuncGetAttribute`, `cuFuncSetAttribute`, their `cuKernel*` twins,
//! `cuKernelGetFunction`, `cuModuleGetFunction`): NCCL does so for all its
//! kernels when a communicator starts. Those entry points are measured the
//! same way, the first time each handle is seen.

use crate::hooks::support::{per_thread, real_or_fail};
use crate::record::device_readings::{self, Around};
use crate::record::devices::current_device;
use crate::record::recorder::Record;
use crate::system::clock;
use crate::system::cuda_ffi::*;
use crate::system::tracing_switch::tracing_on;
use cudatrace_events::{Api, Op};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Functions remembered as launched; a power of two.
const SET_SLOTS: usize = 1 << 16;
/// Slots probed before a function is taken as seen (the set is full there).
const MAX_PROBES: usize = 32;

/// A forgotten handle's slot.
const GONE: u64 = u64::MAX;

#[unsafe(link_section = "cudatrace_hot")]
static ENABLED: AtomicBool = AtomicBool::new(true);
/// Set in a forked child: the set is the parent's, and is emptied on the
/// child's first launch rather than at the fork, which most children (data
/// loader workers) follow with no CUDA at all.
static INHERITED: AtomicBool = AtomicBool::new(false);
static LAUNCHED: [AtomicU64; SET_SLOTS] = [const { AtomicU64::new(0) }; SET_SLOTS];

/// Turns the launch hooks into plain forwarders (`--no-launch-hooks`).
pub(crate) fn disable() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// Whether launches are measured.
#[inline]
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Adds `function` to the set; true the first time it is seen. A full
/// neighbourhood counts as seen: a kernel unmeasured, never a launch slowed.
#[inline]
pub(crate) fn first_launch(function: u64) -> bool {
    if function == 0 {
        return false;
    }
    if INHERITED.load(Ordering::Relaxed) {
        forget_inherited();
    }
    first_in(&LAUNCHED, function)
}

/// Adds `key` to `set` (open addressing, `MAX_PROBES` slots from its hash);
/// true the first time. A slot given up (`GONE`) is taken again before an
/// empty one, so that recycled handles do not fill the set. A full
/// neighbourhood counts as seen: a kernel unmeasured, never a launch slowed.
#[inline]
fn first_in(set: &[AtomicU64], key: u64) -> bool {
    let start = (key >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) as usize >> (64 - set.len().trailing_zeros());
    let mut gone = None;
    for probe in 0..MAX_PROBES {
        let slot = &set[(start + probe) & (set.len() - 1)];
        match slot.load(Ordering::Relaxed) {
            seen if seen == key => return false,
            GONE => {
                gone.get_or_insert(slot);
            }
            0 => {
                let (slot, expected) = match gone {
                    Some(gone) => (gone, GONE),
                    None => (slot, 0),
                };
                return slot
                    .compare_exchange(expected, key, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok();
            }
            _ => {}
        }
    }
    false
}

/// Removes `key` from `set`: its slot is given up.
fn forget_in(set: &[AtomicU64], key: u64) {
    let start = (key >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) as usize >> (64 - set.len().trailing_zeros());
    for probe in 0..MAX_PROBES {
        let slot = &set[(start + probe) & (set.len() - 1)];
        match slot.load(Ordering::Relaxed) {
            0 => return,
            seen if seen == key => {
                let _ = slot.compare_exchange(key, GONE, Ordering::Relaxed, Ordering::Relaxed);
                return;
            }
            _ => {}
        }
    }
}

/// A handle that will be given out again (an executable graph destroyed):
/// its next use is a first one.
pub(crate) fn forget_handle(handle: u64) {
    if handle != 0 {
        forget_in(&LAUNCHED, handle);
    }
}

/// In a forked child, or once the driver was unloaded: its kernels load
/// again in a context of its own.
pub(crate) fn forget_parent() {
    INHERITED.store(true, Ordering::Relaxed);
}

#[cold]
fn forget_inherited() {
    if INHERITED.swap(false, Ordering::AcqRel) {
        LAUNCHED
            .iter()
            .chain(&STREAMS_USED)
            .for_each(|slot| slot.store(0, Ordering::Relaxed));
    }
}

/// Streams remembered as launched into; a power of two.
const STREAM_SLOTS: usize = 1 << 14;
static STREAMS_USED: [AtomicU64; STREAM_SLOTS] = [const { AtomicU64::new(0) }; STREAM_SLOTS];

/// Adds `stream` to the set of streams launched into; true the first time.
/// The default streams are never new: their resources come with the context.
#[inline]
fn first_use_of_stream(stream: u64) -> bool {
    stream > CU_STREAM_PER_THREAD && first_in(&STREAMS_USED, stream)
}

/// A stream is being destroyed, or was just created (its handle may be one
/// a stream destroyed with its context had): a stream with its handle is new.
pub(crate) fn forget_stream(stream: u64) {
    if stream > CU_STREAM_PER_THREAD {
        forget_in(&STREAMS_USED, stream);
    }
}

/// Runs `launch`, measuring it if it is the first of `function` (the
/// kernel loads), or else the first into `stream` (the driver sets up the
/// stream's resources then).
#[inline]
fn launched(api: Api, function: u64, stream: u64, launch: impl FnOnce() -> CUresult) -> CUresult {
    if !enabled() || !tracing_on() {
        return launch();
    }
    if first_launch(on_device(function)) {
        first_use_of_stream(stream);
        return first_of_its_kind(api, function, launch);
    }
    if first_use_of_stream(stream) {
        return first_into_stream(api, stream, launch);
    }
    device_readings::maybe_sample(api, clock::coarse_ns());
    launch()
}

#[cold]
#[inline(never)]
fn first_into_stream(api: Api, stream: u64, launch: impl FnOnce() -> CUresult) -> CUresult {
    let around = Around::start(api);
    let result = launch();
    if let Some(around) = around {
        let record = Record {
            address: stream,
            size: 1,
            ..Record::new(Op::StreamObjects, api)
        };
        around.finish(record, false);
    }
    result
}

/// The stream of a `cuLaunchKernelEx` configuration.
fn stream_of(config: *const CUlaunchConfig) -> u64 {
    if config.is_null() {
        0
    } else {
        // SAFETY: the caller's configuration, valid for the call.
        unsafe { (*config).hStream as u64 }
    }
}

#[cold]
#[inline(never)]
fn first_of_its_kind(api: Api, function: u64, launch: impl FnOnce() -> CUresult) -> CUresult {
    let around = Around::start(api);
    let result = launch();
    // A failed launch may still have loaded the kernel: it is recorded too.
    if let Some(around) = around {
        let record = Record {
            address: function,
            ..Record::new(Op::KernelLoad, api)
        };
        around.finish(record, true);
    }
    result
}

/// Runs `call`, an entry point that may load the kernel `handle` lazily,
/// measuring it the first time `handle` is seen.
#[inline]
fn first_use(api: Api, handle: u64, _stream: u64, call: impl FnOnce() -> CUresult) -> CUresult {
    if !enabled() || !tracing_on() || !first_launch(on_device(handle)) {
        return call();
    }
    first_of_its_kind(api, handle, call)
}

/// A kernel's handle, told apart by the device it runs on. A `CUkernel`
/// (what the runtime launches since CUDA 12) is one handle for every
/// device, but its module loads into each device's context at its first
/// use there: a process that runs the same kernels on two devices (a
/// model replicated by `DataParallel`) loads them twice, and the second
/// device's load is measured only if its first launch there counts as a
/// first. The device is the calling thread's (what the load is measured
/// on), kept in the top byte: above any user-space address for a function
/// or kernel handle (a module's key, already a hash, only mixes further).
/// `cuKernelGetAttribute` and `cuKernelSetAttribute` name a device of their
/// own; they are keyed and measured by the calling thread's, which is the
/// one the frameworks pass.
#[inline]
fn on_device(handle: u64) -> u64 {
    match current_device() {
        Some(device) if handle != 0 => handle ^ ((u64::from(device as u8) + 1) << 56),
        _ => handle,
    }
}

/// Defines hooks that forward the call unchanged through `$via` (`launched`
/// or `first_use`), which measures it the first time `$key` is seen.
macro_rules! kernel_hooks {
    ($(
        $(#[$doc:meta])*
        $name:ident => $api:ident, $via:ident, key: $key:expr, stream: $stream:expr, ( $( $arg:ident : $ty:ty ),* );
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[allow(clippy::too_many_arguments)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($( $arg: $ty ),*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn($( $ty ),*) -> CUresult);
            // SAFETY: arguments forwarded unchanged.
            $via(Api::$api, $key as u64, $stream, || unsafe { real($( $arg ),*) })
        }
    )*};
}

kernel_hooks! {
    /// Hook for `cuLaunchKernel`.
    cuLaunchKernel => CuLaunchKernel, launched, key: f, stream: stream as u64, (
        f: CUfunction, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint, block_x: c_uint, block_y: c_uint,
        block_z: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
    /// Hook for `cuLaunchKernel_ptsz`.
    cuLaunchKernel_ptsz => CuLaunchKernelPtsz, launched, key: f, stream: per_thread(stream), (
        f: CUfunction, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint, block_x: c_uint, block_y: c_uint,
        block_z: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
    /// Hook for `cuLaunchKernelEx`.
    cuLaunchKernelEx => CuLaunchKernelEx, launched, key: f, stream: stream_of(config), (
        config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void);
    /// Hook for `cuLaunchKernelEx_ptsz`.
    cuLaunchKernelEx_ptsz => CuLaunchKernelExPtsz, launched, key: f, stream: stream_of(config), (
        config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void);
    /// Hook for `cuLaunchCooperativeKernel`.
    cuLaunchCooperativeKernel => CuLaunchCooperativeKernel, launched, key: f, stream: stream as u64, (
        f: CUfunction, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint, block_x: c_uint, block_y: c_uint,
        block_z: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void);
    /// Hook for `cuLaunchCooperativeKernel_ptsz`.
    cuLaunchCooperativeKernel_ptsz => CuLaunchCooperativeKernelPtsz, launched, key: f, stream: per_thread(stream), (
        f: CUfunction, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint, block_x: c_uint, block_y: c_uint,
        block_z: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void);
    /// Hook for `cuFuncGetAttribute`.
    cuFuncGetAttribute => CuFuncGetAttribute, first_use, key: f, stream: 0,
        (value: *mut c_int, attribute: c_int, f: CUfunction);
    /// Hook for `cuFuncSetAttribute`.
    cuFuncSetAttribute => CuFuncSetAttribute, first_use, key: f, stream: 0, (f: CUfunction, attribute: c_int, value: c_int);
    /// Hook for `cuKernelGetAttribute`.
    cuKernelGetAttribute => CuKernelGetAttribute, first_use, key: kernel, stream: 0,
        (value: *mut c_int, attribute: c_int, kernel: CUfunction, device: CUdevice);
    /// Hook for `cuKernelSetAttribute`.
    cuKernelSetAttribute => CuKernelSetAttribute, first_use, key: kernel, stream: 0,
        (attribute: c_int, value: c_int, kernel: CUfunction, device: CUdevice);
    /// Hook for `cuKernelGetFunction`: the kernel loads into the current context.
    cuKernelGetFunction => CuKernelGetFunction, first_use, key: kernel, stream: 0, (f: *mut CUfunction, kernel: CUfunction);
    /// Hook for `cuModuleGetFunction`, keyed by the module and the name's address.
    cuModuleGetFunction => CuModuleGetFunction, first_use, key: (module as u64).rotate_left(17) ^ name as u64, stream: 0,
        (f: *mut CUfunction, module: CUmodule, name: *const c_char);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_function_is_new_once_and_null_never_is() {
        let functions: Vec<u64> = (1..=5000u64).map(|i| 0x7f00_0000_0000 + i * 0x40).collect();
        let firsts: Vec<bool> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| functions.iter().map(|&f| first_launch(f)).collect::<Vec<bool>>()))
                .collect();
            let results: Vec<Vec<bool>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
            (0..functions.len())
                .map(|i| results.iter().filter(|r| r[i]).count() == 1)
                .collect()
        });
        assert!(firsts.iter().all(|&once| once), "every function is first exactly once");
        assert!(functions.iter().all(|&f| !first_launch(f)));
        assert!(!first_launch(0));
    }
}
