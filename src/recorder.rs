//! Turns what a hook saw into records: consults the live table so that each
//! allocation and free is recorded exactly once, and orders frees before any
//! reuse of their address.
//!
//! Every function here is called from a hook after (or, for frees, around)
//! the real call, and runs inside [`guarded`], so it can neither unwind into
//! the program nor change its `errno`.

use crate::cuda_ffi::*;
use crate::device_probe;
use crate::live_table::{self, Entry, Inserted, Namespace};
use crate::process_state::{current_tid, guarded, tracing_on};
use crate::spool_writer::{self, Counter};
use crate::symbols::{real_fn, Sym};
use cudatrace_events::{Api, Kind, Op, RawRecord};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// The runtime entry point this thread is inside, or 0.
    static RUNTIME_API: Cell<u8> = const { Cell::new(0) };
}

/// Set once the live table has refused an allocation; from then on frees of
/// unknown memory are recorded too, since their allocation may be one of those.
static TABLE_OVERFLOWED: AtomicBool = AtomicBool::new(false);

/// Marks the current thread as inside a runtime call until dropped, so that
/// the driver events it causes carry the runtime entry point's name. Nested
/// runtime calls keep the outermost name.
pub struct RuntimeCall {
    outermost: bool,
}

impl RuntimeCall {
    /// Enters runtime entry point `api`.
    #[inline]
    pub fn enter(api: Api) -> RuntimeCall {
        let outermost = RUNTIME_API
            .try_with(|tag| {
                let free = tag.get() == 0;
                if free {
                    tag.set(api as u8);
                }
                free
            })
            .unwrap_or(false);
        RuntimeCall { outermost }
    }
}

impl Drop for RuntimeCall {
    #[inline]
    fn drop(&mut self) {
        if self.outermost {
            let _ = RUNTIME_API.try_with(|tag| tag.set(0));
        }
    }
}

/// The name to record for driver call `api`: the enclosing runtime call if any.
#[inline]
fn tagged(api: Api) -> Api {
    let tag = RUNTIME_API.try_with(Cell::get).unwrap_or(0);
    if tag == 0 {
        api
    } else {
        Api::from_code(tag).unwrap_or(api)
    }
}

/// Which device an allocation is on.
#[derive(Clone, Copy)]
pub enum DeviceOf {
    /// The device of the calling thread's current context.
    Current,
    /// A known ordinal (-1 for host memory).
    Known(i8),
}

fn ordinal(device: DeviceOf) -> i8 {
    match device {
        DeviceOf::Known(ordinal) => ordinal,
        DeviceOf::Current => device_probe::current_device().unwrap_or(-1),
    }
}

/// The allocation call a hook is reporting on.
#[derive(Clone, Copy)]
pub struct Allocation {
    /// The driver entry point (the runtime tag is applied here).
    pub api: Api,
    /// Kind of memory.
    pub kind: Kind,
    /// Key space of the address.
    pub namespace: Namespace,
    /// Where the memory lives.
    pub device: DeviceOf,
    /// Stream of stream-ordered calls, else 0.
    pub stream: u64,
    /// Pitch for pitched memory, pool for pool allocations, else 0.
    pub arg1: u64,
}

impl Allocation {
    /// A plain allocation of `kind` in `namespace` on the current device.
    pub fn new(api: Api, kind: Kind, namespace: Namespace) -> Allocation {
        Allocation {
            api,
            kind,
            namespace,
            device: DeviceOf::Current,
            stream: 0,
            arg1: 0,
        }
    }
}

/// Stores a record in the slot of `seq`, with the caller's thread and `stack`.
#[allow(clippy::too_many_arguments)]
fn store_with_stack(
    seq: u64,
    op: Op,
    api: Api,
    kind: Kind,
    device: i8,
    address: u64,
    size: u64,
    stream: u64,
    arg1: u64,
    arg2: u64,
    stack: u32,
) {
    spool_writer::write(
        seq,
        RawRecord {
            commit: 0,
            time_ns: 0,
            address,
            size,
            stream,
            arg1,
            arg2,
            tid: current_tid(),
            op: op as u8,
            kind: kind as u8,
            api: api as u8,
            device,
            stack,
            spare: 0,
        },
    );
}

/// Stores a memory event in the slot of `seq`, with the caller's stack.
#[allow(clippy::too_many_arguments)]
fn store(
    seq: u64,
    op: Op,
    api: Api,
    kind: Kind,
    device: i8,
    address: u64,
    size: u64,
    stream: u64,
    arg1: u64,
    arg2: u64,
) {
    let stack = crate::call_stack::capture();
    store_with_stack(seq, op, api, kind, device, address, size, stream, arg1, arg2, stack);
}

/// Stores a measurement record (see `cudatrace_events::measures`) under a
/// fresh sequence number; `with_stack` records the caller's stack too.
#[allow(clippy::too_many_arguments)]
pub fn store_measurement(
    op: Op,
    api: Api,
    device: i8,
    address: u64,
    size: u64,
    stream: u64,
    arg1: u64,
    arg2: u64,
    with_stack: bool,
) {
    let seq = spool_writer::reserve_seq();
    let stack = if with_stack { crate::call_stack::capture() } else { 0 };
    store_with_stack(
        seq,
        op,
        api,
        Kind::Device,
        device,
        address,
        size,
        stream,
        arg1,
        arg2,
        stack,
    );
}

/// Reports an allocation call that returned `result`. `address` and `size`
/// read the out-parameters; they are only called on success.
#[inline]
pub fn allocation_returned(
    result: CUresult,
    call: Allocation,
    requested: u64,
    address: impl FnOnce() -> u64,
    size: impl FnOnce() -> u64,
) {
    if result == CUDA_SUCCESS {
        guarded(|| {
            let address = address();
            let size = size();
            let device = ordinal(call.device);
            let mut call = call;
            if call.kind == Kind::Pool && device_probe::stream_is_capturing(call.stream) {
                call.kind = Kind::GraphAllocation;
            }
            let entry = Entry {
                size,
                kind: call.kind,
                device,
            };
            match live_table::insert(call.namespace, address, entry) {
                Inserted::AlreadyPresent => return,
                Inserted::NoRoom => {
                    TABLE_OVERFLOWED.store(true, Ordering::Relaxed);
                    spool_writer::bump(Counter::RegistryOverflow);
                }
                Inserted::New => {}
            }
            let seq = spool_writer::reserve_seq();
            store(
                seq,
                Op::Alloc,
                tagged(call.api),
                call.kind,
                device,
                address,
                size,
                call.stream,
                call.arg1,
                0,
            );
            if device >= 0 && call.kind != Kind::GraphAllocation {
                if call.kind == Kind::Pool {
                    device_probe::note_pool(call.arg1, device);
                }
                // Readings are of the current context's device: only an
                // allocation on it can be the first event there.
                if matches!(call.device, DeviceOf::Current) {
                    device_probe::note_device_in_use(device, call.api);
                }
                device_probe::maybe_sample(call.api);
            }
        });
    } else if result == CUDA_ERROR_OUT_OF_MEMORY {
        guarded(|| out_of_memory(call, requested));
    }
}

fn out_of_memory(call: Allocation, requested: u64) {
    let device = ordinal(call.device);
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: cuMemGetInfo_v2(size_t*, size_t*) is the driver's signature.
    if let Some(get_info) =
        unsafe { real_fn::<unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult>(Sym::cuMemGetInfo_v2) }
    {
        // SAFETY: valid out-pointers; on failure we record zeros.
        if unsafe { get_info(&mut free, &mut total) } != CUDA_SUCCESS {
            (free, total) = (0, 0);
        }
    }
    let seq = spool_writer::reserve_seq();
    store(
        seq,
        Op::Oom,
        tagged(call.api),
        call.kind,
        device,
        0,
        requested,
        call.stream,
        free as u64,
        total as u64,
    );
}

/// A free in flight: its table entry is removed and its sequence number
/// reserved before the real call, so that no other thread can record a reuse
/// of the address ahead of it.
pub struct PendingFree {
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
pub fn free_starting(namespace: Namespace, address: u64) -> Option<PendingFree> {
    if address == 0 || !tracing_on() {
        return None;
    }
    let removed = live_table::remove(namespace, address);
    let record = removed.is_some() || TABLE_OVERFLOWED.load(Ordering::Relaxed);
    let seq = record.then(spool_writer::reserve_seq);
    Some(PendingFree {
        seq,
        removed,
        namespace,
        address,
    })
}

/// Call after the real free returned `result`.
#[inline]
pub fn free_returned(pending: Option<PendingFree>, result: CUresult, api: Api, stream: u64) {
    let Some(pending) = pending else { return };
    guarded(|| {
        let succeeded = result == CUDA_SUCCESS;
        match (pending.seq, pending.removed) {
            (Some(seq), Some(entry)) if succeeded => {
                store(
                    seq,
                    Op::Free,
                    tagged(api),
                    entry.kind,
                    entry.device,
                    pending.address,
                    entry.size,
                    stream,
                    0,
                    0,
                );
                if entry.device >= 0 {
                    device_probe::maybe_sample(api);
                }
            }
            (Some(seq), None) if succeeded => {
                spool_writer::bump(Counter::UnknownFree);
                let kind = default_kind(pending.namespace);
                store(seq, Op::Free, tagged(api), kind, -1, pending.address, 0, stream, 0, 0);
            }
            (None, _) => {
                if succeeded {
                    spool_writer::bump(Counter::UnknownFree);
                }
            }
            (Some(seq), removed) => {
                // The free failed: the memory is still allocated.
                let (kind, device) = match removed {
                    Some(entry) => {
                        live_table::insert(pending.namespace, pending.address, entry);
                        (entry.kind, entry.device)
                    }
                    None => (default_kind(pending.namespace), -1),
                };
                store(
                    seq,
                    Op::Failed,
                    tagged(api),
                    kind,
                    device,
                    pending.address,
                    0,
                    stream,
                    0,
                    0,
                );
            }
        }
    });
}

/// A VMM address-space operation: reserving or mapping (recorded after they
/// succeed) and unreserving or unmapping (sequenced before the real call).
#[derive(Clone, Copy)]
pub struct AddressRange {
    /// `Reserve`, `Unreserve`, `Map` or `Unmap`.
    pub op: Op,
    /// Driver entry point.
    pub api: Api,
    /// Length of the range.
    pub size: u64,
    /// Physical handle, for `Map`.
    pub handle: u64,
    /// Offset into the handle, for `Map`.
    pub offset: u64,
}

/// Call before the real call of an `Unreserve` or `Unmap`.
#[inline]
pub fn range_release_starting() -> Option<u64> {
    tracing_on().then(spool_writer::reserve_seq)
}

/// Call after the real call returned `result`; `reserved` is what
/// [`range_release_starting`] returned, or `None` for `Reserve` and `Map`.
#[inline]
pub fn range_returned(result: CUresult, reserved: Option<u64>, range: AddressRange, address: impl FnOnce() -> u64) {
    let releasing = matches!(range.op, Op::Unreserve | Op::Unmap);
    if releasing && reserved.is_none() {
        return;
    }
    guarded(|| {
        if result != CUDA_SUCCESS {
            if let Some(seq) = reserved {
                store(
                    seq,
                    Op::Failed,
                    tagged(range.api),
                    Kind::VirtualAddress,
                    -1,
                    address(),
                    range.size,
                    0,
                    0,
                    0,
                );
            }
            return;
        }
        let device = match range.op {
            Op::Map => live_table::get(Namespace::VmmHandle, range.handle).map_or(-1, |entry| entry.device),
            _ => -1,
        };
        let seq = reserved.unwrap_or_else(spool_writer::reserve_seq);
        store(
            seq,
            range.op,
            tagged(range.api),
            Kind::VirtualAddress,
            device,
            address(),
            range.size,
            0,
            range.handle,
            range.offset,
        );
    });
}
