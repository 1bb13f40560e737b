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
use crate::sys::shared_ledger::{self, Ledger};
use crate::sys::symbols::{real_fn, Sym};
use crate::sys::thread_block::{self, LimitCredit};
use crate::sys::tracing_switch::{guarded, keeping_errno};
use cudatrace_events::{naming, sizes, Kind, Op};
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

/// Reads `CUDATRACE_LIMIT` (from the library constructor). A value that is
/// no size is said once on stderr, and the program runs without a limit.
pub fn configure_from_environment() {
    let Some(value) = std::env::var_os("CUDATRACE_LIMIT").filter(|v| !v.is_empty()) else {
        return;
    };
    let text = value.to_string_lossy();
    if matches!(text.trim(), "0" | "off") {
        return;
    }
    match sizes::parse_bytes(&text) {
        Ok(bytes) if bytes > 0 => LIMIT.store(bytes, Ordering::Relaxed),
        _ => {
            if std::env::var_os("CUDATRACE_QUIET").is_none_or(|v| v != "1") {
                eprintln!("cudatrace: CUDATRACE_LIMIT={text} is not a size (such as 24GiB); running without a limit");
            }
        }
    }
}

/// Whether a limit is set. One load: the hooks' test of it is all a
/// process without a limit pays. (A process whose tracing turned itself
/// off stops counting: the bookkeeping runs under `guarded`.)
#[inline(always)]
pub fn enabled() -> bool {
    LIMIT.load(Ordering::Relaxed) != 0
}

/// Whether the limit counts memory of `kind` on `device`: device memory of
/// the process's own, but managed memory (never refused) and a capture's
/// allocations (the graph's memory). A free gives back exactly what this
/// says was counted.
pub fn counts(kind: Kind, device: i8) -> bool {
    device >= 0
        && matches!(
            kind,
            Kind::Device | Kind::Pitch | Kind::Pool | Kind::VmmPhysical | Kind::Array
        )
}

/// The limit in bytes, if one is set.
pub fn limit() -> Option<u64> {
    Some(LIMIT.load(Ordering::Relaxed)).filter(|&limit| limit != 0)
}

/// Bytes counted for an allocation being made, given back by [`settle`]
/// if it fails.
#[derive(Clone, Copy, Debug)]
pub struct Reservation {
    index: usize,
    slot: usize,
    bytes: u64,
}

/// What the limit says of an allocation about to be made.
#[derive(Clone, Copy, Debug)]
pub enum Admission {
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
        let shared = tree_root::spool_dir().and_then(|dir| {
            let path = dir.join(naming::MEMORY_LIMIT_LEDGER);
            let path = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).ok()?;
            shared_ledger::open(&path)
        });
        shared.or_else(shared_ledger::private_ledger)
    })?;
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
    if slot != NO_SLOT {
        return Some(slot as usize);
    }
    claim_slot(ledger)
}

#[cold]
fn claim_slot(ledger: &Ledger) -> Option<usize> {
    keeping_errno(|| {
        let pid = std::process::id();
        let slot = ledger.claim_slot(pid, shared_ledger::start_time_of(pid))?;
        match MY_SLOT.compare_exchange(NO_SLOT, slot as u32, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(slot),
            Err(claimed) => Some(claimed as usize),
        }
    })
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
    let index = keeping_errno(|| ledger.device(uuid_of(ordinal)));
    cached.store(index.map_or(NOT_LIMITED, |i| i as u8 + 1), Ordering::Release);
    if index.is_some() {
        record_limit(ordinal);
    }
    index
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
        recorder::write_measurement(record, false);
    });
}

/// The bytes a thread takes ahead from the ledger: a 4096th of the limit,
/// between 64 KiB and 8 MiB. A thread holds at most two of them unspent,
/// which the limit counts as used.
fn chunk(limit: u64) -> u64 {
    (limit / 4096).clamp(64 << 10, 8 << 20)
}

/// Counts `bytes` about to be allocated on `device`, or says that they
/// would not fit. Call only when [`enabled`]. `read_device` reads the
/// calling thread's device afresh (free, total), for a would-be refusal.
///
/// Most calls are served from the thread's credit with plain loads and
/// stores: an atomic read-modify-write after the driver's call waits for
/// the driver's stores to drain, tens of nanoseconds each on the GPU.
#[inline]
pub fn admit(device: i8, bytes: u64, read_device: impl FnOnce() -> Option<(u64, u64)>) -> Admission {
    let Some(ledger) = ledger() else {
        return Admission::NotCounted;
    };
    let (Some(index), Some(slot)) = (device_index(ledger, device), my_slot(ledger)) else {
        return Admission::NotCounted;
    };
    let block = thread_block::current();
    let credit = block.limit_credit.get();
    if !credit.busy && usize::from(credit.device) == index + 1 && credit.bytes >= bytes {
        block.limit_credit.set(LimitCredit {
            bytes: credit.bytes - bytes,
            ..credit
        });
        return Admission::Counted(Reservation { index, slot, bytes });
    }
    admit_from_ledger(ledger, index, slot, device, bytes, read_device)
}

/// [`admit`] when the thread's credit does not cover the bytes: the rest is
/// counted in the ledger, with a chunk ahead where it fits.
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
        return admit_exactly(ledger, index, slot, device, bytes, 0, limit, read_device);
    }
    block.limit_credit.set(LimitCredit { busy: true, ..credit });
    if usize::from(credit.device) != index + 1 {
        if credit.device != 0 {
            return_to_ledger(ledger, usize::from(credit.device) - 1, slot, credit.bytes);
        }
        credit = LimitCredit {
            bytes: 0,
            device: index as u8 + 1,
            ..credit
        };
    }
    let have = credit.bytes.min(bytes);
    let need = bytes - have;
    let ahead = chunk(limit);
    // Saturating: `bytes` is the program's, as large as it likes.
    let admission = if try_count(ledger, index, slot, need.saturating_add(ahead), limit) {
        credit.bytes = credit.bytes - have + ahead;
        Admission::Counted(Reservation { index, slot, bytes })
    } else {
        let admission = admit_exactly(ledger, index, slot, device, need, have, limit, read_device);
        if let Admission::Counted(_) = admission {
            credit.bytes -= have;
        }
        match admission {
            Admission::Counted(_) => Admission::Counted(Reservation { index, slot, bytes }),
            other => other,
        }
    };
    if !credit.registered {
        credit.registered = give_back_at_thread_exit();
    }
    block.limit_credit.set(LimitCredit { busy: false, ..credit });
    admission
}

/// Counts exactly `need` bytes in the ledger (`held` more are the thread's
/// credit, already counted), after taking off the shares of processes that
/// ended and reading the device afresh if the figures at hand say no.
#[allow(clippy::too_many_arguments)]
fn admit_exactly(
    ledger: &Ledger,
    index: usize,
    slot: usize,
    device: i8,
    need: u64,
    held: u64,
    limit: u64,
    read_device: impl FnOnce() -> Option<(u64, u64)>,
) -> Admission {
    if try_count(ledger, index, slot, need, limit) {
        return Admission::Counted(Reservation {
            index,
            slot,
            bytes: need,
        });
    }
    keeping_errno(|| {
        ledger.take_off_dead(std::process::id());
        if devices::current_device() == Some(device) {
            if let Some((free, total)) = read_device() {
                note_reading(device, free, total);
            }
        }
    });
    if try_count(ledger, index, slot, need, limit) {
        return Admission::Counted(Reservation {
            index,
            slot,
            bytes: need,
        });
    }
    let entry = ledger.entry(index);
    let held_by_others = entry
        .counted
        .load(Ordering::Acquire)
        .saturating_add(entry.beyond.load(Ordering::Acquire))
        .saturating_sub(held);
    Admission::Refused {
        left: limit.saturating_sub(held_by_others),
        limit,
    }
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
pub fn settle(reservation: Reservation, succeeded: bool, actual: u64) {
    let kept = if succeeded { actual } else { 0 };
    if kept != reservation.bytes {
        settle_difference(reservation, kept);
    }
}

fn settle_difference(reservation: Reservation, kept: u64) {
    let Some(ledger) = ledger() else { return };
    if kept > reservation.bytes {
        let more = kept - reservation.bytes;
        ledger
            .entry(reservation.index)
            .counted
            .fetch_add(more, Ordering::AcqRel);
        ledger.slot(reservation.slot).counted[reservation.index].fetch_add(more, Ordering::AcqRel);
    } else {
        give_back_index(ledger, reservation.index, reservation.bytes - kept);
    }
}

/// Memory the limit counted was freed: its bytes are given back, to the
/// thread's credit while that stays under two chunks, else to the ledger.
#[inline]
pub fn give_back(device: i8, bytes: u64) {
    let Some(ledger) = ledger() else { return };
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
    if slot == NO_SLOT {
        return;
    }
    let block = thread_block::current();
    let credit = block.limit_credit.get();
    let kept = credit.bytes.saturating_add(bytes);
    let limit = LIMIT.load(Ordering::Relaxed);
    if !credit.busy && usize::from(credit.device) == index + 1 && kept <= 2 * chunk(limit) {
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
    if credit.busy || usize::from(credit.device) != index + 1 {
        return_to_ledger(ledger, index, slot, bytes);
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

/// The thread-specific key whose destructor gives an exiting thread's
/// credit back; 0 until made, [`NO_KEY`] if it could not be.
static EXIT_KEY: AtomicU32 = AtomicU32::new(0);
const NO_KEY: u32 = u32::MAX;

/// Makes the calling thread's exit give its credit back; whether it will.
#[cold]
fn give_back_at_thread_exit() -> bool {
    let mut key = EXIT_KEY.load(Ordering::Acquire);
    if key == 0 {
        let mut made: libc::pthread_key_t = 0;
        // SAFETY: a valid out-pointer and a destructor of the right type.
        let created = keeping_errno(|| unsafe { libc::pthread_key_create(&mut made, Some(thread_exiting)) }) == 0;
        // Key 0 is a valid key: stored + 1.
        let wanted = if created { made + 1 } else { NO_KEY };
        key = match EXIT_KEY.compare_exchange(0, wanted, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => wanted,
            Err(other) => {
                if created {
                    // SAFETY: the key made above, never used.
                    unsafe { libc::pthread_key_delete(made) };
                }
                other
            }
        };
    }
    if key == NO_KEY {
        return false;
    }
    // A value that is not null makes the destructor run at the thread's exit.
    // SAFETY: a key of ours; glibc keeps the first 32 keys' values without allocating.
    keeping_errno(|| unsafe { libc::pthread_setspecific(key - 1, std::ptr::dangling::<u8>().cast()) }) == 0
}

/// The destructor of [`EXIT_KEY`]: an exiting thread's credit goes back to
/// the ledger.
extern "C" fn thread_exiting(_: *mut libc::c_void) {
    let _ = std::panic::catch_unwind(|| {
        let block = thread_block::current();
        let credit = block.limit_credit.get();
        let slot = MY_SLOT.load(Ordering::Acquire);
        if credit.busy || credit.device == 0 || slot == NO_SLOT {
            return;
        }
        if let Some(ledger) = ledger() {
            return_to_ledger(ledger, usize::from(credit.device) - 1, slot as usize, credit.bytes);
        }
        block.limit_credit.set(LimitCredit::default());
    });
}

/// The ledger's figures of `device`, under a limit.
fn entry_of(device: i8) -> Option<&'static shared_ledger::DeviceEntry> {
    if !enabled() {
        return None;
    }
    let ledger = ledger()?;
    let index = device_index(ledger, device)?;
    Some(ledger.entry(index))
}

/// A reading of `device` (free and total bytes, as the driver gave them):
/// what the driver holds beyond the counted allocations is updated.
pub fn note_reading(device: i8, free: u64, total: u64) {
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
pub fn note_first_context(device: i8, free: u64, total: u64) {
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
pub fn context_fits(device: i8, has_context: bool) -> bool {
    if !enabled() || has_context {
        return true;
    }
    let limit = LIMIT.load(Ordering::Relaxed);
    let Some(ledger) = ledger() else { return true };
    let Some(index) = device_index(ledger, device) else {
        return true;
    };
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
pub fn reported_memory_info(device: i8, free: u64, total: u64) -> (u64, u64) {
    let limit = LIMIT.load(Ordering::Relaxed);
    if device >= 0 {
        note_reading(device, free, total);
    }
    let used = total.saturating_sub(free);
    (free.min(limit.saturating_sub(used)), total.min(limit))
}

/// What `cuDeviceTotalMem` reports under the limit.
pub fn reported_total(total: u64) -> u64 {
    total.min(LIMIT.load(Ordering::Relaxed))
}

/// Asks for the ledger's lines an allocation or a free on the process's
/// first device will touch: called on a hook's entry, so that they arrive
/// while the driver works.
#[inline(always)]
pub fn prefetch() {
    let ledger = LEDGER.load(Ordering::Relaxed);
    let slot = MY_SLOT.load(Ordering::Relaxed);
    if ledger.is_null() || slot == NO_SLOT {
        return;
    }
    // SAFETY: published from a mapping that is never unmapped.
    let ledger = unsafe { &*ledger };
    crate::sys::prefetch::prefetch_line(std::ptr::from_ref(ledger.entry(0)));
    crate::sys::prefetch::prefetch_line(std::ptr::from_ref(&ledger.slot(slot as usize).counted[0]));
}

/// In a forked child: its allocations are its own, counted in a slot of
/// its own; the parent's share stays the parent's.
pub fn forget_parent() {
    MY_SLOT.store(NO_SLOT, Ordering::Relaxed);
    RECORDED.store(0, Ordering::Relaxed);
}
