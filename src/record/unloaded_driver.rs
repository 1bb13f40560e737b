//! What went with an unloaded driver. A program may `dlclose` the driver
//! with allocations still live and load it again: the real driver stays
//! loaded once `cuInit` has run, but one that really unloads takes its
//! memory, streams and pools with it, and the driver loaded again may hand
//! out the same addresses. Left in the live table, the old allocations
//! would make each new one there look recorded already (and so dropped),
//! and would count live to the end.
//!
//! So once the driver is found unloaded, each allocation still live is
//! recorded freed, by no entry point (api `unknown`) and marked
//! `FREED_WITH_DRIVER`, with the stack of the program's `dlclose`; the
//! memory limit gets its bytes back, and the devices of the old streams
//! and pools are forgotten.

use crate::record::recorder::{self, Record};
use crate::record::{capture_state, devices, live_table, memory_limit};
use crate::spool::writer;
use crate::system::symbols;
use cudatrace_events::event_args::FREED_WITH_DRIVER;
use cudatrace_events::{Api, Op};
use std::sync::atomic::{AtomicU64, Ordering};

/// The driver unloads whose allocations were released already.
static UNLOADS_SETTLED: AtomicU64 = AtomicU64::new(0);

/// Releases what the driver held, if it was unloaded since the last call;
/// returns whether it was. For cold paths (the `dlclose` door, lookups),
/// inside `guarded`.
pub(crate) fn settle() -> bool {
    let unloads = symbols::driver_unloads();
    // A load first: most calls find nothing new, and pay no exchange.
    if UNLOADS_SETTLED.load(Ordering::Acquire) == unloads || UNLOADS_SETTLED.swap(unloads, Ordering::AcqRel) == unloads
    {
        return false;
    }
    live_table::drain(|_namespace, address, entry| {
        let mut record = Record::new(Op::Free, Api::Unknown);
        record.kind = entry.kind;
        record.device = entry.device;
        record.address = address;
        record.size = entry.size;
        record.arg1 = FREED_WITH_DRIVER;
        recorder::write_untagged(writer::reserve_seq(), record, true);
        if memory_limit::counts(entry.kind, entry.device) {
            memory_limit::give_back(entry.device, entry.size);
        }
    });
    devices::driver_unloaded();
    // As in a forked child: no capture is under way any more.
    capture_state::forget_parent();
    true
}
