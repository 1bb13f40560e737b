//! Tensor records: one per action of PyTorch's caching allocator, and the
//! status records that say what became of tensor tracking. The tracker in
//! the hooks layer reads PyTorch's entries and calls in here.
//!
//! Also keeps, per thread, the last segment-sized driver allocation or
//! mapping the hooks recorded: the allocator's first segment action must
//! match it before any tensor is believed.

use crate::record::recorder::{self, Record};
use crate::spool::writer;
use crate::system::thread_block;
use cudatrace_events::tensors::{status, Action};
use cudatrace_events::{Api, Kind, Op};

/// Notes a driver allocation or mapping the hooks just recorded.
#[inline]
pub(crate) fn note_driver_memory(address: u64, size: u64) {
    thread_block::current().last_segment.set((address, size));
}

/// Whether a segment action of PyTorch's (`action`, `address`, `size`)
/// matches the driver call this thread made just before: a segment is
/// exactly the `cuMemAlloc` behind it; a mapped range of an expandable
/// segment ends with the last page `cuMemMap` mapped.
pub(crate) fn matches_driver_memory(action: Action, address: u64, size: u64) -> bool {
    let (last_address, last_size) = thread_block::current().last_segment.get();
    if last_size == 0 {
        return false;
    }
    match action {
        Action::SegmentAlloc => (address, size) == (last_address, last_size),
        Action::SegmentMap => {
            last_address >= address && last_address.checked_add(last_size) == address.checked_add(size)
        }
        _ => false,
    }
}

/// One action as the tracker read it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TensorAction {
    /// What the allocator did.
    pub(crate) action: Action,
    /// Device ordinal.
    pub(crate) device: i8,
    /// Block or segment address; for an OOM, the device's free bytes.
    pub(crate) address: u64,
    /// Bytes; for an OOM, the bytes asked for.
    pub(crate) size: u64,
    /// The stream the block belongs to.
    pub(crate) stream: u64,
    /// The pool, packed (see `cudatrace_events::tensors::pool_word`).
    pub(crate) pool: u64,
}

/// Writes one action; an allocation carries the caller's stack.
pub(crate) fn write_action(action: TensorAction) {
    let record = Record {
        op: Op::Tensor,
        api: Api::TorchCachingAllocator,
        kind: Kind::Device,
        device: action.device,
        address: action.address,
        size: action.size,
        stream: action.stream,
        arg1: action.action as u64,
        arg2: action.pool,
    };
    recorder::write(writer::reserve_seq(), record, action.action == Action::Alloc);
}

/// Writes a status record: `what` one of `cudatrace_events::tensors::status`,
/// `detail` its reason or count, `version` PyTorch's version word.
pub(crate) fn write_status(what: u64, detail: u64, version: u64) {
    debug_assert!((status::ATTACHED..=status::NOT_RECORDED).contains(&what));
    let mut record = Record::new(Op::TensorStatus, Api::TorchCachingAllocator);
    record.address = version;
    record.arg1 = what;
    record.arg2 = detail;
    recorder::write(writer::reserve_seq(), record, false);
}
