//! Turns what a hook saw into records: consults the live table so that each
//! allocation and free is recorded exactly once, and orders frees before any
//! reuse of their address.
//!
//! Every function here is called from a hook after (or, for frees, around)
//! the real call, and runs inside [`guarded`], so it can neither unwind into
//! the program nor change its `errno`. Nothing here calls the driver but
//! the reading that goes with an out-of-memory error; device readings are
//! the hooks' to trigger, after the recorder has returned.

use crate::record::live_table::{self, Entry, Inserted, Namespace};
use crate::spool::recording_switch;
use crate::spool::writer::{self, Counter};
use crate::stacks::call_stack;
use crate::system::cuda_ffi::*;
use crate::system::symbols::{real_fn, Sym};
use crate::system::thread::current_tid;
use crate::system::thread_block;
use crate::system::tracing_switch::{guarded, tracing_on};
use cudatrace_events::event_args::REFUSED_BY_LIMIT;
use cudatrace_events::recording_switch::PAUSED_STACK;
use cudatrace_events::{Api, Kind, Op, RawRecord};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the live table has refused an allocation; from then on frees of
/// unknown memory are recorded too, since their allocation may be one of those.
#[unsafe(link_section = "cudatrace_hot")]
static TABLE_OVERFLOWED: AtomicBool = AtomicBool::new(false);

/// Marks the current thread as inside a runtime call until dropped, so that
/// the driver events it causes carry the runtime entry point's name. Nested
/// runtime calls keep the outermost name.
pub(crate) struct RuntimeCall {
    outermost: bool,
}

impl RuntimeCall {
    /// Enters runtime entry point `api`, called by the program from
    /// `caller` (0 when not known): with `--stacks none` that is the owner
    /// of the driver events inside the call.
    #[inline]
    pub(crate) fn enter(api: Api, caller: u64) -> RuntimeCall {
        // The thread block's `runtime_api` and `runtime_caller` are this
        // module's: the runtime call this thread is inside, and with
        // `--stacks none` the program's return address from it (the owner
        // of the driver events inside the call).
        let block = thread_block::current();
        let outermost = block.runtime_api.get() == 0;
        if outermost {
            block.runtime_api.set(api as u8);
            if caller != 0 && tracing_on() {
                block.runtime_caller.set(caller);
            }
        }
        RuntimeCall { outermost }
    }
}

impl Drop for RuntimeCall {
    #[inline]
    fn drop(&mut self) {
        if self.outermost {
            let block = thread_block::current();
            block.runtime_api.set(0);
            block.runtime_caller.set(0);
        }
    }
}

/// Whether the calling thread is inside a runtime entry point's hook.
#[inline(always)]
pub(crate) fn inside_runtime_call() -> bool {
    thread_block::current().runtime_api.get() != 0
}

/// The name to record for driver call `api`: the enclosing runtime call if any.
#[inline]
fn tagged(api: Api) -> Api {
    let tag = thread_block::current().runtime_api.get();
    if tag == 0 {
        api
    } else {
        Api::from_code(tag).unwrap_or(api)
    }
}

/// One record's fields, as the hooks know them; the writer adds the thread,
/// the time and, when asked, the call stack.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Record {
    /// What happened.
    pub(crate) op: Op,
    /// The entry point (the runtime tag is applied when written).
    pub(crate) api: Api,
    /// Kind of memory.
    pub(crate) kind: Kind,
    /// Device ordinal, or -1 (host memory, or not known).
    pub(crate) device: i8,
    /// Address or handle.
    pub(crate) address: u64,
    /// Bytes.
    pub(crate) size: u64,
    /// Stream of stream-ordered calls, else 0.
    pub(crate) stream: u64,
    /// First op-specific word.
    pub(crate) arg1: u64,
    /// Second op-specific word.
    pub(crate) arg2: u64,
}

impl Record {
    /// A record of `op` by `api`, every other field empty.
    pub(crate) fn new(op: Op, api: Api) -> Record {
        Record {
            op,
            api,
            kind: Kind::Device,
            device: -1,
            address: 0,
            size: 0,
            stream: 0,
            arg1: 0,
            arg2: 0,
        }
    }
}

/// Writes `record` into the slot of `seq`, with the caller's stack when
/// `with_stack` is set, unless the job's recording is paused: then the
/// stack is the paused mark.
pub(crate) fn write(seq: u64, record: Record, with_stack: bool) {
    writer::write(seq, raw_record(record, stack_word(with_stack)));
}

/// Writes `record` as [`write`] does, but with its own api even inside a
/// runtime call: for a record that no entry point made.
pub(crate) fn write_untagged(seq: u64, record: Record, with_stack: bool) {
    let mut raw = raw_record(record, stack_word(with_stack));
    raw.api = record.api as u8;
    writer::write(seq, raw);
}

/// The stack word of a record: the caller's stack when `with_stack` is
/// set, unless the job's recording is paused.
#[inline]
fn stack_word(with_stack: bool) -> u32 {
    if !with_stack {
        0
    } else if recording_switch::paused() {
        PAUSED_STACK
    } else {
        call_stack::capture(thread_block::current().runtime_caller.get())
    }
}

/// The spool's form of `record`; the writer adds the time.
#[inline]
fn raw_record(record: Record, stack: u32) -> RawRecord {
    RawRecord {
        commit: 0,
        time_ns: 0,
        address: record.address,
        size: record.size,
        stream: record.stream,
        arg1: record.arg1,
        arg2: record.arg2,
        tid: current_tid(),
        op: record.op as u8,
        kind: record.kind as u8,
        api: tagged(record.api) as u8,
        device: record.device,
        stack,
        spare: 0,
    }
}

/// Writes a measurement record (see `cudatrace_events::measures`) under a
/// fresh sequence number; `with_stack` records the caller's stack too.
pub(crate) fn write_measurement(record: Record, with_stack: bool) {
    write(writer::reserve_seq(), record, with_stack);
}

/// Notes in the spool that this process forked `child`, if it has a spool
/// (a process that never used CUDA is not in the trace, and is not put
/// there by a fork).
pub(crate) fn forked(child: u32) {
    if !writer::is_open() {
        return;
    }
    let mut record = Record::new(Op::Fork, Api::Unknown);
    record.arg1 = u64::from(child);
    // `fork` may be called from a signal handler, perhaps one that
    // interrupted this thread while it grew the spool: the grower's lock
    // refuses that thread rather than letting it wait for itself.
    write(writer::reserve_seq(), record, false);
}

/// An allocation the driver made, with its device and kind worked out by
/// the hook.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Allocation {
    /// The driver entry point.
    pub(crate) api: Api,
    /// Kind of memory.
    pub(crate) kind: Kind,
    /// Key space of the address.
    pub(crate) namespace: Namespace,
    /// Device ordinal, or -1.
    pub(crate) device: i8,
    /// Address or handle the driver returned.
    pub(crate) address: u64,
    /// Bytes.
    pub(crate) size: u64,
    /// Stream of stream-ordered calls, else 0.
    pub(crate) stream: u64,
    /// Pitch for pitched memory, pool for pool allocations, else 0.
    pub(crate) arg1: u64,
}

/// Records an allocation the driver made, unless it was recorded already;
/// returns whether it was new. Call inside [`guarded`].
pub(crate) fn allocated(allocation: Allocation) -> bool {
    let entry = Entry {
        size: allocation.size,
        kind: allocation.kind,
        device: allocation.device,
    };
    match live_table::insert(allocation.namespace, allocation.address, entry) {
        Inserted::AlreadyPresent => return false,
        Inserted::NoRoom => {
            TABLE_OVERFLOWED.store(true, Ordering::Relaxed);
            writer::bump(Counter::RegistryOverflow);
        }
        Inserted::New => {}
    }
    let record = Record {
        op: Op::Alloc,
        api: allocation.api,
        kind: allocation.kind,
        device: allocation.device,
        address: allocation.address,
        size: allocation.size,
        stream: allocation.stream,
        arg1: allocation.arg1,
        arg2: 0,
    };
    write(writer::reserve_seq(), record, true);
    true
}

/// Records an allocation call that ran out of memory, with the device's
/// free and total bytes. Call inside [`guarded`].
pub(crate) fn out_of_memory(api: Api, kind: Kind, device: i8, requested: u64, stream: u64) {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: cuMemGetInfo_v2(size_t*, size_t*) is the driver's signature.
    let get_info = unsafe { real_fn::<unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult>(Sym::cuMemGetInfo_v2) };
    if let Some(get_info) = get_info {
        // SAFETY: valid out-pointers; on failure we record zeros.
        if unsafe { get_info(&mut free, &mut total) } != CUDA_SUCCESS {
            (free, total) = (0, 0);
        }
    }
    write_out_of_memory(api, kind, device, requested, stream, (0, free as u64, total as u64));
}

/// Records an allocation the memory limit refused: what the limit had left
/// on the device, and the limit. Call inside [`guarded`].
pub(crate) fn refused_by_limit(api: Api, kind: Kind, device: i8, requested: u64, stream: u64, left: u64, limit: u64) {
    write_out_of_memory(api, kind, device, requested, stream, (REFUSED_BY_LIMIT, left, limit));
}

fn write_out_of_memory(
    api: Api,
    kind: Kind,
    device: i8,
    requested: u64,
    stream: u64,
    (mark, free, total): (u64, u64, u64),
) {
    let record = Record {
        op: Op::Oom,
        api,
        kind,
        device,
        address: mark,
        size: requested,
        stream,
        arg1: free,
        arg2: total,
    };
    write(writer::reserve_seq(), record, true);
}

/// A free in flight: its table entry is removed and its sequence number
/// reserved before the real call, so that no other thread can record a reuse
/// of the address ahead of it.
pub(crate) struct PendingFree {
    seq: Option<u64>,
    removed: Option<Entry>,
    namespace: Namespace,
    address: u64,
}

fn default_kind(namespace: Namespace) -> Kind {
    match namespace {
        Namespace::Device => Kind::Device,
        Namespace::Host => Kind::HostPinned,
        Namespace::Array => Kind::Array,
        Namespace::VmmHandle => Kind::VmmPhysical,
        Namespace::IpcImport => Kind::IpcImport,
    }
}

/// Call before the real free of `address`.
#[inline]
pub(crate) fn free_starting(namespace: Namespace, address: u64) -> Option<PendingFree> {
    if address == 0 || !tracing_on() {
        return None;
    }
    let removed = live_table::remove(namespace, address);
    let record = removed.is_some() || TABLE_OVERFLOWED.load(Ordering::Relaxed);
    let seq = record.then(writer::reserve_seq);
    Some(PendingFree {
        seq,
        removed,
        namespace,
        address,
    })
}

/// Call after the real free returned `result`. Returns what was freed,
/// when a free of known memory was recorded.
#[inline]
pub(crate) fn free_returned(pending: Option<PendingFree>, result: CUresult, api: Api, stream: u64) -> Option<Entry> {
    let pending = pending?;
    let mut freed_on = None;
    guarded(|| {
        let succeeded = result == CUDA_SUCCESS;
        let mut record = Record::new(Op::Free, api);
        record.address = pending.address;
        record.stream = stream;
        match (pending.seq, pending.removed) {
            (Some(seq), Some(entry)) if succeeded => {
                record.kind = entry.kind;
                record.device = entry.device;
                record.size = entry.size;
                write(seq, record, true);
                freed_on = Some(entry);
            }
            (Some(seq), None) if succeeded => {
                writer::bump(Counter::UnknownFree);
                record.kind = default_kind(pending.namespace);
                write(seq, record, true);
            }
            (None, _) => {
                if succeeded {
                    writer::bump(Counter::UnknownFree);
                }
            }
            (Some(seq), removed) => {
                // The free failed: the memory is still allocated.
                record.op = Op::Failed;
                (record.kind, record.device) = match removed {
                    Some(entry) => {
                        live_table::insert(pending.namespace, pending.address, entry);
                        (entry.kind, entry.device)
                    }
                    None => (default_kind(pending.namespace), -1),
                };
                write(seq, record, true);
            }
        }
    });
    freed_on
}

/// A VMM address-space operation: reserving or mapping (recorded after they
/// succeed) and unreserving or unmapping (sequenced before the real call).
#[derive(Clone, Copy)]
pub(crate) struct AddressRange {
    /// `Reserve`, `Unreserve`, `Map` or `Unmap`.
    pub(crate) op: Op,
    /// Driver entry point.
    pub(crate) api: Api,
    /// Length of the range.
    pub(crate) size: u64,
    /// Physical handle, for `Map`.
    pub(crate) handle: u64,
    /// Offset into the handle, for `Map`.
    pub(crate) offset: u64,
}

/// Call before the real call of an `Unreserve` or `Unmap`.
#[inline]
pub(crate) fn range_release_starting() -> Option<u64> {
    tracing_on().then(writer::reserve_seq)
}

/// Call after the real call returned `result`; `reserved` is what
/// [`range_release_starting`] returned, or `None` for `Reserve` and `Map`.
#[inline]
pub(crate) fn range_returned(
    result: CUresult,
    reserved: Option<u64>,
    range: AddressRange,
    address: impl FnOnce() -> u64,
) {
    let releasing = matches!(range.op, Op::Unreserve | Op::Unmap);
    if releasing && reserved.is_none() {
        return;
    }
    guarded(|| {
        let mut record = Record::new(range.op, range.api);
        record.kind = Kind::VirtualAddress;
        record.address = address();
        record.size = range.size;
        if result != CUDA_SUCCESS {
            if let Some(seq) = reserved {
                record.op = Op::Failed;
                write(seq, record, true);
            }
            return;
        }
        if range.op == Op::Map {
            record.device = live_table::get(Namespace::VmmHandle, range.handle).map_or(-1, |entry| entry.device);
            record.arg1 = range.handle;
            record.arg2 = range.offset;
        }
        write(reserved.unwrap_or_else(writer::reserve_seq), record, true);
    });
}
