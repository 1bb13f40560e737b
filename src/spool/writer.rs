//! Writes this process's records into its spool file.
//!
//! The file is mapped `MAP_SHARED`, so a record is in the page cache, and so
//! in the file, the moment the hook stores it: nothing is lost if the process
//! is then killed. A record costs two atomic operations and some stores; the
//! only system calls are the file's creation and, per [`CHUNK_RECORDS`]
//! records, those that reserve and map a chunk ([`spool_chunks`]).
//!
//! When a record cannot be stored (its chunk cannot be reserved) the process
//! carries on untraced for that record: it is counted in the header with the
//! first `errno`, and a tombstone marks its slot once the chunk exists.
//!
//! Records are published as `layout` describes: the body first, then the
//! commit word with release ordering.
//!
//! Files are named `cudatrace-<pid>-<n>.spool` in `$CUDATRACE_DIR`, made
//! absolute when the library loaded (without it, no spool is written);
//! `<n>` tells apart the images of a process that called `exec`.
//!
//! [`spool_chunks`]: crate::spool::chunks

use crate::spool::chunks as spool_chunks;
use crate::spool::notice;
use crate::spool::recording_switch;
use crate::spool::replaced_image;
use crate::spool::spool_descriptor;
use crate::spool::tree_root;
use crate::system::clock::{monotonic_ns, realtime_ns, record_ns};
use crate::system::prefetch::prefetch_line;
use crate::system::process_mark;
use crate::system::process_place;
use crate::system::process_start;
use crate::system::spare_stack;
use crate::system::thread::last_errno;
use crate::system::thread_block;
use cudatrace_events::layout::{
    commit_word, CHUNK_RECORDS, CMDLINE_CAPACITY, EXEC_INTO_CAPACITY, HEADER_SIZE, RECORD_SIZE, SPOOL_MAGIC,
    SPOOL_VERSION,
};
use cudatrace_events::notices::NoSpool;
use cudatrace_events::{naming, RawRecord, SpoolHeader};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

const CLOSED: u8 = 0;
const OPENING: u8 = 1;
const OPEN: u8 = 2;
const FAILED: u8 = 3;

#[unsafe(link_section = "cudatrace_hot")]
static STATE: AtomicU8 = AtomicU8::new(CLOSED);
#[unsafe(link_section = "cudatrace_hot")]
static HEADER: AtomicPtr<SpoolHeader> = AtomicPtr::new(std::ptr::null_mut());
/// Sequence numbers for a process whose spool could not be created.
static UNSPOOLED_SEQ: AtomicU64 = AtomicU64::new(0);
/// The thread creating the spool (see [`this_thread`]), 0 when none: a hook
/// re-entered on that thread from a signal handler must not wait for the
/// frame it interrupted, which cannot go on until the handler returns.
static OPENER: AtomicUsize = AtomicUsize::new(0);
/// Events of hooks re-entered on the creating thread while the spool was
/// being created: counted as lost in the spool once it exists.
static LOST_WHILE_OPENING: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// A byte of each thread's own, whose address names the thread.
    static THREAD_MARK: u8 = const { 0 };
}

/// This thread, as the address of its [`THREAD_MARK`] (no system call);
/// 1 once the thread's locals are gone, which names no thread.
fn this_thread() -> usize {
    THREAD_MARK
        .try_with(|mark| std::ptr::from_ref(mark) as usize)
        .unwrap_or(1)
}
/// What the layers above want done when the spool opens and when the
/// process exits (set once, at load, by the lifecycle module).
static ON_OPEN: AtomicUsize = AtomicUsize::new(0);
static BEFORE_EXIT: AtomicUsize = AtomicUsize::new(0);

/// Sets the work done right after the spool is created (writing what the
/// layers above already know into it) and just before the exit is recorded
/// (their last readings). Called once, when the library loads.
pub(crate) fn set_callbacks(on_open: fn(), before_exit: fn()) {
    ON_OPEN.store(on_open as usize, Ordering::Release);
    BEFORE_EXIT.store(before_exit as usize, Ordering::Release);
}

fn run_callback(slot: &AtomicUsize) {
    let address = slot.load(Ordering::Acquire);
    if address != 0 {
        // SAFETY: only `set_callbacks` stores here, and it stores `fn()` pointers.
        let callback = unsafe { std::mem::transmute::<usize, fn()>(address) };
        let _ = std::panic::catch_unwind(callback);
    }
}

/// Counters kept in the spool header, so that they survive a crash.
#[derive(Clone, Copy)]
pub(crate) enum Counter {
    /// A free of memory the tracer had not seen allocated.
    UnknownFree,
    /// An allocation the live table had no room for.
    RegistryOverflow,
}

/// Reserves the next sequence number. Frees take theirs before calling the
/// driver, so that a free is always ordered before any reuse of its address
/// by another thread. The counter lives in the spool header, so readers know
/// how many were handed out.
#[inline]
pub(crate) fn reserve_seq() -> u64 {
    let header = if ensure_open() {
        HEADER.load(Ordering::Acquire)
    } else {
        std::ptr::null_mut()
    };
    if header.is_null() {
        if OPENER.load(Ordering::Acquire) == this_thread() {
            // A hook re-entered, from a signal handler, on the thread that
            // is creating the spool: its event is counted as lost once the
            // spool exists.
            LOST_WHILE_OPENING.fetch_add(1, Ordering::Relaxed);
        }
        return UNSPOOLED_SEQ.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: the header stays mapped while the state is OPEN; the field is
    // 8-byte aligned.
    unsafe { AtomicU64::from_ptr(&raw mut (*header).reserved_seqs) }.fetch_add(1, Ordering::Relaxed)
}

/// Stores `record` in the slot of `seq`, timestamped now, and publishes it.
#[inline]
pub(crate) fn write(seq: u64, record: RawRecord) {
    write_in(seq, record, spool_chunks::slot);
}

#[inline(always)]
fn write_in(seq: u64, mut record: RawRecord, slot_of: impl FnOnce(u64) -> Result<*mut RawRecord, i32>) {
    // Without a spool there is nothing to store, count or mark.
    if !ensure_open() {
        return;
    }
    let slot = match slot_of(seq) {
        Ok(slot) => slot,
        Err(errno) => {
            note_dropped(errno);
            spool_chunks::note_dropped_seq(seq);
            return;
        }
    };
    // Taken once the spool exists, so no event predates its process's start
    // time: a thread's TSC anchor is a clock reading taken at its first
    // record or later (a forked child drops the anchor it inherited).
    record.time_ns = record_ns();
    let body = record.body_words();
    let commit = commit_word(seq, &body);
    let words = slot.cast::<u64>();
    // SAFETY: the slot belongs to `seq` alone, which this caller reserved, and
    // lies inside a live, reserved mapping of the spool. The commit word goes
    // last, with release ordering, so a reader that sees it sees the body.
    unsafe {
        for (i, word) in body.iter().enumerate() {
            words.add(i + 1).write_volatile(*word);
        }
        AtomicU64::from_ptr(words).store(commit, Ordering::Release);
    }
    let next = if (seq + 1).is_multiple_of(CHUNK_RECORDS as u64) {
        0
    } else {
        // SAFETY: the next slot lies in the same mapping.
        let next = unsafe { slot.add(1) };
        prefetch_for_write(next);
        next as usize
    };
    thread_block::current().next_record.set((seq + 1, next));
}

/// Asks for the lines the calling thread's next record will touch: the
/// header's sequence-number line, the chunk table's entry
/// and the slot after the thread's last record, where the next one goes
/// unless another thread wrote in between. A hook calls it on entry, so
/// that the lines arrive while the driver works; a training process has
/// pushed them out of the caches since the last event.
#[inline(always)]
pub(crate) fn prefetch_next_record() {
    let header = HEADER.load(Ordering::Relaxed);
    if header.is_null() {
        return;
    }
    // SAFETY: HEADER is set once the header is mapped, and cleared by a
    // forked child before the parent's header is ever unmapped; the field
    // is 8-byte aligned.
    let reserved = unsafe { AtomicU64::from_ptr(&raw mut (*header).reserved_seqs) };
    prefetch_line(reserved.as_ptr());
    let (seq, slot) = thread_block::current().next_record.get();
    // Only while no other thread has written since: asking for a slot that
    // another thread has just stored in would take its line away from that
    // thread's core, which then has to fetch it back for the record next to
    // it. The load waits for the header's line, but nothing waits for it.
    if slot != 0 && reserved.load(Ordering::Relaxed) == seq {
        spool_chunks::prefetch_slot_lookup(seq);
        prefetch_for_write(slot as *mut RawRecord);
    }
}

/// Asks for the cache lines of the next record's slot: a hook runs after
/// the program has used the cache for other things, and each record's
/// stores otherwise wait for its lines to come from memory. A plain
/// prefetch, which every x86-64 has: a line no other core holds arrives
/// exclusive, and the store then needs no further request.
#[inline(always)]
fn prefetch_for_write(slot: *mut RawRecord) {
    // Both lines hold part of the slot (RECORD_SIZE is 72 bytes).
    let bytes = slot.cast::<u8>();
    prefetch_line(bytes);
    prefetch_line(bytes.wrapping_add(RECORD_SIZE - 1));
}

/// Adds one to a header counter.
pub(crate) fn bump(counter: Counter) {
    let Some(header) = open_header() else { return };
    // SAFETY: the header stays mapped while the state is OPEN.
    unsafe {
        let field = match counter {
            Counter::UnknownFree => &raw mut (*header).unknown_frees,
            Counter::RegistryOverflow => &raw mut (*header).registry_overflows,
        };
        AtomicU64::from_ptr(field).fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts a record that could not be stored, remembering the first reason.
fn note_dropped(errno: i32) {
    let Some(header) = open_header() else { return };
    // SAFETY: the header stays mapped while the state is OPEN.
    unsafe {
        AtomicU64::from_ptr(&raw mut (*header).dropped_records).fetch_add(1, Ordering::Relaxed);
        let _ = AtomicI32::from_ptr(&raw mut (*header).drop_errno).compare_exchange(
            0,
            errno.max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

fn open_header() -> Option<*mut SpoolHeader> {
    if !ensure_open() {
        return None;
    }
    let header = HEADER.load(Ordering::Acquire);
    (!header.is_null()).then_some(header)
}

/// Marks the spool header "exec under way" (`starting`) with the path the
/// call names (`into`, where it names one), or takes the mark back when
/// the call returned (it failed). Only the spool's own process marks it: a
/// child made by `vfork` shares the parent's memory, and must not mark the
/// parent's spool.
pub(crate) fn note_exec(starting: bool, into: Option<&std::ffi::CStr>) {
    let header = HEADER.load(Ordering::Acquire);
    if header.is_null() {
        return;
    }
    // SAFETY: getpid has no preconditions; the header stays mapped while
    // the process runs, and the fields are aligned.
    unsafe {
        if libc::getpid() as u32 != (*header).pid {
            return;
        }
        let path = into.filter(|_| starting).map_or(&[][..], |path| path.to_bytes());
        let len = path.len().min(EXEC_INTO_CAPACITY);
        (&raw mut (*header).exec_into)
            .cast::<u8>()
            .copy_from_nonoverlapping(path.as_ptr(), len);
        AtomicU32::from_ptr(&raw mut (*header).exec_into_len).store(len as u32, Ordering::Release);
        AtomicU32::from_ptr(&raw mut (*header).exec_started).store(u32::from(starting), Ordering::Release);
    }
}

/// Creates this process's spool now if it has none yet: called when the
/// process initialises CUDA, so that it appears in the trace even if it
/// never allocates.
pub(crate) fn open_now() {
    ensure_open();
}

/// Whether this process's spool exists (without creating it).
pub(crate) fn is_open() -> bool {
    STATE.load(Ordering::SeqCst) == OPEN
}

#[inline]
fn ensure_open() -> bool {
    // Never the parent's spool: a child that no fork handler ran in (made
    // by `_Fork` or `clone`) starts over first, and has no spool while it
    // does.
    if !process_mark::notice_new_process() {
        return false;
    }
    match STATE.load(Ordering::Acquire) {
        OPEN => true,
        FAILED => false,
        _ => open_slow(),
    }
}

/// Creates the spool, or waits for the thread creating it. The spool is
/// made by whichever hook records first, and some reserve a sequence number
/// before their real call, outside `guarded`: the program's `errno` is put
/// back here, whatever the system calls of the creation left in it.
#[cold]
fn open_slow() -> bool {
    // Creating the spool opens and writes files (cancellation points): a
    // pending cancellation of the thread waits for the program's own.
    crate::system::tracing_switch::keeping_errno(|| crate::system::no_cancel::without_cancellation(open_or_wait))
}

fn open_or_wait() -> bool {
    let me = this_thread();
    // The right to create the spool is taken in OPENER first, so that a
    // signal handler interrupting this thread at any point after it sees
    // itself named there, and never waits for itself.
    if STATE.load(Ordering::Acquire) == CLOSED
        && OPENER
            .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        let mut opened = None;
        if STATE
            .compare_exchange(CLOSED, OPENING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            raise_test_signal();
            // Deep (paths, the helper's start, the identity block): on a
            // spare stack, so that it fits beside a program on a small one.
            let created = spare_stack::deep(create_spool);
            STATE.store(if created { OPEN } else { FAILED }, Ordering::Release);
            opened = Some(created);
        }
        OPENER.store(0, Ordering::Release);
        if let Some(created) = opened {
            if created {
                spare_stack::deep(|| run_callback(&ON_OPEN));
                mark_lost_while_opening();
            }
            return created;
        }
    }
    loop {
        match STATE.load(Ordering::Acquire) {
            OPEN => return true,
            FAILED => return false,
            // Re-entered on the creating thread: no spool for this call.
            _ if OPENER.load(Ordering::Acquire) == me => return false,
            _ => std::thread::yield_now(),
        }
    }
}

/// A signal to raise in the thread creating the spool, while it does (0 =
/// none): `CUDATRACE_TEST_SIGNAL_WHILE_OPENING`, for the tests only, so
/// that a handler's hooks meet the spool half made, at will. Only in a
/// library built with the `testing` feature: a release build has no such
/// knob, nor its name.
#[cfg(feature = "testing")]
static TEST_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Reads `CUDATRACE_TEST_SIGNAL_WHILE_OPENING` (a signal number; tests
/// only). Called once, when the library loads; nothing without the
/// `testing` feature.
pub(crate) fn configure_test_signal() {
    #[cfg(feature = "testing")]
    {
        use cudatrace_events::settings;
        // SAFETY: parsed at once, in the library constructor.
        let value = unsafe { crate::system::environment::value(&settings::TEST_SIGNAL_WHILE_OPENING) };
        let signal = value.and_then(settings::parse_test_signal);
        TEST_SIGNAL.store(signal.unwrap_or(0), Ordering::Relaxed);
    }
}

fn raise_test_signal() {
    #[cfg(feature = "testing")]
    {
        let signal = TEST_SIGNAL.load(Ordering::Relaxed);
        if signal != 0 {
            // SAFETY: raising a signal in this thread; the test installs its handler.
            unsafe { libc::raise(signal) };
        }
    }
}

/// Gives each event lost while the spool was being created a sequence
/// number marked dropped: the collector counts it as lost, and the trace
/// says it lacks it.
fn mark_lost_while_opening() {
    for _ in 0..LOST_WHILE_OPENING.swap(0, Ordering::AcqRel) {
        let seq = reserve_seq();
        spool_chunks::note_dropped_seq(seq);
    }
}

/// Opens a new spool file for this pid, numbering images of the same pid;
/// returns it with its path.
fn create_file(directory: &std::path::Path, pid: u32) -> Option<(i32, std::ffi::CString)> {
    let first = replaced_image::first_free_image(pid);
    for image in first..first + 1000 {
        let path = directory.join(naming::spool_file_name(pid, image));
        let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd >= 0 {
            return Some((fd, c_path));
        }
        if last_errno() != libc::EEXIST {
            return None;
        }
    }
    None
}

/// Creates this process's spool; when it cannot, says why (through the
/// parent's header or the run's notice file), so that the trace shows the
/// process.
fn create_spool() -> bool {
    match try_create_spool() {
        Ok(()) => {
            notice::spool_opened();
            true
        }
        Err((errno, reason)) => {
            notice::could_not_record(errno, reason, tree_root::spool_dir());
            false
        }
    }
}

/// Why no spool: the `errno` (0 if none) and the reason.
type NoSpoolWhy = (i32, NoSpool);

fn try_create_spool() -> Result<(), NoSpoolWhy> {
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
    // No spool folder, no spool: never the working directory.
    let Some(directory) = tree_root::spool_dir() else {
        return Err((0, NoSpool::LostFolder));
    };
    let failed = |reason: NoSpool| (last_errno(), reason);
    if !tree_root::prepare_spool_dir(directory) {
        return Err(failed(NoSpool::CannotCreateFolder));
    }
    let Some((fd, path)) = create_file(directory, pid) else {
        return Err(failed(NoSpool::CannotCreate));
    };
    if !spool_descriptor::adopt(fd, path) {
        let failure = failed(NoSpool::CannotIdentify);
        // SAFETY: closing the descriptor just opened.
        unsafe { libc::close(fd) };
        return Err(failure);
    }
    // An empty file is left behind when even the header has no room: the
    // collector then reports the process as unrecorded.
    if let Err(errno) = spool_chunks::reserve(fd, 0, HEADER_SIZE as u64) {
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        return Err((errno, NoSpool::NoRoom));
    }
    // Mapped shared like the records, for the process's life.
    let Some(header) = spool_descriptor::map_header(fd) else {
        let failure = failed(NoSpool::CannotMap);
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        return Err(failure);
    };
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let cmdline_len = cmdline.len().min(CMDLINE_CAPACITY);
    // SAFETY: the mapping is HEADER_SIZE bytes, the size of SpoolHeader, and
    // zeroed. The magic goes last, with release ordering: a reader that sees
    // it sees a whole header.
    unsafe {
        let h = &mut *header;
        h.version = SPOOL_VERSION;
        h.record_size = RECORD_SIZE as u32;
        h.header_size = HEADER_SIZE as u32;
        h.chunk_records = CHUNK_RECORDS as u32;
        h.ring_chunks = spool_chunks::ring_chunks();
        h.pid = pid;
        h.ppid = ppid;
        h.start_monotonic_ns = monotonic_ns();
        h.start_realtime_ns = realtime_ns();
        process_place::fill(&mut h.identity);
        h.process_start_ticks = process_start::process_start_ticks();
        h.cmdline[..cmdline_len].copy_from_slice(&cmdline[..cmdline_len]);
        h.cmdline_len = cmdline_len as u32;
        AtomicU64::from_ptr((&raw mut h.magic).cast()).store(u64::from_le_bytes(SPOOL_MAGIC), Ordering::Release);
    }
    // SAFETY: the header stays mapped while the process runs; the field is
    // 4-byte aligned and written by the collector.
    spool_chunks::watch_punched(unsafe { AtomicU32::from_ptr(&raw mut (*header).punched_chunks) });
    HEADER.store(header, Ordering::Release);
    // SAFETY: registering a plain function; it checks the header itself.
    unsafe { on_exit(record_exit, std::ptr::null_mut()) };
    tree_root::start_collector_if_first(directory);
    // Before the spool is published open, so that the first event already
    // follows the job's switch (`cudatrace run --start-paused`).
    recording_switch::map(directory);
    Ok(())
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
    run_callback(&BEFORE_EXIT);
    // SAFETY: the header stays mapped until the process is gone; the flag is
    // published after the values it guards.
    unsafe {
        process_place::fill_missing_ranks(&raw mut (*header).identity);
        (*header).exit_time_ns = monotonic_ns();
        (*header).exit_status = status;
        AtomicU32::from_ptr(&raw mut (*header).exit_recorded).store(1, Ordering::Release);
    }
}

/// Called in a forked child. The inherited mappings point into the parent's
/// spool: drop them so that the child starts a spool of its own. Any lock a
/// parent thread held at the fork is released, since that thread is gone.
pub(crate) fn forget_parent_spool() {
    spool_chunks::forget_parent();
    let header = HEADER.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // The parent's header stays mapped until the child has a spool of its
    // own: it is where the child says so if it cannot create one.
    notice::forget_parent(header);
    spool_descriptor::forget_parent();
    UNSPOOLED_SEQ.store(0, Ordering::Relaxed);
    // A thread of the parent that was creating its spool is not here.
    OPENER.store(0, Ordering::Release);
    LOST_WHILE_OPENING.store(0, Ordering::Release);
    STATE.store(CLOSED, Ordering::Release);
}
