//! Events for the analysis modules' tests: one process, one thread, device
//! 0, every other field zero unless given.

use cudatrace_events::tensors::Action;
use cudatrace_events::{Api, Event, Kind, Op};

/// A driver record: `op` on device memory of `kind` at `address`, `size`
/// bytes, from call stack `stack`.
pub fn driver_event(seq: u64, time_ns: u64, op: Op, kind: Kind, address: u64, size: u64, stack: u32) -> Event {
    Event {
        pid: 1,
        tid: 1,
        seq,
        time_ns,
        device: Some(0),
        stream: 0,
        api: Api::CuMemAllocV2,
        op,
        kind,
        address,
        size,
        arg1: 0,
        arg2: 0,
        stack,
    }
}

/// A record of PyTorch's caching allocator: `action` on `address`, `size`
/// bytes, from call stack `stack`.
pub fn tensor_event(seq: u64, time_ns: u64, action: Action, address: u64, size: u64, stack: u32) -> Event {
    Event {
        api: Api::TorchCachingAllocator,
        arg1: action as u64,
        ..driver_event(seq, time_ns, Op::Tensor, Kind::Device, address, size, stack)
    }
}
