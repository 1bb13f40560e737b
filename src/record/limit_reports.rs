//! What the device's readings tell the memory limit (what the driver holds
//! beyond the counted allocations, what a context takes), and what the
//! program is told of the device under it: a card of the limit's size.

use super::limit_state::{device_index, enabled, ledger, ledger_in_use, LIMIT};
use crate::system::shared_ledger;
use std::sync::atomic::Ordering;

/// The ledger's figures of `device`, under a limit.
fn entry_of(device: i8) -> Option<&'static shared_ledger::DeviceEntry> {
    if !enabled() {
        return None;
    }
    let index = device_index(ledger()?, device)?;
    Some(ledger_in_use()?.entry(index))
}

/// A reading of `device` (free and total bytes, as the driver gave them):
/// what the driver holds beyond the counted allocations is updated.
pub(crate) fn note_reading(device: i8, free: u64, total: u64) {
    let Some(entry) = entry_of(device) else { return };
    let used = total.saturating_sub(free);
    entry.beyond.store(
        used.saturating_sub(entry.counted.load(Ordering::Acquire)),
        Ordering::Release,
    );
}

/// A context of this process was first seen on `device`, with the device
/// reading taken then: the tree learns what a context takes there (the
/// first one measured), for [`context_fits`].
pub(crate) fn note_first_context(device: i8, free: u64, total: u64) {
    let Some(entry) = entry_of(device) else { return };
    let before = entry
        .counted
        .load(Ordering::Acquire)
        .saturating_add(entry.beyond.load(Ordering::Acquire));
    let context = total.saturating_sub(free).saturating_sub(before);
    if context > 0 {
        let _ = entry
            .context_bytes
            .compare_exchange(0, context, Ordering::AcqRel, Ordering::Acquire);
    }
    note_reading(device, free, total);
}

/// Whether a new context on `device` fits under the limit, by what a
/// context of the tree took there before (none measured yet: whether any
/// byte is left). Asked before a context is created; a process that has a
/// context on the device already (`has_context`) always fits.
pub(crate) fn context_fits(device: i8, has_context: bool) -> bool {
    if !enabled() || has_context {
        return true;
    }
    let limit = LIMIT.load(Ordering::Relaxed);
    let Some(first) = ledger() else { return true };
    let Some(index) = device_index(first, device) else {
        return true;
    };
    let Some(ledger) = ledger_in_use() else { return true };
    let entry = ledger.entry(index);
    let held = entry
        .counted
        .load(Ordering::Acquire)
        .saturating_add(entry.beyond.load(Ordering::Acquire));
    let context = entry.context_bytes.load(Ordering::Acquire).max(1);
    held.saturating_add(context) <= limit
}

/// What `cuMemGetInfo` reports on `device` under the limit, from the
/// driver's (free, total): a card of the limit's size, with the device's
/// used bytes taken from it. Updates the ledger with the reading.
pub(crate) fn reported_memory_info(device: i8, free: u64, total: u64) -> (u64, u64) {
    let limit = LIMIT.load(Ordering::Relaxed);
    if device >= 0 {
        note_reading(device, free, total);
    }
    let used = total.saturating_sub(free);
    (free.min(limit.saturating_sub(used)), total.min(limit))
}

/// What `cuDeviceTotalMem` reports under the limit.
pub(crate) fn reported_total(total: u64) -> u64 {
    total.min(LIMIT.load(Ordering::Relaxed))
}
