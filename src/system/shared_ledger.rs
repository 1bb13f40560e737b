//! The memory limit's ledger: one small file that every process of a traced
//! tree maps shared. Per device (named by its UUID, since ranks see
//! different ordinals), it holds the bytes the tree's processes have
//! allocated there and what the driver held beyond them when last read;
//! per process, that process's own share, so that the share of a process
//! that died can be taken off.
//!
//! Everything is atomics in the mapping: no lock that a killed process
//! could leave held, and nothing a hook could wait on (the one lock, which
//! serialises admissions on a fresh device reading, names its holder and
//! is taken over from a holder that died).
//!
//! The file is shared only with processes of the same user: one found in
//! the folder that another user owns, or that others may read or write, is
//! not adopted (with a shared, sticky `CUDATRACE_DIR`, anyone could plant
//! one). Its blocks are reserved with `fallocate`, so that a store into it
//! never meets a full disk (`SIGBUS`), and it is never grown past
//! `ulimit -f` (`SIGXFSZ`). When it cannot be used, the process keeps a
//! ledger of its own ([`private_ledger`]) and says why ([`Unshared`]).

use crate::system::file_space;
use cudatrace_events::measures::limit_ledger;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Devices one ledger keeps; a process's devices past these are not limited.
pub(crate) const MAX_DEVICES: usize = 16;
/// Processes that can hold a share at once; dead ones are taken off to
/// make room.
pub(crate) const MAX_PROCESSES: usize = 1024;

/// Version 2 added the credit epochs, the credit ceiling, pending bytes and the
/// admission lock: a version-1 file of an older library is not adopted.
const MAGIC: u64 = u64::from_le_bytes(*b"cdtlimt2");
const FREE: u64 = 0;
const CLAIMING: u64 = 1;
const READY: u64 = 2;
/// A process slot's owner while a process takes a dead owner's share off.
const TAKING_OFF: u64 = u64::MAX;

/// One device's figures, shared by the tree.
#[repr(C, align(64))]
pub(crate) struct DeviceEntry {
    state: AtomicU64,
    uuid: [AtomicU64; 2],
    /// Bytes of the tree's allocations on the device, and of those being
    /// made right now.
    pub(crate) counted: AtomicU64,
    /// What the driver held on the device beyond `counted` when last read:
    /// contexts, modules and kernels, pools and graph memory beyond their
    /// allocations, the driver's rounding.
    pub(crate) beyond: AtomicU64,
    /// What a context of the tree took on the device when first seen; 0
    /// until one was measured.
    pub(crate) context_bytes: AtomicU64,
    /// The most credit the tree's threads may hold unspent on the device:
    /// two chunks for each thread holding some, whatever its epoch. The
    /// ledger's figure less this is a floor of what the tree really uses.
    pub(crate) ceiling: AtomicU64,
    /// Bytes admitted through the ledger (not from a thread's credit) whose
    /// allocation has not returned yet: a reading does not show them.
    pub(crate) pending: AtomicU64,
    /// The admission lock: 0, or the holder's thread id (high half) and
    /// when it took the lock (low half, milliseconds of `CLOCK_MONOTONIC`).
    pub(crate) admitting: AtomicU64,
}

/// One process's share.
#[repr(C, align(64))]
pub(crate) struct ProcessSlot {
    owner: AtomicU64,
    start_time: AtomicU64,
    /// The process's bytes counted on each device of the ledger.
    pub(crate) counted: [AtomicU64; MAX_DEVICES],
    /// The process's part of each device's [`DeviceEntry::pending`].
    pub(crate) pending: [AtomicU64; MAX_DEVICES],
    /// The process's part of each device's [`DeviceEntry::ceiling`].
    pub(crate) ceiling: [AtomicU64; MAX_DEVICES],
}

impl ProcessSlot {
    /// The pid that holds the slot (0 when free).
    pub(crate) fn owner(&self) -> u64 {
        self.owner.load(Ordering::Acquire)
    }
}

/// The whole file.
#[repr(C)]
pub(crate) struct Ledger {
    magic: AtomicU64,
    _reserved: [AtomicU64; 7],
    /// Per device, the generation of the threads' credit: credit given
    /// under another epoch is void. A line of its own, read by every
    /// allocation under a limit and written only when credit is revoked.
    epochs: Epochs,
    devices: [DeviceEntry; MAX_DEVICES],
    processes: [ProcessSlot; MAX_PROCESSES],
}

#[repr(C, align(64))]
struct Epochs([AtomicU32; MAX_DEVICES]);

const LEDGER_BYTES: usize = std::mem::size_of::<Ledger>();

/// Why a process keeps a ledger of its own instead of the tree's: each is
/// said in the trace, with the limit (the number is the record's code, of
/// `cudatrace_events::measures::limit_ledger`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum Unshared {
    /// No spool folder is known to put the tree's ledger in.
    NoFolder = limit_ledger::NO_FOLDER,
    /// The file could not be opened.
    CannotOpen = limit_ledger::CANNOT_OPEN,
    /// It is owned by another user, or others may read or write it.
    NotPrivate = limit_ledger::NOT_PRIVATE,
    /// `ulimit -f` is smaller than the ledger.
    FileSizeLimit = limit_ledger::FILE_SIZE_LIMIT,
    /// No disk space could be reserved for it (full disk, or a file system
    /// without `fallocate`).
    NoSpace = limit_ledger::NO_SPACE,
    /// It is not a ledger of this version.
    NotALedger = limit_ledger::NOT_A_LEDGER,
    /// Every device entry of the tree's ledger is taken by other devices.
    NoDeviceRoom = limit_ledger::NO_DEVICE_ROOM,
}

/// Maps the ledger at `path`, creating it (empty) if it is not there yet;
/// why not when it cannot be used: the caller then falls back to
/// [`private_ledger`].
pub(crate) fn open(path: &CStr) -> Result<&'static Ledger, Unshared> {
    // SAFETY: a NUL-terminated path; the flags ask for a new descriptor of ours.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600,
        )
    };
    if fd < 0 {
        return Err(Unshared::CannotOpen);
    }
    let mapped = map_file(fd);
    // SAFETY: `fd` is ours, opened above; the mapping outlives it.
    unsafe { libc::close(fd) };
    adopt(mapped?).ok_or(Unshared::NotALedger)
}

fn map_file(fd: i32) -> Result<*mut libc::c_void, Unshared> {
    // SAFETY: an all-zero `stat` is a valid out-parameter.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open; `stat` is writable.
    if unsafe { libc::fstat(fd, &mut stat) } != 0 || (stat.st_mode & libc::S_IFMT) != libc::S_IFREG {
        return Err(Unshared::NotPrivate);
    }
    // SAFETY: no preconditions.
    if stat.st_uid != unsafe { libc::geteuid() } || stat.st_mode & 0o077 != 0 {
        return Err(Unshared::NotPrivate);
    }
    // Blocks for the whole file, for real: a sparse one would fault on a
    // full disk at its first store. Two processes reserving at once change
    // nothing; a file another process of the tree reserved already is
    // taken as it is (this one may have a smaller `ulimit -f`, or come
    // after the disk filled).
    let reserved = stat.st_size as u64 >= LEDGER_BYTES as u64 && stat.st_blocks as u64 * 512 >= LEDGER_BYTES as u64;
    if !reserved {
        if !file_space::within_size_limit(LEDGER_BYTES as u64) {
            return Err(Unshared::FileSizeLimit);
        }
        file_space::allocate_blocks(fd, 0, LEDGER_BYTES as u64).map_err(|errno| match errno {
            libc::EFBIG => Unshared::FileSizeLimit,
            _ => Unshared::NoSpace,
        })?;
    }
    // SAFETY: a fresh shared mapping of the file's first LEDGER_BYTES.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LEDGER_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(Unshared::CannotOpen);
    }
    Ok(base)
}

/// A ledger of this process alone (and of the children it forks), for when
/// the tree's file cannot be used: the limit still holds per process.
pub(crate) fn private_ledger() -> Option<&'static Ledger> {
    // SAFETY: a fresh anonymous shared mapping.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LEDGER_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    adopt(base)
}

/// Takes a mapping as the ledger if it is an empty one or one of ours.
fn adopt(base: *mut libc::c_void) -> Option<&'static Ledger> {
    // SAFETY: the mapping is LEDGER_BYTES long, page-aligned, and all-zero
    // bytes are a valid Ledger (atomics only); it is never unmapped.
    let ledger: &'static Ledger = unsafe { &*(base as *const Ledger) };
    match ledger
        .magic
        .compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => Some(ledger),
        Err(MAGIC) => Some(ledger),
        Err(_) => {
            // SAFETY: our own mapping, which nothing refers to yet.
            unsafe { libc::munmap(base, LEDGER_BYTES) };
            None
        }
    }
}

fn uuid_words(uuid: [u8; 16]) -> (u64, u64) {
    let (low, high) = uuid.split_at(8);
    (
        u64::from_le_bytes(low.try_into().unwrap_or_default()),
        u64::from_le_bytes(high.try_into().unwrap_or_default()),
    )
}

impl Ledger {
    /// The device entry of the GPU with `uuid`, made if it is new; `None`
    /// once [`MAX_DEVICES`] others are there.
    pub(crate) fn device(&self, uuid: [u8; 16]) -> Option<usize> {
        let (low, high) = uuid_words(uuid);
        for (index, entry) in self.devices.iter().enumerate() {
            // A claim is two stores away from ready; it is not waited for
            // long, since the claimer may be this very thread, interrupted.
            for _ in 0..10_000 {
                match entry.state.load(Ordering::Acquire) {
                    READY => break,
                    FREE => {
                        if entry
                            .state
                            .compare_exchange(FREE, CLAIMING, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                        {
                            entry.uuid[0].store(low, Ordering::Relaxed);
                            entry.uuid[1].store(high, Ordering::Relaxed);
                            entry.state.store(READY, Ordering::Release);
                            return Some(index);
                        }
                    }
                    _ => std::hint::spin_loop(),
                }
            }
            if entry.state.load(Ordering::Acquire) == READY
                && entry.uuid[0].load(Ordering::Relaxed) == low
                && entry.uuid[1].load(Ordering::Relaxed) == high
            {
                return Some(index);
            }
        }
        None
    }

    /// The figures of device entry `index`.
    #[inline]
    pub(crate) fn entry(&self, index: usize) -> &DeviceEntry {
        &self.devices[index]
    }

    /// The credit epoch of device entry `index`.
    #[inline]
    pub(crate) fn epoch(&self, index: usize) -> &AtomicU32 {
        &self.epochs.0[index]
    }

    /// The share of process slot `index`.
    #[inline]
    pub(crate) fn slot(&self, index: usize) -> &ProcessSlot {
        &self.processes[index]
    }

    /// Claims a process slot for `pid`. A slot `pid` held already belonged
    /// to the image it `exec`'d from, whose memory the driver gave back:
    /// its share is taken off and the slot reused. When every slot is
    /// taken, the shares of dead processes are taken off first.
    pub(crate) fn claim_slot(&self, pid: u32, start_time: u64) -> Option<usize> {
        let pid = u64::from(pid);
        for (index, slot) in self.processes.iter().enumerate() {
            if slot.owner.load(Ordering::Acquire) == pid
                && slot
                    .owner
                    .compare_exchange(pid, TAKING_OFF, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                self.take_off(slot);
                slot.start_time.store(start_time, Ordering::Relaxed);
                slot.owner.store(pid, Ordering::Release);
                return Some(index);
            }
        }
        for attempt in 0..2 {
            for (index, slot) in self.processes.iter().enumerate() {
                if slot.owner.load(Ordering::Relaxed) == FREE
                    && slot
                        .owner
                        .compare_exchange(FREE, TAKING_OFF, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    slot.start_time.store(start_time, Ordering::Relaxed);
                    slot.owner.store(pid, Ordering::Release);
                    return Some(index);
                }
            }
            if attempt == 0 {
                self.take_off_dead(pid as u32);
            }
        }
        None
    }

    /// Takes off the share of every process that has ended (or whose pid
    /// now names another process), other than `me`.
    pub(crate) fn take_off_dead(&self, me: u32) {
        for slot in &self.processes {
            let owner = slot.owner.load(Ordering::Acquire);
            if owner == FREE || owner == TAKING_OFF || owner == u64::from(me) {
                continue;
            }
            if !process_is_gone(owner as u32, slot.start_time.load(Ordering::Relaxed)) {
                continue;
            }
            if slot
                .owner
                .compare_exchange(owner, TAKING_OFF, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.take_off(slot);
                slot.owner.store(FREE, Ordering::Release);
            }
        }
    }

    /// The three figures of device `index` that a process holds a share
    /// of, each with that share: counted, pending and ceiling, in this order.
    pub(crate) fn shares<'a>(&'a self, slot: &'a ProcessSlot, index: usize) -> [(&'a AtomicU64, &'a AtomicU64); 3] {
        let entry = &self.devices[index];
        [
            (&entry.counted, &slot.counted[index]),
            (&entry.pending, &slot.pending[index]),
            (&entry.ceiling, &slot.ceiling[index]),
        ]
    }

    fn take_off(&self, slot: &ProcessSlot) {
        for index in 0..MAX_DEVICES {
            for (shared, share) in self.shares(slot, index) {
                let bytes = share.swap(0, Ordering::AcqRel);
                if bytes != 0 {
                    subtract(shared, bytes);
                }
            }
        }
    }
}

/// A device's admission lock, held until dropped.
pub(crate) struct AdmissionLock<'a> {
    word: &'a AtomicU64,
    mine: u64,
}

impl Drop for AdmissionLock<'_> {
    fn drop(&mut self) {
        let _ = self
            .word
            .compare_exchange(self.mine, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// How long an admission may hold the lock before another takes it over:
/// the holder makes one device reading, which takes microseconds. A holder
/// that died, was replaced by an `exec` or jumped out of its hook never
/// lets go.
const LEASE_MS: u64 = 200;

/// Milliseconds of `CLOCK_MONOTONIC`, the lock's clock.
fn now_ms() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .wrapping_mul(1000)
        .wrapping_add(now.tv_nsec as u64 / 1_000_000)
}

impl Ledger {
    /// Takes device entry `index`'s admission lock for thread `tid`: waited
    /// for while its holder's lease lasts, then taken over. `None` when this
    /// very thread holds a live lease (a signal handler's hook inside the
    /// holder).
    pub(crate) fn lock_admissions(&self, index: usize, tid: u32) -> Option<AdmissionLock<'_>> {
        let word = &self.devices[index].admitting;
        let mut round = 0u32;
        loop {
            let now = now_ms();
            let mine = (u64::from(tid) << 32) | (now & 0xffff_ffff);
            let holder = word.load(Ordering::Acquire);
            let held_since = holder & 0xffff_ffff;
            let expired = (now & 0xffff_ffff).wrapping_sub(held_since) & 0xffff_ffff > LEASE_MS;
            if holder == 0 || expired {
                if word
                    .compare_exchange(holder, mine, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Some(AdmissionLock { word, mine });
                }
                continue;
            }
            if (holder >> 32) as u32 == tid {
                return None;
            }
            round += 1;
            if round < 64 {
                std::hint::spin_loop();
            } else {
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000,
                };
                // SAFETY: a valid timespec; the remainder is not wanted.
                unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
            }
        }
    }
}

/// `counter -= bytes`, stopping at 0: one atomic subtraction, and a
/// repair in the rare case that it went below zero (a free of bytes whose
/// share was already taken off).
#[inline]
pub(crate) fn subtract(counter: &AtomicU64, bytes: u64) {
    let before = counter.fetch_sub(bytes, Ordering::AcqRel);
    if before < bytes {
        counter.fetch_add(bytes - before, Ordering::AcqRel);
    }
}

/// When the process started, in clock ticks after boot (field 22 of
/// `/proc/PID/stat`); 0 if it cannot be read. With the pid, it names one
/// process for good: a pid is reused, its start time is not.
pub(crate) fn start_time_of(pid: u32) -> u64 {
    read_stat(pid).map_or(0, |(_, start)| start)
}

/// Whether `pid` is no longer the process that started at `start_time`:
/// gone, a zombie (whose memory the driver has given back), or reused.
fn process_is_gone(pid: u32, start_time: u64) -> bool {
    match read_stat(pid) {
        // No /proc to read (or another pid namespace's): only a process
        // that does not exist is gone.
        None => {
            // SAFETY: signal 0 checks existence only.
            let missing = unsafe { libc::kill(pid as libc::pid_t, 0) } != 0;
            missing && crate::system::thread::last_errno() == libc::ESRCH
        }
        Some((state, start)) => matches!(state, b'Z' | b'X' | b'x') || (start_time != 0 && start != start_time),
    }
}

/// (state, start time) of `pid`, read without allocating.
fn read_stat(pid: u32) -> Option<(u8, u64)> {
    // "/proc/" + at most 10 digits + "/stat" + NUL.
    let mut path = [0u8; 32];
    path[..6].copy_from_slice(b"/proc/");
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (pid, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        n /= 10;
        len += 1;
        if n == 0 {
            break;
        }
    }
    for (i, &digit) in digits[..len].iter().rev().enumerate() {
        path[6 + i] = digit;
    }
    path[6 + len..6 + len + 5].copy_from_slice(b"/stat");
    // SAFETY: `path` is NUL-terminated within its bounds.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut stat = [0u8; 1024];
    // SAFETY: `stat` is writable for its length; `fd` is ours.
    let read = unsafe { libc::read(fd, stat.as_mut_ptr().cast(), stat.len()) };
    // SAFETY: `fd` is ours, opened above.
    unsafe { libc::close(fd) };
    parse_stat(&stat[..usize::try_from(read).ok()?])
}

/// (state, start time) from the text of `/proc/PID/stat`. The command
/// name may hold spaces and parentheses, so fields are counted from the
/// last `)`.
fn parse_stat(stat: &[u8]) -> Option<(u8, u64)> {
    let after_name = stat.iter().rposition(|&b| b == b')')? + 1;
    let mut fields = stat[after_name..].split(|&b| b == b' ').filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    // The state is field 3; the start time field 22.
    let start = fields.nth(18)?;
    let start = std::str::from_utf8(start).ok()?.trim().parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stat_line_gives_state_and_start_time_whatever_the_name() {
        let line = b"4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 0\n";
        assert_eq!(parse_stat(line), Some((b'S', 987654)));
        assert_eq!(
            parse_stat(b"12 (z) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 55 0"),
            Some((b'Z', 55))
        );
        assert_eq!(parse_stat(b"12 (short) R 1 2"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_another_process() {
        let me = std::process::id();
        let start = start_time_of(me);
        assert!(start > 0);
        assert!(!process_is_gone(me, start));
        assert!(process_is_gone(me, start + 1));
        assert!(process_is_gone(u32::MAX - 1, 0));
    }

    #[test]
    fn devices_are_found_by_uuid_and_shares_of_the_dead_are_taken_off() {
        let ledger = private_ledger().expect("an anonymous mapping");
        let a = ledger.device([1; 16]).unwrap();
        let b = ledger.device([2; 16]).unwrap();
        assert_eq!((a, b), (0, 1));
        assert_eq!(ledger.device([1; 16]), Some(0));
        let me = std::process::id();
        let mine = ledger.claim_slot(me, start_time_of(me)).unwrap();
        let dead = ledger.claim_slot(u32::MAX - 1, 7).unwrap();
        assert_ne!(mine, dead);
        for (slot, bytes) in [(mine, 100), (dead, 40)] {
            ledger.slot(slot).counted[a].fetch_add(bytes, Ordering::Relaxed);
            ledger.entry(a).counted.fetch_add(bytes, Ordering::Relaxed);
        }
        ledger.take_off_dead(me);
        assert_eq!(ledger.entry(a).counted.load(Ordering::Relaxed), 100);
        assert_eq!(ledger.slot(dead).counted[a].load(Ordering::Relaxed), 0);
        // Claimed again by the same pid (an exec'd image): its share goes.
        assert_eq!(ledger.claim_slot(me, start_time_of(me)), Some(mine));
        assert_eq!(ledger.entry(a).counted.load(Ordering::Relaxed), 0);
    }
}
