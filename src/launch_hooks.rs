//! Hooks for the kernel launch entry points. Since CUDA 11.7 the driver
//! loads a module's kernels lazily, at their first launch, so that is where
//! their memory appears: the first launch of each function is measured,
//! and every later one costs a lookup in a lock-free set and a look at a
//! coarse clock (the launch hooks are also where rate-limited samples come
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

use crate::cuda_ffi::*;
use crate::device_probe::{self, Around};
use crate::hook_support::real_or_fail;
use crate::process_state::{guarded, tracing_on};
use cudatrace_events::{Api, Op};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Functions remembered as launched; a power of two.
const SET_SLOTS: usize = 1 << 16;
/// Slots probed before a function is taken as seen (the set is full there).
const MAX_PROBES: usize = 32;

static ENABLED: AtomicBool = AtomicBool::new(true);
static LAUNCHED: [AtomicU64; SET_SLOTS] = [const { AtomicU64::new(0) }; SET_SLOTS];

/// Turns the launch hooks into plain forwarders (`--no-launch-hooks`).
pub fn disable() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// Whether launches are measured.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Adds `function` to the set; true the first time it is seen. A full
/// neighbourhood counts as seen: a kernel unmeasured, never a launch slowed.
#[inline]
pub fn first_launch(function: u64) -> bool {
    if function == 0 {
        return false;
    }
    let start = (function >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) as usize >> (64 - SET_SLOTS.trailing_zeros());
    for probe in 0..MAX_PROBES {
        let slot = &LAUNCHED[(start + probe) & (SET_SLOTS - 1)];
        let seen = slot.load(Ordering::Relaxed);
        if seen == function {
            return false;
        }
        if seen == 0 {
            match slot.compare_exchange(0, function, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) if now == function => return false,
                Err(_) => {}
            }
        }
    }
    false
}

/// In a forked child: its kernels load again in a context of its own.
pub fn forget_parent() {
    LAUNCHED.iter().for_each(|slot| slot.store(0, Ordering::Relaxed));
}

/// Runs `launch`, measuring it if it is the first of `function`.
#[inline]
fn launched(api: Api, function: CUfunction, launch: impl FnOnce() -> CUresult) -> CUresult {
    if !enabled() || !tracing_on() {
        return launch();
    }
    if !first_launch(function as u64) {
        guarded(|| device_probe::maybe_sample(api));
        return launch();
    }
    first_of_its_kind(api, function, launch)
}

#[cold]
#[inline(never)]
fn first_of_its_kind(api: Api, function: CUfunction, launch: impl FnOnce() -> CUresult) -> CUresult {
    let around = Around::start(api);
    let result = launch();
    // A failed launch may still have loaded the kernel: it is recorded too.
    if let Some(around) = around {
        around.finish(Op::KernelLoad, api, function as u64, 0, true);
    }
    result
}

/// Runs `call`, an entry point that may load the kernel `handle` lazily,
/// measuring it the first time `handle` is seen.
#[inline]
fn first_use(api: Api, handle: u64, call: impl FnOnce() -> CUresult) -> CUresult {
    if !enabled() || !tracing_on() || !first_launch(handle) {
        return call();
    }
    first_of_its_kind(api, handle as CUfunction, call)
}

type LaunchKernel = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CUresult;
type LaunchKernelEx =
    unsafe extern "C" fn(*const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void) -> CUresult;
type LaunchCooperativeKernel = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
) -> CUresult;

macro_rules! launch_kernel_hooks {
    ($( $name:ident => $api:ident; )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[allow(clippy::too_many_arguments)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            f: CUfunction,
            grid_x: c_uint,
            grid_y: c_uint,
            grid_z: c_uint,
            block_x: c_uint,
            block_y: c_uint,
            block_z: c_uint,
            shared_bytes: c_uint,
            stream: CUstream,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> CUresult {
            let real = real_or_fail!($name, LaunchKernel);
            launched(Api::$api, f, || {
                // SAFETY: arguments forwarded unchanged.
                unsafe { real(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params, extra) }
            })
        }
    )*};
}

launch_kernel_hooks! {
    cuLaunchKernel => CuLaunchKernel;
    cuLaunchKernel_ptsz => CuLaunchKernelPtsz;
}

macro_rules! launch_kernel_ex_hooks {
    ($( $name:ident => $api:ident; )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            config: *const CUlaunchConfig,
            f: CUfunction,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> CUresult {
            let real = real_or_fail!($name, LaunchKernelEx);
            // SAFETY: arguments forwarded unchanged.
            launched(Api::$api, f, || unsafe { real(config, f, params, extra) })
        }
    )*};
}

launch_kernel_ex_hooks! {
    cuLaunchKernelEx => CuLaunchKernelEx;
    cuLaunchKernelEx_ptsz => CuLaunchKernelExPtsz;
}

macro_rules! launch_cooperative_hooks {
    ($( $name:ident => $api:ident; )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[allow(clippy::too_many_arguments)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            f: CUfunction,
            grid_x: c_uint,
            grid_y: c_uint,
            grid_z: c_uint,
            block_x: c_uint,
            block_y: c_uint,
            block_z: c_uint,
            shared_bytes: c_uint,
            stream: CUstream,
            params: *mut *mut c_void,
        ) -> CUresult {
            let real = real_or_fail!($name, LaunchCooperativeKernel);
            launched(Api::$api, f, || {
                // SAFETY: arguments forwarded unchanged.
                unsafe { real(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params) }
            })
        }
    )*};
}

launch_cooperative_hooks! {
    cuLaunchCooperativeKernel => CuLaunchCooperativeKernel;
    cuLaunchCooperativeKernel_ptsz => CuLaunchCooperativeKernelPtsz;
}

/// Hook for `cuFuncGetAttribute`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetAttribute(value: *mut c_int, attribute: c_int, f: CUfunction) -> CUresult {
    let real = real_or_fail!(
        cuFuncGetAttribute,
        unsafe extern "C" fn(*mut c_int, c_int, CUfunction) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    first_use(Api::CuFuncGetAttribute, f as u64, || unsafe {
        real(value, attribute, f)
    })
}

/// Hook for `cuFuncSetAttribute`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncSetAttribute(f: CUfunction, attribute: c_int, value: c_int) -> CUresult {
    let real = real_or_fail!(
        cuFuncSetAttribute,
        unsafe extern "C" fn(CUfunction, c_int, c_int) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    first_use(Api::CuFuncSetAttribute, f as u64, || unsafe {
        real(f, attribute, value)
    })
}

/// Hook for `cuKernelGetAttribute`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuKernelGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    kernel: CUfunction,
    device: CUdevice,
) -> CUresult {
    let real = real_or_fail!(
        cuKernelGetAttribute,
        unsafe extern "C" fn(*mut c_int, c_int, CUfunction, CUdevice) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    first_use(Api::CuKernelGetAttribute, kernel as u64, || unsafe {
        real(value, attribute, kernel, device)
    })
}

/// Hook for `cuKernelSetAttribute`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuKernelSetAttribute(
    attribute: c_int,
    value: c_int,
    kernel: CUfunction,
    device: CUdevice,
) -> CUresult {
    let real = real_or_fail!(
        cuKernelSetAttribute,
        unsafe extern "C" fn(c_int, c_int, CUfunction, CUdevice) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    first_use(Api::CuKernelSetAttribute, kernel as u64, || unsafe {
        real(attribute, value, kernel, device)
    })
}

/// Hook for `cuKernelGetFunction`: the kernel loads into the current context.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuKernelGetFunction(f: *mut CUfunction, kernel: CUfunction) -> CUresult {
    let real = real_or_fail!(
        cuKernelGetFunction,
        unsafe extern "C" fn(*mut CUfunction, CUfunction) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    first_use(Api::CuKernelGetFunction, kernel as u64, || unsafe { real(f, kernel) })
}

/// Hook for `cuModuleGetFunction`, keyed by the module and the name's address.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(f: *mut CUfunction, module: CUmodule, name: *const c_char) -> CUresult {
    let real = real_or_fail!(
        cuModuleGetFunction,
        unsafe extern "C" fn(*mut CUfunction, CUmodule, *const c_char) -> CUresult
    );
    let key = (module as u64).rotate_left(17) ^ name as u64;
    // SAFETY: arguments forwarded unchanged.
    first_use(Api::CuModuleGetFunction, key, || unsafe { real(f, module, name) })
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
