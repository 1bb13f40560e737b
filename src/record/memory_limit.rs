//! The memory limit (`cudatrace run --limit SIZE`, `CUDATRACE_LIMIT`): every
//! device behaves like a card of SIZE bytes, shared by the whole traced
//! tree as a smaller card would be.
//!
//! What the tree holds on a device is counted in the ledger
//! ([`crate::system::shared_ledger`]), without a driver call per allocation:
//! the bytes of the allocations its processes made through our hooks, plus
//! what the driver held beyond them when the device was last read (contexts,
//! modules and kernels, pool and graph memory beyond their allocations).
//! The readings already taken at contexts, loads, first launches and every
//! 50 ms keep that second figure current; one more is taken before an
//! allocation is refused, so that a refusal always stands on a fresh reading.
//!
//! Off (the default), every function here is one relaxed load and nothing
//! else: the program's behaviour is unchanged.
//!
//! This file admits, settles and gives back allocations, through each
//! thread's credit and the ledger. Beside it: `limit_state` (the limit, the
//! ledger in use, this process's slot and device indexes), `limit_reports`
//! (readings in, a card of the limit's size out) and `limit_exec` (a share
//! that leaves the ledger at `exec`).

use super::limit_exec::{from_retired, RETIRING};
use super::limit_state::{
    device_index, ledger, ledger_in_use, my_slot, CLAIMING, DEVICE_INDEX, LEDGER, LIMIT, MY_SLOT, NOT_LIMITED, NO_SLOT,
    RECORDED,
};
use crate::record::devices;
use crate::system::environment;
use crate::system::no_cancel::without_cancellation;
use crate::system::shared_ledger::{self, Ledger};
use crate::system::thread::current_tid;
use crate::system::thread_block::{self, LimitCredit};
use crate::system::thread_exit;
use crate::system::tracing_switch::keeping_errno;
use cudatrace_events::settings::{self, LimitSetting};
use cudatrace_events::Kind;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use super::limit_exec::{restore_after_failed_exec, retire_for_exec};
pub(crate) use super::limit_reports::{
    context_fits, note_first_context, note_reading, reported_memory_info, reported_total,
};
pub(crate) use super::limit_state::enabled;

/// Keeps `CUDATRACE_LIMIT` (from the library constructor). A value that is
/// no size is said once on stderr (unless `quiet`), and the program runs
/// without a limit.
pub(crate) fn configure(limit: LimitSetting, quiet: bool) {
    match limit {
        LimitSetting::Off => {}
        LimitSetting::Bytes(bytes) => {
            // The key that gives a thread's credit back at its exit is made
            // now, before the program can have taken every key: a thread
            // with no way to give its credit back gets none ahead.
            thread_exit::prepare();
            LIMIT.store(bytes, Ordering::Relaxed)
        }
        LimitSetting::NotASize => {
            if !quiet {
                // SAFETY: read and copied at once, in the constructor.
                let text = String::from_utf8_lossy(unsafe { environment::value(&settings::LIMIT) }.unwrap_or_default());
                eprintln!(
                    "cudatrace: {}={text} is not a size (such as 24GiB); running without a limit",
                    settings::LIMIT.name
                );
            }
        }
    }
}

/// Whether the limit counts memory of `kind` on `device`: device memory of
/// the process's own, but managed memory (never refused) and a capture's
/// allocations (the graph's memory). A free gives back exactly what this
/// says was counted.
pub(crate) fn counts(kind: Kind, device: i8) -> bool {
    device >= 0
        && matches!(
            kind,
            Kind::Device | Kind::Pitch | Kind::Pool | Kind::VmmPhysical | Kind::Array
        )
}

/// The limit in bytes, if one is set.
pub(crate) fn limit() -> Option<u64> {
    Some(LIMIT.load(Ordering::Relaxed)).filter(|&limit| limit != 0)
}

/// Bytes counted for an allocation being made, given back by [`settle`]
/// if it fails.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reservation {
    index: usize,
    slot: usize,
    bytes: u64,
    /// Admitted through the ledger: its bytes are in the ledger's pending
    /// figure until the call returns.
    pending: bool,
}

/// What the limit says of an allocation about to be made.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Admission {
    /// The limit does not count it (no limit, managed or host memory, a
    /// device the ledger cannot name).
    NotCounted,
    /// Counted; the allocation may go ahead.
    Counted(Reservation),
    /// It would take the device past the limit: refuse it.
    Refused {
        /// What the limit had left on the device.
        left: u64,
        /// The limit.
        limit: u64,
    },
}

/// The bytes a thread takes ahead from the ledger: a 4096th of the limit,
/// between 64 KiB and 8 MiB. A thread holds at most two of them unspent,
/// which the limit counts as used.
fn chunk(limit: u64) -> u64 {
    (limit / 4096).clamp(64 << 10, 8 << 20)
}

/// Whether the thread's credit is for device `index` and still valid.
#[inline(always)]
fn credit_is_live(ledger: &Ledger, credit: LimitCredit, index: usize) -> bool {
    !credit.busy
        && usize::from(credit.device) == index + 1
        && credit.epoch == ledger.epoch(index).load(Ordering::Relaxed)
}

/// Counts `bytes` about to be allocated on `device`, or says that they
/// would not fit. Call only when [`enabled`]. `read_device` reads the
/// calling thread's device afresh (free, total), for a would-be refusal.
///
/// Most calls are served from the thread's credit with plain loads and
/// stores: an atomic read-modify-write after the driver's call waits for
/// the driver's stores to drain, tens of nanoseconds each on the GPU.
#[inline]
pub(crate) fn admit(device: i8, bytes: u64, read_device: impl FnOnce() -> Option<(u64, u64)>) -> Admission {
    let Some(first) = ledger() else {
        return Admission::NotCounted;
    };
    let Some(index) = device_index(first, device) else {
        return Admission::NotCounted;
    };
    // The lookup may have moved the process to a ledger of its own.
    let Some(ledger) = ledger_in_use() else {
        return Admission::NotCounted;
    };
    let Some(slot) = my_slot(ledger) else {
        return Admission::NotCounted;
    };
    let block = thread_block::current();
    let credit = block.limit_credit.get();
    if credit.bytes >= bytes && credit_is_live(ledger, credit, index) {
        block.limit_credit.set(LimitCredit {
            bytes: credit.bytes - bytes,
            ..credit
        });
        return Admission::Counted(Reservation {
            index,
            slot,
            bytes,
            pending: false,
        });
    }
    admit_from_ledger(ledger, index, slot, device, bytes, read_device)
}

/// [`admit`] when the thread's credit does not cover the bytes: the rest is
/// counted in the ledger, with a chunk ahead where the limit has room for
/// every holder's.
#[cold]
fn admit_from_ledger(
    ledger: &Ledger,
    index: usize,
    slot: usize,
    device: i8,
    bytes: u64,
    read_device: impl FnOnce() -> Option<(u64, u64)>,
) -> Admission {
    let limit = LIMIT.load(Ordering::Relaxed);
    let block = thread_block::current();
    let mut credit = block.limit_credit.get();
    if credit.busy {
        // A signal handler's hook, inside this thread's own change of its
        // credit: the ledger alone, exactly.
        return admit_exactly(ledger, index, slot, device, bytes, 0, 0, limit, read_device);
    }
    block.limit_credit.set(LimitCredit { busy: true, ..credit });
    if !credit_is_live(ledger, credit, index) {
        credit = drop_credit(ledger, slot, credit);
    }
    if !credit.registered {
        credit.registered = thread_exit::release_at_exit(std::ptr::null_mut(), credit_at_thread_exit);
    }
    let have = credit.bytes.min(bytes);
    let need = bytes - have;
    let ahead = credit_ahead(ledger, index, need, limit, credit);
    let epoch = ledger.epoch(index).load(Ordering::Acquire);
    let becomes_holder = ahead > 0 && credit.device == 0;
    if becomes_holder {
        // Counted before the bytes, so that the ledger's floor (its figure
        // less the ceiling) is never above what the tree uses.
        change_ceiling(ledger, index, slot, 2 * chunk(limit), true);
    }
    // Saturating: `bytes` is the program's, as large as it likes.
    let admission = if ahead > 0 && try_count(ledger, index, slot, need.saturating_add(ahead), limit) {
        if becomes_holder {
            credit.device = index as u8 + 1;
            credit.epoch = epoch;
        }
        credit.bytes = credit.bytes - have + ahead;
        change_pending(ledger, index, slot, bytes, true);
        Admission::Counted(Reservation {
            index,
            slot,
            bytes,
            pending: true,
        })
    } else {
        if becomes_holder {
            change_ceiling(ledger, index, slot, 2 * chunk(limit), false);
        }
        // All of this thread's credit goes into this allocation: its part
        // of the ceiling holds nothing unspent.
        let own_ceiling = if credit.device == 0 { 0 } else { 2 * chunk(limit) };
        match admit_exactly(ledger, index, slot, device, need, have, own_ceiling, limit, read_device) {
            Admission::Counted(reservation) => {
                // Admitted on a reading, every thread's credit is void, this
                // one's too: it goes back at the thread's next admission.
                credit.bytes -= have;
                Admission::Counted(Reservation {
                    bytes: reservation.bytes + have,
                    ..reservation
                })
            }
            other => other,
        }
    };
    block.limit_credit.set(LimitCredit { busy: false, ..credit });
    admission
}

/// The chunk a thread may take ahead with `need`: none for a thread with
/// no way to give it back at its exit, and none when the room left after
/// `need` could not hold two chunks more than the most every thread
/// holding credit may keep, so that credit never stands in the way of an
/// allocation.
fn credit_ahead(ledger: &Ledger, index: usize, need: u64, limit: u64, credit: LimitCredit) -> u64 {
    if !credit.registered {
        return 0;
    }
    let ahead = chunk(limit);
    let entry = ledger.entry(index);
    let used = entry
        .counted
        .load(Ordering::Acquire)
        .saturating_add(entry.beyond.load(Ordering::Acquire))
        .saturating_add(need);
    let room = limit.saturating_sub(used);
    if room >= entry.ceiling.load(Ordering::Acquire).saturating_add(2 * ahead) {
        ahead
    } else {
        0
    }
}

/// Gives a thread's credit back to the ledger: it holds none after.
fn drop_credit(ledger: &Ledger, slot: usize, credit: LimitCredit) -> LimitCredit {
    if credit.device != 0 {
        let index = usize::from(credit.device) - 1;
        return_to_ledger(ledger, index, slot, credit.bytes);
        change_ceiling(ledger, index, slot, 2 * chunk(LIMIT.load(Ordering::Relaxed)), false);
    }
    LimitCredit {
        bytes: 0,
        device: 0,
        epoch: 0,
        ..credit
    }
}

/// Adds `bytes` to (or takes them from) device `index`'s credit ceiling,
/// in the tree's figure and in the process's part of it.
fn change_ceiling(ledger: &Ledger, index: usize, slot: usize, bytes: u64, add: bool) {
    change(
        &ledger.entry(index).ceiling,
        &ledger.slot(slot).ceiling[index],
        bytes,
        add,
    );
}

/// Adds `bytes` to (or takes them from) device `index`'s pending bytes,
/// in the tree's figure and in the process's part of it.
fn change_pending(ledger: &Ledger, index: usize, slot: usize, bytes: u64, add: bool) {
    change(
        &ledger.entry(index).pending,
        &ledger.slot(slot).pending[index],
        bytes,
        add,
    );
}

fn change(shared: &AtomicU64, share: &AtomicU64, bytes: u64, add: bool) {
    if bytes == 0 {
        return;
    }
    if add {
        share.fetch_add(bytes, Ordering::AcqRel);
        shared.fetch_add(bytes, Ordering::AcqRel);
    } else {
        shared_ledger::subtract(shared, bytes);
        shared_ledger::subtract(share, bytes);
    }
}

/// Counts exactly `need` bytes in the ledger (`held` more are the thread's
/// credit, already counted), after taking off the shares of processes that
/// ended and reading the device afresh if the figures at hand say no
/// (`own_ceiling` is this thread's part of the credit ceiling, which holds
/// nothing unspent). Before a refusal, the device is read once more under the admission lock:
/// the ledger counts credit that idle threads hold and may never spend,
/// and the device's own figure holds none.
#[allow(clippy::too_many_arguments)]
fn admit_exactly(
    ledger: &Ledger,
    index: usize,
    slot: usize,
    device: i8,
    need: u64,
    held: u64,
    own_ceiling: u64,
    limit: u64,
    read_device: impl FnOnce() -> Option<(u64, u64)>,
) -> Admission {
    let exact = || {
        change_pending(ledger, index, slot, need.saturating_add(held), true);
        Admission::Counted(Reservation {
            index,
            slot,
            bytes: need,
            pending: true,
        })
    };
    if try_count(ledger, index, slot, need, limit) {
        return exact();
    }
    let here = devices::current_device() == Some(device);
    keeping_errno(|| without_cancellation(|| ledger.take_off_dead(std::process::id())));
    if try_count(ledger, index, slot, need, limit) {
        return exact();
    }
    let mut used_on_device = None;
    if here && need <= limit {
        let admitted = keeping_errno(|| {
            without_cancellation(|| {
                admit_on_reading(ledger, index, slot, device, need, held, own_ceiling, limit, read_device)
            })
        });
        match admitted {
            Ok(reservation) => return Admission::Counted(reservation),
            Err(used) => used_on_device = used,
        }
    }
    let entry = ledger.entry(index);
    let held_by_others = entry
        .counted
        .load(Ordering::Acquire)
        .saturating_add(entry.beyond.load(Ordering::Acquire))
        .saturating_sub(held);
    // What is left is what the figure the refusal stood on leaves: the
    // device's reading where it was read (the ledger's own figure counts
    // idle credit as used).
    let taken = used_on_device.unwrap_or(held_by_others);
    Admission::Refused {
        left: limit.saturating_sub(taken),
        limit,
    }
}

/// Admits `need` bytes if a fresh reading of the device, plus the bytes
/// admitted this way whose allocations have not returned, leaves room for
/// them, and so does the ledger's floor of what the tree uses (its figure
/// less the most the threads may hold as credit: where a driver's reading
/// covers this process alone, the other processes' memory is still seen).
/// Admissions of the tree are serialised by the device's lock, and the
/// threads' credit is voided (the epoch moves on): what the reading
/// allowed may not be spent again by an idle thread waking up. Otherwise
/// the bytes the device had in use, if it could be read.
#[allow(clippy::too_many_arguments)]
fn admit_on_reading(
    ledger: &Ledger,
    index: usize,
    slot: usize,
    device: i8,
    need: u64,
    held: u64,
    own_ceiling: u64,
    limit: u64,
    read_device: impl FnOnce() -> Option<(u64, u64)>,
) -> Result<Reservation, Option<u64>> {
    let Some(_lock) = ledger.lock_admissions(index, current_tid()) else {
        return Err(None);
    };
    // Void the threads' credit before the reading, so that none is spent
    // unseen while the driver reads the device.
    ledger.epoch(index).fetch_add(1, Ordering::AcqRel);
    let Some((free, total)) = read_device() else {
        return Err(None);
    };
    note_reading(device, free, total);
    let entry = ledger.entry(index);
    let read = total
        .saturating_sub(free)
        .saturating_add(entry.pending.load(Ordering::Acquire));
    // The allocation is `need` and the `held` credit (counted already,
    // not in use yet).
    let others_ceiling = entry.ceiling.load(Ordering::Acquire).saturating_sub(own_ceiling);
    let floor = entry
        .counted
        .load(Ordering::Acquire)
        .saturating_sub(held)
        .saturating_sub(others_ceiling);
    let used = read.max(floor);
    if used.saturating_add(need).saturating_add(held) > limit {
        return Err(Some(used));
    }
    change_pending(ledger, index, slot, need.saturating_add(held), true);
    entry.counted.fetch_add(need, Ordering::AcqRel);
    ledger.slot(slot).counted[index].fetch_add(need, Ordering::AcqRel);
    // The reservation is of `need`; the caller widens it by `held`.
    Ok(Reservation {
        index,
        slot,
        bytes: need,
        pending: true,
    })
}

#[inline]
fn try_count(ledger: &Ledger, index: usize, slot: usize, bytes: u64, limit: u64) -> bool {
    if bytes == 0 {
        return true;
    }
    // More than the whole limit never fits: refused without touching the
    // shared figure, which another process may read meanwhile.
    if bytes > limit {
        return false;
    }
    let entry = ledger.entry(index);
    let counted = entry.counted.fetch_add(bytes, Ordering::AcqRel).saturating_add(bytes);
    if counted.saturating_add(entry.beyond.load(Ordering::Acquire)) <= limit {
        ledger.slot(slot).counted[index].fetch_add(bytes, Ordering::AcqRel);
        return true;
    }
    shared_ledger::subtract(&entry.counted, bytes);
    false
}

/// Takes `bytes` off the ledger's figures for device `index`.
fn return_to_ledger(ledger: &Ledger, index: usize, slot: usize, bytes: u64) {
    let bytes = if RETIRING.load(Ordering::Relaxed) != 0 {
        from_retired(index, bytes)
    } else {
        bytes
    };
    if bytes == 0 {
        return;
    }
    shared_ledger::subtract(&ledger.slot(slot).counted[index], bytes);
    shared_ledger::subtract(&ledger.entry(index).counted, bytes);
}

/// After the allocation call: a failed one gives its bytes back; one whose
/// real size differs from the bytes admitted (a pitch the driver chose) is
/// counted at its real size.
#[inline(always)]
pub(crate) fn settle(reservation: Reservation, succeeded: bool, actual: u64) {
    let kept = if succeeded { actual } else { 0 };
    if kept != reservation.bytes || reservation.pending {
        settle_difference(reservation, kept);
    }
}

/// After an allocation call that succeeded but could not be recorded: the
/// bytes stay counted as admitted; only what the ledger held pending for the
/// call is given back.
#[cold]
pub(crate) fn settle_unrecorded(reservation: Reservation) {
    if reservation.pending {
        settle_difference(reservation, reservation.bytes);
    }
}

fn settle_difference(reservation: Reservation, kept: u64) {
    let Some(ledger) = ledger_in_use() else { return };
    if reservation.pending {
        // The call has returned: a reading from now on shows its memory.
        change_pending(ledger, reservation.index, reservation.slot, reservation.bytes, false);
    }
    if kept > reservation.bytes {
        let more = kept - reservation.bytes;
        ledger
            .entry(reservation.index)
            .counted
            .fetch_add(more, Ordering::AcqRel);
        ledger.slot(reservation.slot).counted[reservation.index].fetch_add(more, Ordering::AcqRel);
    } else if kept < reservation.bytes {
        give_back_index(ledger, reservation.index, reservation.bytes - kept);
    }
}

/// Memory the limit counted was freed: its bytes are given back, to the
/// thread's credit while that stays under two chunks, else to the ledger.
#[inline]
pub(crate) fn give_back(device: i8, bytes: u64) {
    let Some(ledger) = ledger_in_use() else { return };
    let Some(index) = usize::try_from(device)
        .ok()
        .and_then(|d| DEVICE_INDEX.get(d))
        .map(|cached| cached.load(Ordering::Acquire))
        .filter(|&i| i != 0 && i != NOT_LIMITED)
    else {
        return;
    };
    give_back_index(ledger, usize::from(index - 1), bytes);
}

#[inline]
fn give_back_index(ledger: &Ledger, index: usize, bytes: u64) {
    let slot = MY_SLOT.load(Ordering::Acquire);
    if slot >= CLAIMING {
        return;
    }
    let block = thread_block::current();
    let credit = block.limit_credit.get();
    let kept = credit.bytes.saturating_add(bytes);
    let limit = LIMIT.load(Ordering::Relaxed);
    if kept <= 2 * chunk(limit) && credit_is_live(ledger, credit, index) {
        block.limit_credit.set(LimitCredit { bytes: kept, ..credit });
        return;
    }
    give_back_to_ledger(ledger, index, slot as usize, bytes);
}

/// [`give_back_index`] past the thread's credit: the credit keeps one
/// chunk of its device, the rest goes back to the ledger.
#[cold]
fn give_back_to_ledger(ledger: &Ledger, index: usize, slot: usize, bytes: u64) {
    let block = thread_block::current();
    let credit = block.limit_credit.get();
    if !credit_is_live(ledger, credit, index) {
        return_to_ledger(ledger, index, slot, bytes);
        if !credit.busy && credit.device != 0 && usize::from(credit.device) == index + 1 {
            // Void credit of this device: back to the ledger too.
            block.limit_credit.set(LimitCredit { busy: true, ..credit });
            let dropped = drop_credit(ledger, slot, credit);
            block.limit_credit.set(LimitCredit { busy: false, ..dropped });
        }
        return;
    }
    block.limit_credit.set(LimitCredit { busy: true, ..credit });
    let ahead = chunk(LIMIT.load(Ordering::Relaxed));
    let kept = credit.bytes.saturating_add(bytes);
    return_to_ledger(ledger, index, slot, kept - ahead.min(kept));
    block.limit_credit.set(LimitCredit {
        bytes: ahead.min(kept),
        busy: false,
        ..credit
    });
}

/// Run by the library's thread-exit key when a thread that took credit
/// ends: its credit goes back to the ledger.
unsafe fn credit_at_thread_exit(_: *mut u8) {
    let block = thread_block::current();
    let credit = block.limit_credit.get();
    if credit.busy {
        return;
    }
    let slot = MY_SLOT.load(Ordering::Acquire);
    if credit.device != 0 && slot < CLAIMING {
        if let Some(ledger) = ledger_in_use() {
            drop_credit(ledger, slot as usize, credit);
        }
    }
    // What runs on this thread from here on (another library's key
    // destructor that allocates) gets no credit ahead: it could not give
    // it back.
    block.limit_credit.set(LimitCredit {
        registered: false,
        ..LimitCredit::default()
    });
}

/// Asks for the ledger's lines an allocation or a free on the process's
/// first device will touch: called on a hook's entry, so that they arrive
/// while the driver works.
#[inline(always)]
pub(crate) fn prefetch() {
    let ledger = LEDGER.load(Ordering::Relaxed);
    let slot = MY_SLOT.load(Ordering::Relaxed);
    if ledger.is_null() || slot >= CLAIMING {
        return;
    }
    // SAFETY: published from a mapping that is never unmapped.
    let ledger = unsafe { &*ledger };
    crate::system::prefetch::prefetch_line(std::ptr::from_ref(ledger.entry(0)));
    crate::system::prefetch::prefetch_line(std::ptr::from_ref(ledger.epoch(0)));
    crate::system::prefetch::prefetch_line(std::ptr::from_ref(&ledger.slot(slot as usize).counted[0]));
}

/// In a forked child: its allocations are its own, counted in a slot of
/// its own; the parent's share stays the parent's.
pub(crate) fn forget_parent() {
    MY_SLOT.store(NO_SLOT, Ordering::Relaxed);
    RECORDED.store(0, Ordering::Relaxed);
}
