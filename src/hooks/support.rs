//! What every hook needs: its real function, the lines its event will
//! touch asked for early, and the out-parameters the driver wrote.

use crate::record::devices;
use crate::record::live_table::{self, Namespace};
use crate::record::recorder;
use crate::spool::writer as spool_writer;
use crate::system::cuda_ffi::{CUstream, CU_STREAM_PER_THREAD};
use crate::system::{hot_statics, process_mark, thread_block};

/// The real driver function `$sym` with C signature `$ty`, or an early
/// `return CUDA_ERROR_NOT_INITIALIZED` from the hook when it cannot be found.
macro_rules! real_or_fail {
    ($sym:ident, $ty:ty) => {
        // SAFETY: `$ty` is the C signature of the export `$sym`.
        match unsafe { $crate::system::symbols::real_fn::<$ty>($crate::system::symbols::Sym::$sym) } {
            Some(real) => real,
            None => return $crate::system::cuda_ffi::CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}
pub(crate) use real_or_fail;

/// The handle a `_ptsz` entry point means by `stream`: its NULL is the
/// calling thread's default stream, not the legacy one.
#[inline]
pub(crate) fn per_thread(stream: CUstream) -> u64 {
    if stream.is_null() {
        CU_STREAM_PER_THREAD
    } else {
        stream as u64
    }
}

/// Reads an out-parameter the driver has just written, tolerating NULL.
pub(crate) fn read<T: Copy>(ptr: *const T, or: T) -> T {
    if ptr.is_null() {
        or
    } else {
        // SAFETY: the driver succeeded, so a non-null out-parameter holds a value.
        unsafe { *ptr }
    }
}

/// Asks for the lines the event of the hook just entered will touch: the
/// thread's block, the spool's next record and, for a free, the live
/// table's entry; for a stream-ordered call, the stream's device. Called on
/// a hook's entry, before the real call, so that the lines arrive while the
/// driver or the runtime works: a training process pushes them out of the
/// caches between two events, and each would otherwise be a wait of its own.
#[inline(always)]
pub(crate) fn prepare_event(freeing: Option<(Namespace, u64)>, stream: u64) {
    thread_block::prefetch();
    hot_statics::prefetch();
    process_mark::prefetch();
    spool_writer::prefetch_next_record();
    prepare_call_lines(freeing, stream);
}

/// [`prepare_event`] for a driver hook. One that a runtime hook called asks
/// only for its call's own lines: the runtime hook asked for the rest on its
/// entry, moments ago.
#[inline(always)]
pub(crate) fn prepare_driver_event(freeing: Option<(Namespace, u64)>, stream: u64) {
    if recorder::inside_runtime_call() {
        prepare_call_lines(freeing, stream);
    } else {
        prepare_event(freeing, stream);
    }
}

/// The lines of the call itself: a free's live-table entry, a stream's device.
#[inline(always)]
fn prepare_call_lines(freeing: Option<(Namespace, u64)>, stream: u64) {
    if let Some((namespace, address)) = freeing {
        live_table::prefetch(namespace, address);
    }
    devices::prefetch_stream(stream);
}
