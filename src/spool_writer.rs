//! Writes this process's records into its spool file.
//!
//! The file is mapped `MAP_SHARED`, so a record is in the page cache, and so
//! in the file, the moment the hook stores it: nothing is lost if the process
//! is then killed. A record costs two atomic operations and some stores; the
//! only system calls are the file's creation on the first event and one
//! `ftruncate` + `mmap` per [`CHUNK_RECORDS`] records.
//!
//! Files are named `cudatrace-<pid>-<n>.spool` in `$CUDATRACE_DIR` (default:
//! the working directory); `<n>` tells apart the images of a process that
//! called `exec`.

use cudatrace_events::layout::{CHUNK_RECORDS, CMDLINE_CAPACITY, HEADER_SIZE, RECORD_SIZE, SPOOL_MAGIC, SPOOL_VERSION};
use cudatrace_events::{naming, RawRecord, SpoolHeader};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

const CHUNK_BYTES: usize = CHUNK_RECORDS * RECORD_SIZE;
/// At most this many chunks: about a billion records per process.
const MAX_CHUNKS: usize = 1 << 16;

const CLOSED: u8 = 0;
const OPENING: u8 = 1;
const OPEN: u8 = 2;
const FAILED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(CLOSED);
static FD: AtomicI32 = AtomicI32::new(-1);
static HEADER: AtomicPtr<SpoolHeader> = AtomicPtr::new(std::ptr::null_mut());
static NEXT_SEQ: AtomicU64 = AtomicU64::new(0);
static CHUNKS: [AtomicPtr<RawRecord>; MAX_CHUNKS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CHUNKS];
/// Guards growing the file; held only around `ftruncate` + `mmap`.
static GROW_LOCK: AtomicBool = AtomicBool::new(false);
/// Chunks the file has room for (only changed under `GROW_LOCK`).
static FILE_CHUNKS: AtomicUsize = AtomicUsize::new(0);

/// Counters kept in the spool header, so that they survive a crash.
#[derive(Clone, Copy)]
pub enum Counter {
    /// A free of memory the tracer had not seen allocated.
    UnknownFree,
    /// An allocation the live table had no room for.
    RegistryOverflow,
    /// A record that could not be stored.
    DroppedRecord,
}

/// Reserves the next sequence number. Frees take theirs before calling the
/// driver, so that a free is always ordered before any reuse of its address
/// by another thread.
#[inline]
pub fn reserve_seq() -> u64 {
    NEXT_SEQ.fetch_add(1, Ordering::Relaxed)
}

/// Stores `record` in the slot of `seq`, timestamped now, and publishes it.
#[inline]
pub fn write(seq: u64, mut record: RawRecord) {
    let Some(slot) = slot_for(seq) else {
        bump(Counter::DroppedRecord);
        return;
    };
    record.seq_plus_one = 0;
    // Taken once the spool exists, so no event predates its process's start time.
    record.time_ns = monotonic_ns();
    // SAFETY: the slot belongs to `seq` alone, which this caller reserved, and
    // lies inside a live mapping of the spool.
    unsafe {
        slot.write(record);
        AtomicU64::from_ptr(slot.cast::<u64>()).store(seq + 1, Ordering::Release);
    }
}

/// Adds one to a header counter.
pub fn bump(counter: Counter) {
    if !ensure_open() {
        return;
    }
    let header = HEADER.load(Ordering::Acquire);
    // SAFETY: the header stays mapped while the state is OPEN.
    unsafe {
        let field = match counter {
            Counter::UnknownFree => &raw mut (*header).unknown_frees,
            Counter::RegistryOverflow => &raw mut (*header).registry_overflows,
            Counter::DroppedRecord => &raw mut (*header).dropped_records,
        };
        AtomicU64::from_ptr(field).fetch_add(1, Ordering::Relaxed);
    }
}

#[inline]
fn slot_for(seq: u64) -> Option<*mut RawRecord> {
    if !ensure_open() {
        return None;
    }
    let chunk = (seq / CHUNK_RECORDS as u64) as usize;
    let within = (seq % CHUNK_RECORDS as u64) as usize;
    let mut base = CHUNKS.get(chunk)?.load(Ordering::Acquire);
    if base.is_null() {
        base = map_chunk(chunk)?;
    }
    // SAFETY: `within` < CHUNK_RECORDS, the number of records in the mapping.
    Some(unsafe { base.add(within) })
}

fn lock_grow() {
    while GROW_LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
}

#[cold]
fn map_chunk(chunk: usize) -> Option<*mut RawRecord> {
    lock_grow();
    let result = map_chunk_locked(chunk);
    GROW_LOCK.store(false, Ordering::Release);
    result
}

fn map_chunk_locked(chunk: usize) -> Option<*mut RawRecord> {
    let existing = CHUNKS[chunk].load(Ordering::Acquire);
    if !existing.is_null() {
        return Some(existing);
    }
    let fd = FD.load(Ordering::Acquire);
    if FILE_CHUNKS.load(Ordering::Relaxed) <= chunk {
        let length = HEADER_SIZE + (chunk + 1) * CHUNK_BYTES;
        // SAFETY: growing our own file; never shrinks it, since only this
        // lock holder changes its size and chunks only ever increase.
        if unsafe { libc::ftruncate(fd, length as libc::off_t) } != 0 {
            return None;
        }
        FILE_CHUNKS.store(chunk + 1, Ordering::Relaxed);
    }
    // SAFETY: a shared mapping of a range the file now covers.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            CHUNK_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            (HEADER_SIZE + chunk * CHUNK_BYTES) as libc::off_t,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let base = base.cast::<RawRecord>();
    CHUNKS[chunk].store(base, Ordering::Release);
    Some(base)
}

#[inline]
fn ensure_open() -> bool {
    match STATE.load(Ordering::Acquire) {
        OPEN => true,
        FAILED => false,
        _ => open_slow(),
    }
}

#[cold]
fn open_slow() -> bool {
    if STATE
        .compare_exchange(CLOSED, OPENING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        let opened = create_spool();
        STATE.store(if opened { OPEN } else { FAILED }, Ordering::Release);
        return opened;
    }
    loop {
        match STATE.load(Ordering::Acquire) {
            OPEN => return true,
            FAILED => return false,
            _ => std::thread::yield_now(),
        }
    }
}

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in nanoseconds (through the vDSO: no system call).
#[inline]
pub fn monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

fn spool_directory() -> std::path::PathBuf {
    match std::env::var_os("CUDATRACE_DIR") {
        Some(dir) if !dir.is_empty() => dir.into(),
        _ => ".".into(),
    }
}

fn create_spool() -> bool {
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
    let directory = spool_directory();
    if !crate::tree_root::prepare_spool_dir(&directory) {
        return false;
    }
    let mut fd = -1;
    for image in 0..1000 {
        let path = directory.join(naming::spool_file_name(pid, image));
        let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: a NUL-terminated path.
        fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            break;
        }
    }
    if fd < 0 {
        return false;
    }
    // SAFETY: fd is ours; the header page is mapped shared like the records.
    let header = unsafe {
        if libc::ftruncate(fd, HEADER_SIZE as libc::off_t) != 0 {
            libc::close(fd);
            return false;
        }
        libc::mmap(
            std::ptr::null_mut(),
            HEADER_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if header == libc::MAP_FAILED {
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        return false;
    }
    let header = header.cast::<SpoolHeader>();
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let cmdline_len = cmdline.len().min(CMDLINE_CAPACITY);
    // SAFETY: the mapping is HEADER_SIZE bytes, the size of SpoolHeader, and zeroed.
    unsafe {
        let h = &mut *header;
        h.magic = SPOOL_MAGIC;
        h.version = SPOOL_VERSION;
        h.record_size = RECORD_SIZE as u32;
        h.header_size = HEADER_SIZE as u32;
        h.chunk_records = CHUNK_RECORDS as u32;
        h.pid = pid;
        h.ppid = ppid;
        h.start_monotonic_ns = monotonic_ns();
        h.start_realtime_ns = now_ns(libc::CLOCK_REALTIME);
        h.cmdline[..cmdline_len].copy_from_slice(&cmdline[..cmdline_len]);
        h.cmdline_len = cmdline_len as u32;
    }
    FD.store(fd, Ordering::Release);
    HEADER.store(header, Ordering::Release);
    // SAFETY: registering a plain function; it checks the header itself.
    unsafe { on_exit(record_exit, std::ptr::null_mut()) };
    crate::tree_root::start_collector_if_first(&directory);
    true
}

unsafe extern "C" {
    /// glibc's `on_exit`: like `atexit`, but the handler receives the exit status.
    fn on_exit(handler: extern "C" fn(libc::c_int, *mut libc::c_void), arg: *mut libc::c_void) -> libc::c_int;
}

/// Stores how the process exited in its spool header, for the collector.
extern "C" fn record_exit(status: libc::c_int, _arg: *mut libc::c_void) {
    let header = HEADER.load(Ordering::Acquire);
    if header.is_null() {
        return;
    }
    // SAFETY: the header stays mapped until the process is gone; the flag is
    // published after the values it guards.
    unsafe {
        (*header).exit_time_ns = monotonic_ns();
        (*header).exit_status = status;
        AtomicU32::from_ptr(&raw mut (*header).exit_recorded).store(1, Ordering::Release);
    }
}

/// Called in a forked child. The inherited mappings point into the parent's
/// spool: drop them so that the child starts a spool of its own. Any lock a
/// parent thread held at the fork is released, since that thread is gone.
pub fn forget_parent_spool() {
    let mapped = FILE_CHUNKS.load(Ordering::Relaxed).min(MAX_CHUNKS);
    for chunk in &CHUNKS[..mapped] {
        let base = chunk.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !base.is_null() {
            // SAFETY: the child's inherited view of the parent's chunk, no longer used.
            unsafe { libc::munmap(base.cast(), CHUNK_BYTES) };
        }
    }
    let header = HEADER.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !header.is_null() {
        // SAFETY: as above, for the header page.
        unsafe { libc::munmap(header.cast(), HEADER_SIZE) };
    }
    let fd = FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: the child's copy of the parent's descriptor.
        unsafe { libc::close(fd) };
    }
    FILE_CHUNKS.store(0, Ordering::Relaxed);
    NEXT_SEQ.store(0, Ordering::Relaxed);
    GROW_LOCK.store(false, Ordering::Release);
    STATE.store(CLOSED, Ordering::Release);
}
