//! The memory limit (`cudatrace run --limit SIZE`, `CUDATRACE_LIMIT`): every
//! device behaves like a card of SIZE bytes, shared by the whole traced
//! tree as a smaller card would be.
//!
//! What the tree holds on a device is counted in the ledger
//! ([`crate::sys::shared_ledger`]), without a driver call per allocation:
//! the bytes of the allocations its processes made through our hooks, plus
//! what the driver held beyond them when the device was last read (contexts,
//! modules and kernels, pool and graph memory beyond their allocations).
//! The readings already taken at contexts, loads, first launches and every
//! 50 ms keep that second figure current; one more is taken before an
//! allocation is refused, so that a refusal always stands on a fresh reading.
//!
//! Off (the default), every function here is one relaxed load and nothing
//! else: the program's behaviour is unchanged.

use crate::record::devices;
use crate::record::recorder::{self, Record};
use crate::spool::tree_root;
use crate::sys::cuda_ffi::*;
use crate::sys::environment;
use crate::sys::no_cancel::without_cancellation;
use crate::sys::shared_ledger::{self, Ledger, Unshared};
use crate::sys::symbols::{real_fn, Sym};
use crate::sys::thread::current_tid;
use crate::sys::thread_block::{self, LimitCredit};
use crate::sys::thread_exit;
use crate::sys::tracing_switch::{guarded, keeping_errno};
use cudatrace_events::settings::{self, LimitSetting};
use cudatrace_events::{naming, Kind, Op};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// The limit in bytes; 0 = no limit.
#[unsafe(link_section = "cudatrace_hot")]
static LIMIT: AtomicU64 = AtomicU64::new(0);
// The statics every allocation and free reads under a limit are hot
// statics (see `sys::hot_statics`): after the driver's call they would
// otherwise be cache misses of their own.
#[unsafe(link_section = "cudatrace_hot")]
static LEDGER: AtomicPtr<Ledger> = AtomicPtr::new(std::ptr::null_mut());
/// This process's slot in the ledger; [`NO_SLOT`] until claimed.
#[unsafe(link_section = "cudatrace_hot")]
static MY_SLOT: AtomicU32 = AtomicU32::new(NO_SLOT);
const NO_SLOT: u32 = u32::MAX;
/// Device ordinals seen by the process: 0 not looked up yet,
/// [`NOT_LIMITED`] for one the ledger has no room or no UUID for, else the
/// ledger's device index + 1. Ordinals past these are not limited (a
/// ledger keeps 16 devices too).
#[unsafe(link_section = "cudatrace_hot")]
static DEVICE_INDEX: [AtomicU8; shared_ledger::MAX_DEVICES] = [const { AtomicU8::new(0) }; shared_ledger::MAX_DEVICES];
const NOT_LIMITED: u8 = u8::MAX;
/// Devices whose limit record this process has written, one bit each.
static RECORDED: AtomicU64 = AtomicU64::new(0);
/// Why this process keeps a ledger of its own ([`Unshared`] as a number);
/// 0 while it uses the tree's. Said in every limit record it writes.
static UNSHARED: AtomicU64 = AtomicU64::new(0);

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

/// Whether a limit is set. One load: the hooks' test of it is all a
/// process without a limit pays. (A process whose tracing turned itself
/// off stops counting: the bookkeeping runs under `guarded`.)
#[inline(always)]
pub(crate) fn enabled() -> bool {
    LIMIT.load(Ordering::Relaxed) != 0
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

fn ledger() -> Option<&'static Ledger> {
    let existing = LEDGER.load(Ordering::Acquire);
    if !existing.is_null() {
        // SAFETY: published below from a mapping that is never unmapped.
        return Some(unsafe { &*existing });
    }
    open_ledger()
}

#[cold]
fn open_ledger() -> Option<&'static Ledger> {
    let opened = keeping_errno(|| {
        without_cancellation(|| {
            let shared = match tree_root::spool_dir() {
                None => Err(Unshared::NoFolder),
                Some(dir) => {
                    let path = dir.join(naming::MEMORY_LIMIT_LEDGER);
                    std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
                        .map_err(|_| Unshared::CannotOpen)
                        .and_then(|path| shared_ledger::open(&path))
                }
            };
            shared.or_else(|why| {
                UNSHARED.store(why as u64, Ordering::Relaxed);
                shared_ledger::private_ledger().ok_or(why)
            })
        })
    })
    .ok()?;
    let pointer = std::ptr::from_ref(opened).cast_mut();
    // Two threads may open it at once: the first to publish wins, and the
    // other's mapping of the same file is simply left unused.
    match LEDGER.compare_exchange(std::ptr::null_mut(), pointer, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(opened),
        // SAFETY: as in `ledger`.
        Err(winner) => Some(unsafe { &*winner }),
    }
}

fn my_slot(ledger: &Ledger) -> Option<usize> {
    let slot = MY_SLOT.load(Ordering::Acquire);
    if slot < CLAIMING {
        return Some(slot as usize);
    }
    claim_slot(ledger)
}

/// [`MY_SLOT`] while one thread claims the process's slot: another thread
/// claiming at once would find the slot its pid holds and take it for an
/// exec'd image's, taking the first thread's bytes off.
const CLAIMING: u32 = NO_SLOT - 1;

#[cold]
fn claim_slot(ledger: &Ledger) -> Option<usize> {
    if MY_SLOT
        .compare_exchange(NO_SLOT, CLAIMING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Another thread claims it (or this one, interrupted by a signal
        // handler's hook): waited for a little, else not counted.
        for _ in 0..100_000 {
            match MY_SLOT.load(Ordering::Acquire) {
                CLAIMING => std::hint::spin_loop(),
                NO_SLOT => return None,
                slot => return Some(slot as usize),
            }
        }
        return None;
    }
    let claimed = keeping_errno(|| {
        let _held = crate::sys::no_cancel::NoCancel::hold();
        let pid = std::process::id();
        ledger.claim_slot(pid, shared_ledger::start_time_of(pid))
    });
    MY_SLOT.store(claimed.map_or(NO_SLOT, |slot| slot as u32), Ordering::Release);
    claimed
}

/// The ledger's index of device `ordinal`, looked up (one driver call for
/// its UUID) the first time the process uses it.
fn device_index(ledger: &Ledger, ordinal: i8) -> Option<usize> {
    let cached = DEVICE_INDEX.get(usize::try_from(ordinal).ok()?)?;
    match cached.load(Ordering::Acquire) {
        0 => look_up_device(ledger, ordinal, cached),
        NOT_LIMITED => None,
        index => Some(usize::from(index - 1)),
    }
}

#[cold]
fn look_up_device(ledger: &Ledger, ordinal: i8, cached: &AtomicU8) -> Option<usize> {
    let uuid = keeping_errno(|| uuid_of(ordinal));
    let mut index = ledger.device(uuid);
    if index.is_none() && UNSHARED.load(Ordering::Relaxed) == 0 {
        // Every entry of the tree's ledger names another device: this
        // process keeps the limit to itself, in a ledger of its own, and
        // says so.
        if let Some(own) = switch_to_own_ledger(Unshared::NoDeviceRoom) {
            index = own.device(uuid);
        }
    }
    cached.store(index.map_or(NOT_LIMITED, |i| i as u8 + 1), Ordering::Release);
    if index.is_some() {
        record_limit(ordinal);
    }
    index
}

/// Moves this process from the tree's ledger to one of its own, for `why`.
/// What it counted in the tree's ledger stays there until it ends (its
/// frees are then given back to its own ledger, which stops at zero), and
/// the devices it looked up are looked up again.
#[cold]
fn switch_to_own_ledger(why: Unshared) -> Option<&'static Ledger> {
    let own = keeping_errno(shared_ledger::private_ledger)?;
    // Credit given under the tree's ledger is void in this one: its epochs
    // start where the tree's never get to.
    for index in 0..shared_ledger::MAX_DEVICES {
        own.epoch(index).store(OWN_LEDGER_EPOCH, Ordering::Relaxed);
    }
    UNSHARED.store(why as u64, Ordering::Relaxed);
    MY_SLOT.store(NO_SLOT, Ordering::Release);
    for cached in &DEVICE_INDEX {
        cached.store(0, Ordering::Release);
    }
    RECORDED.store(0, Ordering::Relaxed);
    LEDGER.store(std::ptr::from_ref(own).cast_mut(), Ordering::Release);
    Some(own)
}

/// The first credit epoch of a ledger a process moved to on its own.
const OWN_LEDGER_EPOCH: u32 = 1 << 31;

/// The ledger in use: after [`ledger`] returned one, never null.
#[inline(always)]
fn ledger_in_use() -> Option<&'static Ledger> {
    let pointer = LEDGER.load(Ordering::Acquire);
    // SAFETY: published from a mapping that is never unmapped.
    (!pointer.is_null()).then(|| unsafe { &*pointer })
}

/// The UUID of device `ordinal`, which names it whatever a process's
/// `CUDA_VISIBLE_DEVICES`. A driver that cannot tell it (no
/// `cuDeviceGetUuid_v2`, or an error) gets a name made of the ordinal, so
/// that the limit still holds: then processes share a device's limit only
/// where they number the device alike.
fn uuid_of(ordinal: i8) -> [u8; 16] {
    // SAFETY: cuDeviceGetUuid_v2(CUuuid*, CUdevice) is the driver's signature.
    let get_uuid =
        unsafe { real_fn::<unsafe extern "C" fn(*mut CUuuid, CUdevice) -> CUresult>(Sym::cuDeviceGetUuid_v2) };
    let mut uuid = CUuuid::default();
    // SAFETY: a valid out-pointer.
    let known = get_uuid.is_some_and(|get| unsafe { get(&mut uuid, CUdevice::from(ordinal)) } == CUDA_SUCCESS);
    if known && uuid.bytes != [0; 16] {
        return uuid.bytes;
    }
    let mut by_ordinal = *b"cudatrace-ordin\0";
    by_ordinal[15] = ordinal as u8;
    by_ordinal
}

/// Writes, once per device, that the process runs under the limit there.
fn record_limit(ordinal: i8) {
    let bit = 1u64 << (ordinal as u32 % 64);
    if RECORDED.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
        return;
    }
    guarded(|| {
        let mut record = Record::new(Op::MemoryLimit, cudatrace_events::Api::Unknown);
        record.device = ordinal;
        record.size = LIMIT.load(Ordering::Relaxed);
        // Why the process keeps the limit to itself, if it does.
        record.arg1 = UNSHARED.load(Ordering::Relaxed);
        recorder::write_measurement(record, false);
    });
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
    crate::sys::prefetch::prefetch_line(std::ptr::from_ref(ledger.entry(0)));
    crate::sys::prefetch::prefetch_line(std::ptr::from_ref(ledger.epoch(0)));
    crate::sys::prefetch::prefetch_line(std::ptr::from_ref(&ledger.slot(slot as usize).counted[0]));
}

/// Per device, the share this image took off the ledger at an `exec` under
/// way (its counted bytes, pending bytes and credit ceiling), put back if
/// the `exec` fails.
static RETIRED: [[AtomicU64; shared_ledger::MAX_DEVICES]; 3] =
    [const { [const { AtomicU64::new(0) }; shared_ledger::MAX_DEVICES] }; 3];
/// Set while an `exec` is under way: bytes freed meanwhile by the image's
/// other threads come off the retired share, not off the tree's figure.
static RETIRING: AtomicU32 = AtomicU32::new(0);

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
fn from_retired(index: usize, bytes: u64) -> u64 {
    let retired = &RETIRED[0][index];
    let taken = retired
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| Some(held - held.min(bytes)))
        .map_or(0, |held| held.min(bytes));
    bytes - taken
}

/// In a forked child: its allocations are its own, counted in a slot of
/// its own; the parent's share stays the parent's.
pub(crate) fn forget_parent() {
    MY_SLOT.store(NO_SLOT, Ordering::Relaxed);
    RECORDED.store(0, Ordering::Relaxed);
}
