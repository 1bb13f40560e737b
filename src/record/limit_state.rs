//! Where a process stands under the memory limit: the limit itself, the
//! ledger it counts in (the tree's, or one of its own), its slot there and
//! the ledger's index of each device it uses. Looked up once, then read
//! with plain loads on every allocation and free.

use crate::record::recorder::{self, Record};
use crate::spool::tree_root;
use crate::system::cuda_ffi::*;
use crate::system::no_cancel::without_cancellation;
use crate::system::shared_ledger::{self, Ledger, Unshared};
use crate::system::symbols::{real_fn, Sym};
use crate::system::tracing_switch::{guarded, keeping_errno};
use cudatrace_events::{naming, Op};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// The limit in bytes; 0 = no limit.
#[unsafe(link_section = "cudatrace_hot")]
pub(super) static LIMIT: AtomicU64 = AtomicU64::new(0);
// The statics every allocation and free reads under a limit are hot
// statics (see `system::hot_statics`): after the driver's call they would
// otherwise be cache misses of their own.
#[unsafe(link_section = "cudatrace_hot")]
pub(super) static LEDGER: AtomicPtr<Ledger> = AtomicPtr::new(std::ptr::null_mut());
/// This process's slot in the ledger; [`NO_SLOT`] until claimed.
#[unsafe(link_section = "cudatrace_hot")]
pub(super) static MY_SLOT: AtomicU32 = AtomicU32::new(NO_SLOT);
pub(super) const NO_SLOT: u32 = u32::MAX;
/// Device ordinals seen by the process: 0 not looked up yet,
/// [`NOT_LIMITED`] for one the ledger has no room or no UUID for, else the
/// ledger's device index + 1. Ordinals past these are not limited (a
/// ledger keeps 16 devices too).
#[unsafe(link_section = "cudatrace_hot")]
pub(super) static DEVICE_INDEX: [AtomicU8; shared_ledger::MAX_DEVICES] =
    [const { AtomicU8::new(0) }; shared_ledger::MAX_DEVICES];
pub(super) const NOT_LIMITED: u8 = u8::MAX;
/// Devices whose limit record this process has written, one bit each.
pub(super) static RECORDED: AtomicU64 = AtomicU64::new(0);
/// Why this process keeps a ledger of its own ([`Unshared`] as a number);
/// 0 while it uses the tree's. Said in every limit record it writes.
pub(super) static UNSHARED: AtomicU64 = AtomicU64::new(0);

/// Whether a limit is set. One load: the hooks' test of it is all a
/// process without a limit pays. (A process whose tracing turned itself
/// off stops counting: the bookkeeping runs under `guarded`.)
#[inline(always)]
pub(crate) fn enabled() -> bool {
    LIMIT.load(Ordering::Relaxed) != 0
}

#[inline]
pub(super) fn ledger() -> Option<&'static Ledger> {
    let existing = LEDGER.load(Ordering::Acquire);
    if !existing.is_null() {
        // SAFETY: published below from a mapping that is never unmapped.
        return Some(unsafe { &*existing });
    }
    open_ledger()
}

#[cold]
pub(super) fn open_ledger() -> Option<&'static Ledger> {
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

#[inline]
pub(super) fn my_slot(ledger: &Ledger) -> Option<usize> {
    let slot = MY_SLOT.load(Ordering::Acquire);
    if slot < CLAIMING {
        return Some(slot as usize);
    }
    claim_slot(ledger)
}

/// [`MY_SLOT`] while one thread claims the process's slot: another thread
/// claiming at once would find the slot its pid holds and take it for an
/// exec'd image's, taking the first thread's bytes off.
pub(super) const CLAIMING: u32 = NO_SLOT - 1;

#[cold]
pub(super) fn claim_slot(ledger: &Ledger) -> Option<usize> {
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
        let _held = crate::system::no_cancel::NoCancel::hold();
        let pid = std::process::id();
        ledger.claim_slot(pid, shared_ledger::start_time_of(pid))
    });
    MY_SLOT.store(claimed.map_or(NO_SLOT, |slot| slot as u32), Ordering::Release);
    claimed
}

/// The ledger's index of device `ordinal`, looked up (one driver call for
/// its UUID) the first time the process uses it.
#[inline]
pub(super) fn device_index(ledger: &Ledger, ordinal: i8) -> Option<usize> {
    let cached = DEVICE_INDEX.get(usize::try_from(ordinal).ok()?)?;
    match cached.load(Ordering::Acquire) {
        0 => look_up_device(ledger, ordinal, cached),
        NOT_LIMITED => None,
        index => Some(usize::from(index - 1)),
    }
}

#[cold]
pub(super) fn look_up_device(ledger: &Ledger, ordinal: i8, cached: &AtomicU8) -> Option<usize> {
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
pub(super) fn switch_to_own_ledger(why: Unshared) -> Option<&'static Ledger> {
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
pub(super) const OWN_LEDGER_EPOCH: u32 = 1 << 31;

/// The ledger in use: after [`ledger`] returned one, never null.
#[inline(always)]
pub(super) fn ledger_in_use() -> Option<&'static Ledger> {
    let pointer = LEDGER.load(Ordering::Acquire);
    // SAFETY: published from a mapping that is never unmapped.
    (!pointer.is_null()).then(|| unsafe { &*pointer })
}

/// The UUID of device `ordinal`, which names it whatever a process's
/// `CUDA_VISIBLE_DEVICES`. A driver that cannot tell it (no
/// `cuDeviceGetUuid_v2`, or an error) gets a name made of the ordinal, so
/// that the limit still holds: then processes share a device's limit only
/// where they number the device alike.
pub(super) fn uuid_of(ordinal: i8) -> [u8; 16] {
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
pub(super) fn record_limit(ordinal: i8) {
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
