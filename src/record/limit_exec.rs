//! The memory limit across `exec`: the share of the ledger an image held
//! leaves it just before the image is replaced (the driver frees its
//! memory then), and comes back if the `exec` fails.

use super::limit_state::{enabled, ledger_in_use, CLAIMING, MY_SLOT};
use crate::system::shared_ledger;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Per device, the share this image took off the ledger at an `exec` under
/// way (its counted bytes, pending bytes and credit ceiling), put back if
/// the `exec` fails.
static RETIRED: [[AtomicU64; shared_ledger::MAX_DEVICES]; 3] =
    [const { [const { AtomicU64::new(0) }; shared_ledger::MAX_DEVICES] }; 3];
/// Set while an `exec` is under way: bytes freed meanwhile by the image's
/// other threads come off the retired share, not off the tree's figure.
pub(super) static RETIRING: AtomicU32 = AtomicU32::new(0);

/// Just before an `exec`: the driver gives this image's memory back when
/// it is replaced, and the new image may never count anything itself (it
/// allocates nothing, or runs without the library), so the image's share
/// leaves the ledger now. A `vfork` child, which runs on its parent's
/// memory, leaves its parent's share alone.
// Three figures per device, in the slot, the entry and RETIRED alike.
#[allow(clippy::needless_range_loop)]
pub(crate) fn retire_for_exec() {
    if !enabled() {
        return;
    }
    let slot = MY_SLOT.load(Ordering::Acquire);
    let Some(ledger) = ledger_in_use().filter(|_| slot < CLAIMING) else {
        return;
    };
    let share = ledger.slot(slot as usize);
    if share.owner() != u64::from(std::process::id()) {
        return;
    }
    RETIRING.fetch_add(1, Ordering::AcqRel);
    for index in 0..shared_ledger::MAX_DEVICES {
        for (which, (shared, part)) in ledger.shares(share, index).into_iter().enumerate() {
            let bytes = part.swap(0, Ordering::AcqRel);
            if bytes != 0 {
                shared_ledger::subtract(shared, bytes);
                RETIRED[which][index].fetch_add(bytes, Ordering::AcqRel);
            }
        }
    }
}

/// The `exec` returned (it failed): the image's share is counted again.
#[allow(clippy::needless_range_loop)]
pub(crate) fn restore_after_failed_exec() {
    if RETIRING.load(Ordering::Acquire) == 0 {
        return;
    }
    let slot = MY_SLOT.load(Ordering::Acquire);
    if let Some(ledger) = ledger_in_use().filter(|_| slot < CLAIMING) {
        let share = ledger.slot(slot as usize);
        for index in 0..shared_ledger::MAX_DEVICES {
            for (which, (shared, part)) in ledger.shares(share, index).into_iter().enumerate() {
                let bytes = RETIRED[which][index].swap(0, Ordering::AcqRel);
                if bytes != 0 {
                    shared.fetch_add(bytes, Ordering::AcqRel);
                    part.fetch_add(bytes, Ordering::AcqRel);
                }
            }
        }
    }
    RETIRING.fetch_sub(1, Ordering::AcqRel);
}

/// Bytes given back to the ledger while an `exec` is under way: what the
/// retired share holds of them is taken off it (they left the tree's
/// figure with it); the rest, if any, is for the ledger.
#[cold]
pub(super) fn from_retired(index: usize, bytes: u64) -> u64 {
    let retired = &RETIRED[0][index];
    let taken = retired
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| Some(held - held.min(bytes)))
        .map_or(0, |held| held.min(bytes));
    bytes - taken
}
