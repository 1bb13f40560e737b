//! Hooks for executable graphs. The driver takes memory for an executable
//! graph when it is instantiated, updated, uploaded or first launched; each
//! of those is measured around. A graph with memory nodes also grows the
//! device's graph memory then, which graph samples count: that growth is
//! read too and left out of the graph's own cost, and the first launch of
//! each executable graph takes a graph sample, so that the graph memory it
//! allocated is seen however quickly the program ends. Updates and uploads
//! are measured the first time for each executable graph only: programs
//! that update a graph every step pay nothing more after that.

use crate::hooks::launch;
use crate::hooks::support::{read, real_or_fail};
use crate::record::device_readings::{self, Around};
use crate::record::recorder::Record;
use crate::system::clock;
use crate::system::cuda_ffi::*;
use crate::system::tracing_switch::{guarded, tracing_on};
use cudatrace_events::{Api, Op};
use std::ffi::{c_char, c_void};

/// Runs `call`, measuring it around; `exec` reads the executable graph
/// (after a successful call).
fn measured(api: Api, call: impl FnOnce() -> CUresult, exec: impl FnOnce() -> u64) -> CUresult {
    if !tracing_on() {
        return call();
    }
    let around = Around::start_with_graph_memory(api);
    let result = call();
    if let Some(around) = around.filter(|_| result == CUDA_SUCCESS) {
        let record = Record {
            address: exec(),
            ..Record::new(Op::GraphExec, api)
        };
        around.finish(record, true);
    }
    result
}

macro_rules! instantiate_hooks {
    ($( $name:ident => $api:ident ( $exec:ident : *mut CUgraphExec $(, $arg:ident : $ty:ty )* ); )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`: measures what the executable graph takes.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($exec: *mut CUgraphExec $(, $arg: $ty )*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn(*mut CUgraphExec $(, $ty )*) -> CUresult);
            measured(
                Api::$api,
                // SAFETY: arguments forwarded unchanged.
                || unsafe { real($exec $(, $arg )*) },
                || {
                    let exec = read($exec, std::ptr::null_mut()) as u64;
                    // Its handle may be one a graph destroyed with its context had.
                    launch::forget_handle(exec);
                    launch::forget_handle(exec | 1);
                    exec
                },
            )
        }
    )*};
}

instantiate_hooks! {
    cuGraphInstantiate => CuGraphInstantiate(exec: *mut CUgraphExec, graph: CUgraph, error_node: *mut CUgraphNode,
        log: *mut c_char, log_size: usize);
    cuGraphInstantiate_v2 => CuGraphInstantiateV2(exec: *mut CUgraphExec, graph: CUgraph,
        error_node: *mut CUgraphNode, log: *mut c_char, log_size: usize);
    cuGraphInstantiateWithFlags => CuGraphInstantiateWithFlags(exec: *mut CUgraphExec, graph: CUgraph, flags: u64);
    cuGraphInstantiateWithParams => CuGraphInstantiateWithParams(exec: *mut CUgraphExec, graph: CUgraph,
        params: *mut c_void);
    cuGraphInstantiateWithParams_ptsz => CuGraphInstantiateWithParamsPtsz(exec: *mut CUgraphExec, graph: CUgraph,
        params: *mut c_void);
}

macro_rules! exec_hooks {
    ($( $name:ident => $api:ident ( $exec:ident : CUgraphExec $(, $arg:ident : $ty:ty )* ); )*) => {$(
        #[doc = concat!("Hook for `", stringify!($name), "`: measures what the executable graph takes.")]
        ///
        /// # Safety
        /// Same contract as the driver's function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($exec: CUgraphExec $(, $arg: $ty )*) -> CUresult {
            let real = real_or_fail!($name, unsafe extern "C" fn(CUgraphExec $(, $ty )*) -> CUresult);
            // SAFETY: arguments forwarded unchanged.
            let call = || unsafe { real($exec $(, $arg )*) };
            // The first update or upload of each executable graph (keyed
            // apart from its first launch).
            if !tracing_on() || !launch::first_launch($exec as u64 | 1) {
                return call();
            }
            measured(Api::$api, call, || $exec as u64)
        }
    )*};
}

exec_hooks! {
    cuGraphExecUpdate => CuGraphExecUpdate(exec: CUgraphExec, graph: CUgraph, error_node: *mut CUgraphNode,
        update_result: *mut c_void);
    cuGraphExecUpdate_v2 => CuGraphExecUpdateV2(exec: CUgraphExec, graph: CUgraph, result_info: *mut c_void);
    cuGraphUpload => CuGraphUpload(exec: CUgraphExec, stream: CUstream);
    cuGraphUpload_ptsz => CuGraphUploadPtsz(exec: CUgraphExec, stream: CUstream);
}

/// Runs a graph launch, measuring it if it is the first of `exec`.
fn launched(api: Api, exec: CUgraphExec, launch: impl FnOnce() -> CUresult) -> CUresult {
    if !tracing_on() || !launch::enabled() {
        return launch();
    }
    if !launch::first_launch(exec as u64) {
        device_readings::maybe_sample(api, clock::coarse_ns());
        return launch();
    }
    measured(api, launch, || exec as u64)
}

/// Hook for `cuGraphLaunch`: the first launch of each executable graph is measured.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) -> CUresult {
    let real = real_or_fail!(cuGraphLaunch, unsafe extern "C" fn(CUgraphExec, CUstream) -> CUresult);
    // SAFETY: arguments forwarded unchanged.
    launched(Api::CuGraphLaunch, exec, || unsafe { real(exec, stream) })
}

/// Hook for `cuGraphLaunch_ptsz`.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) -> CUresult {
    let real = real_or_fail!(
        cuGraphLaunch_ptsz,
        unsafe extern "C" fn(CUgraphExec, CUstream) -> CUresult
    );
    // SAFETY: arguments forwarded unchanged.
    launched(Api::CuGraphLaunchPtsz, exec, || unsafe { real(exec, stream) })
}

/// Hook for `cuGraphExecDestroy`: the handle may be given out again, and
/// the next graph that gets it is measured at its first launch.
///
/// # Safety
/// Same contract as the driver's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: CUgraphExec) -> CUresult {
    let real = real_or_fail!(cuGraphExecDestroy, unsafe extern "C" fn(CUgraphExec) -> CUresult);
    guarded(|| {
        launch::forget_handle(exec as u64);
        launch::forget_handle(exec as u64 | 1);
    });
    // SAFETY: arguments forwarded unchanged.
    unsafe { real(exec) }
}
