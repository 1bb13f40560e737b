//! The record area of this process's spool: chunks of `CHUNK_RECORDS`
//! slots, reserved on disk and mapped as the sequence numbers reach them.
//!
//! - Chunks are reserved with `fallocate` (writing zeros where the file
//!   system cannot), after checking `RLIMIT_FSIZE`, so that no store ever
//!   touches a page without disk behind it (`SIGBUS`) and the file never
//!   grows past the size limit (`SIGXFSZ`).
//! - The file is a ring of chunk places (`cudatrace_events::layout`): as
//!   many as `ulimit -f` allows, a power of two. A place is reserved again
//!   for a later chunk only once the collector has emptied it, so the file's
//!   size stays bounded, however long the process runs.
//! - They are reserved and mapped strictly in order, so the file has no
//!   unreserved hole below its end: a reader mapping it never faults either.
//! - They are mapped at consecutive addresses inside a reserved segment of
//!   address space, so the kernel merges them into one mapping: a long run
//!   costs the program a few entries of its limited mapping count, not one
//!   per chunk.
//! - A record that cannot be stored (its chunk cannot be reserved or mapped)
//!   is remembered in a bitmap. When its chunk does get mapped, a tombstone
//!   is stored in its slot, so that readers can tell "dropped" from "still
//!   being written" and move on.

use crate::spool::spool_descriptor;
use crate::system::address_budget;
use crate::system::clock::monotonic_ns;
use crate::system::file_space;
use crate::system::lazy_mapping::LazyMapping;
use crate::system::prefetch::prefetch_line;
use crate::system::thread::{current_tid, last_errno};
use cudatrace_events::layout::{
    chunk_offset, commit_word, CHUNK_BYTES, CHUNK_RECORDS, DROPPED_OP, HEADER_SIZE, MAX_RING_CHUNKS,
};
use cudatrace_events::RawRecord;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Chunks mapped at one time (their places in memory and in the table of
/// mappings are reused, chunk `k` taking `k % MAX_CHUNKS`'s): a multiple of
/// every ring, so that chunks sharing a place in memory share one in the file.
pub(crate) const MAX_CHUNKS: usize = 1 << 18;
const _: () = assert!(MAX_CHUNKS.is_multiple_of(MAX_RING_CHUNKS as usize));
/// Chunk places of the first reserved segment of address space (18 MiB).
/// Address space is reserved as the ring's places come into use, a segment
/// at a time, each after the first as large as all before it together: in
/// proportion to use (at most twice it), in a few mappings (one a segment,
/// 11 for the largest ring).
const SEGMENT_CHUNKS: usize = 16;
const SEGMENTS: usize = 1 + (MAX_RING_CHUNKS as usize / SEGMENT_CHUNKS).trailing_zeros() as usize;
/// Chunk places under an address-space limit (see `address_budget`): the
/// collector must keep up within 9 MiB, or records are dropped, counted.
const LEAN_RING_CHUNKS: u32 = 8;
/// After a chunk could not be reserved, records are dropped without trying
/// again for this long.
const RETRY_PAUSE_NS: u64 = 50_000_000;
/// One bit per sequence number of `MAX_CHUNKS` chunks (32 MiB, mapped on
/// the first drop; none under an address-space limit, see
/// `dropped_bitmap`).
const DROPPED_BITMAP_BYTES: usize = MAX_CHUNKS * CHUNK_RECORDS / 8;
const WORDS_PER_CHUNK: usize = CHUNK_RECORDS / 64;

static CHUNKS: [AtomicPtr<RawRecord>; MAX_CHUNKS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CHUNKS];
static SEGMENT_BASES: [AtomicPtr<u8>; SEGMENTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SEGMENTS];
/// Chunks `0..MAPPED` are reserved and mapped. Raised before a chunk's
/// pointer is published, so that a forked child unmaps every chunk it can see.
#[unsafe(link_section = "cudatrace_hot")]
static MAPPED: AtomicUsize = AtomicUsize::new(0);
/// Guards growing; held only around reserving and mapping chunks.
/// The kernel thread id of the thread growing the spool, or 0: a lock that
/// knows its holder, so that a hook in a signal handler which interrupted
/// the holder is refused instead of waiting for itself.
static GROW_HOLDER: AtomicU32 = AtomicU32::new(0);
/// `CLOCK_MONOTONIC` before which growth is not tried again.
static RETRY_AFTER_NS: AtomicU64 = AtomicU64::new(0);
/// The `errno` of the last failed growth, for the records dropped meanwhile.
static LAST_GROW_ERRNO: AtomicI32 = AtomicI32::new(libc::EIO);
/// Sequence numbers whose record was dropped and has no tombstone yet.
static DROPPED: LazyMapping<AtomicU64> = LazyMapping::new(DROPPED_BITMAP_BYTES / 8);
/// Chunk places of this spool's ring; 0 until the spool is created.
static RING: AtomicU32 = AtomicU32::new(0);
/// Why a chunk waits for its place: `EFBIG` when `ulimit -f` made the ring
/// small, else `ENOBUFS` (the collector is that far behind).
static RING_FULL_ERRNO: AtomicI32 = AtomicI32::new(libc::ENOBUFS);
/// The header's count of chunks whose place the collector has emptied.
static PUNCHED: AtomicPtr<AtomicU32> = AtomicPtr::new(std::ptr::null_mut());

/// The chunk places a new spool gets: as many whole chunks as fit under
/// `RLIMIT_FSIZE` after the header, rounded down to a power of two, at most
/// `MAX_RING_CHUNKS` (and at least one). Kept for the spool's life.
pub(crate) fn ring_chunks() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    let limited =
        unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } == 0 && limit.rlim_cur != libc::RLIM_INFINITY;
    let most = if address_budget::lean() {
        LEAN_RING_CHUNKS
    } else {
        MAX_RING_CHUNKS
    };
    let places = if limited {
        (limit.rlim_cur.saturating_sub(HEADER_SIZE as u64) / CHUNK_BYTES as u64).min(u64::from(most)) as u32
    } else {
        most
    };
    let ring = if places == 0 {
        1
    } else {
        1 << (31 - places.leading_zeros())
    };
    let limited_by_size = limited && ring < MAX_RING_CHUNKS;
    RING_FULL_ERRNO.store(
        if limited_by_size { libc::EFBIG } else { libc::ENOBUFS },
        Ordering::Relaxed,
    );
    RING.store(ring, Ordering::Release);
    ring
}

/// Watches the header's count of emptied places (the collector writes it).
pub(crate) fn watch_punched(counter: &'static AtomicU32) {
    PUNCHED.store(std::ptr::from_ref(counter).cast_mut(), Ordering::Release);
}

/// The slot of sequence number `seq`, mapping chunks up to it if needed;
/// the `errno` that prevented it otherwise.
#[inline]
pub(crate) fn slot(seq: u64) -> Result<*mut RawRecord, i32> {
    let chunk = (seq / CHUNK_RECORDS as u64) as usize;
    let within = (seq % CHUNK_RECORDS as u64) as usize;
    // The table's entry may still be an earlier chunk's: its place in the
    // file is this chunk's too, but not reserved for it until it is mapped.
    let mut base = CHUNKS[chunk % MAX_CHUNKS].load(Ordering::Acquire);
    if base.is_null() || chunk >= MAPPED.load(Ordering::Acquire) {
        base = grow(chunk)?;
    }
    // SAFETY: `within` < CHUNK_RECORDS, the number of records in the mapping.
    Ok(unsafe { base.add(within) })
}

/// Asks for the lines [`slot`] reads to find the slot of `seq`.
#[inline(always)]
pub(crate) fn prefetch_slot_lookup(seq: u64) {
    let chunk = (seq / CHUNK_RECORDS as u64) as usize;
    prefetch_line(&raw const CHUNKS[chunk % MAX_CHUNKS]);
    prefetch_line(&raw const MAPPED);
}

fn paused() -> Option<i32> {
    let now = monotonic_ns();
    (now < RETRY_AFTER_NS.load(Ordering::Acquire)).then(|| LAST_GROW_ERRNO.load(Ordering::Relaxed))
}

#[cold]
fn grow(target: usize) -> Result<*mut RawRecord, i32> {
    if let Some(errno) = paused() {
        return Err(errno);
    }
    lock_growth()?;
    let result = grown_under_lock(target);
    GROW_HOLDER.store(0, Ordering::Release);
    result
}

/// Takes the grower's lock, waiting for another thread that holds it;
/// `EAGAIN` where the holder is this very thread (a hook running in a
/// signal handler that interrupted it while it grew the spool, a `fork`
/// from such a handler for one), whose wait would never end.
fn lock_growth() -> Result<(), i32> {
    lock_held_by(&GROW_HOLDER, current_tid())
}

/// Takes the lock `holder` for thread `me`, as [`lock_growth`] says.
fn lock_held_by(holder: &AtomicU32, me: u32) -> Result<(), i32> {
    loop {
        match holder.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Ok(()),
            Err(holder) if holder == me => return Err(libc::EAGAIN),
            Err(_) => std::thread::yield_now(),
        }
    }
}

/// Grows up to chunk `target`, with the grower's lock held; a failure pauses
/// growing for a while.
fn grown_under_lock(target: usize) -> Result<*mut RawRecord, i32> {
    // Whoever held the lock may have just failed: do not try again at once.
    let result = match paused() {
        Some(errno) => Err(errno),
        None => grow_locked(target),
    };
    if let Err(errno) = result {
        LAST_GROW_ERRNO.store(errno, Ordering::Relaxed);
        RETRY_AFTER_NS.store(monotonic_ns() + RETRY_PAUSE_NS, Ordering::Release);
    }
    result
}

fn grow_locked(target: usize) -> Result<*mut RawRecord, i32> {
    let mut next = MAPPED.load(Ordering::Relaxed);
    if next > target {
        return Ok(CHUNKS[target % MAX_CHUNKS].load(Ordering::Acquire));
    }
    // Never through a descriptor the program has taken over.
    let fd = spool_descriptor::checked()?;
    let ring = RING.load(Ordering::Acquire).max(1);
    while next <= target {
        if next >= ring as usize {
            // The place is the chunk's `ring` before: wait for the collector
            // to have emptied it.
            let punched = PUNCHED.load(Ordering::Acquire);
            let emptied = if punched.is_null() {
                0
            } else {
                // SAFETY: the header's counter, mapped while the process runs.
                unsafe { &*punched }.load(Ordering::Acquire)
            };
            if (emptied as usize) + (ring as usize) <= next {
                return Err(RING_FULL_ERRNO.load(Ordering::Relaxed));
            }
        }
        let offset = chunk_offset(next as u64, ring);
        reserve(fd, offset, CHUNK_BYTES as u64)?;
        // At its place's address: a later lap maps over an earlier one, so
        // mappings never pile up however long the process runs.
        let base = map(fd, next % ring as usize, offset as usize, next > 0)?;
        MAPPED.store(next + 1, Ordering::Release);
        CHUNKS[next % MAX_CHUNKS].store(base, Ordering::Release);
        tombstone_chunk(next);
        next += 1;
    }
    Ok(CHUNKS[target % MAX_CHUNKS].load(Ordering::Acquire))
}

/// The segment holding place `place`, and its first place.
fn segment_of(place: usize) -> (usize, usize) {
    if place < SEGMENT_CHUNKS {
        return (0, 0);
    }
    let segment = (place / SEGMENT_CHUNKS).ilog2() as usize + 1;
    (segment, SEGMENT_CHUNKS << (segment - 1))
}

/// Bytes of address space segment `segment` reserves: its places of a
/// ring of `ring` places.
fn segment_bytes(segment: usize, ring: usize) -> usize {
    let (first, places) = match segment {
        0 => (0, SEGMENT_CHUNKS),
        _ => (SEGMENT_CHUNKS << (segment - 1), SEGMENT_CHUNKS << (segment - 1)),
    };
    places.min(ring.saturating_sub(first)).max(1) * CHUNK_BYTES
}

/// Where the chunk of place `place` goes: its place in its segment of
/// address space, reserved on first use, or `None` if address space cannot
/// be reserved.
fn segment_address(place: usize) -> Option<*mut u8> {
    let ring = RING.load(Ordering::Acquire).max(1) as usize;
    let place = place % ring;
    let (segment, first) = segment_of(place);
    let mut base = SEGMENT_BASES[segment].load(Ordering::Acquire);
    if base.is_null() {
        // SAFETY: reserving address space only: no access, no memory committed.
        let reserved = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                segment_bytes(segment, ring),
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if reserved == libc::MAP_FAILED {
            return None;
        }
        base = reserved.cast();
        SEGMENT_BASES[segment].store(base, Ordering::Release);
    }
    // SAFETY: inside the segment, which holds the ring's places from
    // `first` on, this one among them.
    Some(unsafe { base.add((place - first) * CHUNK_BYTES) })
}

fn map(fd: i32, place: usize, offset: usize, populate: bool) -> Result<*mut RawRecord, i32> {
    let (address, fixed) = match segment_address(place) {
        Some(address) => (address.cast(), libc::MAP_FIXED),
        None => (std::ptr::null_mut(), 0),
    };
    // SAFETY: a shared mapping of a range whose blocks are reserved, either
    // over our own reservation of address space or where the kernel chooses.
    let base = unsafe {
        libc::mmap(
            address,
            CHUNK_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | fixed,
            fd,
            offset as libc::off_t,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(last_errno());
    }
    // From the second chunk on (a process that has made 16,384 records will
    // make more), fault every page in, writable, now, in one call: one page
    // fault per 56 records, each reading and zeroing its page and marking it
    // dirty, cost the hooks more than the records themselves. The first
    // chunk faults in page by page, so that a process with few events does
    // not hold a megabyte for them. A kernel without MADV_POPULATE_WRITE
    // (before 5.14) says EINVAL, and the pages fault in one by one.
    if populate {
        // SAFETY: advice on our own mapping, whose blocks are reserved on disk.
        unsafe { libc::madvise(base, CHUNK_BYTES, libc::MADV_POPULATE_WRITE) };
    }
    Ok(base.cast())
}

/// Makes sure bytes `offset..offset + length` of the file have disk blocks,
/// growing the file if needed, without ever raising `SIGXFSZ`.
pub(crate) fn reserve(fd: i32, offset: u64, length: u64) -> Result<(), i32> {
    file_space::reserve(fd, offset, length)
}

/// The bitmap of dropped sequence numbers, made on the first drop. None
/// under an address-space limit: a bitmap that small would have sequence
/// numbers share bits, and a tombstone could land on a record still being
/// written; a drop is then a gap with no tombstone (counted as lost all
/// the same, as unfinished rather than dropped).
fn dropped_bitmap() -> Option<&'static [AtomicU64]> {
    if address_budget::lean() {
        return None;
    }
    DROPPED.get()
}

fn bitmap_word(bitmap: &'static [AtomicU64], seq: u64) -> &'static AtomicU64 {
    let bits = bitmap.len() as u64 * 64;
    &bitmap[((seq % bits) / 64) as usize]
}

/// Remembers that `seq`'s record was dropped, for a tombstone once its
/// chunk is mapped (now, if it has been meanwhile).
pub(crate) fn note_dropped_seq(seq: u64) {
    let Some(bitmap) = dropped_bitmap() else { return };
    bitmap_word(bitmap, seq).fetch_or(1 << (seq % 64), Ordering::SeqCst);
    let chunk = (seq / CHUNK_RECORDS as u64) as usize;
    if chunk < MAPPED.load(Ordering::SeqCst) && !CHUNKS[chunk % MAX_CHUNKS].load(Ordering::SeqCst).is_null() {
        // The grower may have looked at the bitmap before the bit was set.
        let taken = bitmap_word(bitmap, seq).fetch_and(!(1 << (seq % 64)), Ordering::SeqCst);
        if taken & (1 << (seq % 64)) != 0 {
            store_tombstone(seq);
        }
    }
}

/// Stores tombstones for the dropped records of a chunk just mapped.
fn tombstone_chunk(chunk: usize) {
    let Some(bitmap) = DROPPED.get_if_mapped().filter(|words| !words.is_empty()) else {
        return;
    };
    let first = (chunk * CHUNK_RECORDS) as u64;
    for w in 0..WORDS_PER_CHUNK as u64 {
        let word = bitmap_word(bitmap, first + w * 64);
        if word.load(Ordering::SeqCst) == 0 {
            continue;
        }
        let mut taken = word.swap(0, Ordering::SeqCst);
        while taken != 0 {
            let bit = u64::from(taken.trailing_zeros());
            store_tombstone(first + w * 64 + bit);
            taken &= taken - 1;
        }
    }
}

/// Stores the tombstone of dropped `seq` in its (mapped) slot.
fn store_tombstone(seq: u64) {
    let chunk = (seq / CHUNK_RECORDS as u64) as usize;
    let base = CHUNKS[chunk % MAX_CHUNKS].load(Ordering::Acquire);
    if base.is_null() {
        return;
    }
    let tombstone = RawRecord {
        op: DROPPED_OP,
        ..Default::default()
    };
    let body = tombstone.body_words();
    // SAFETY: the slot of a dropped sequence number is written by nobody
    // else: its owner gave up on it, and the bit was taken exactly once.
    unsafe {
        let words = base.add((seq % CHUNK_RECORDS as u64) as usize).cast::<u64>();
        for (i, word) in body.iter().enumerate() {
            words.add(i + 1).write_volatile(*word);
        }
        AtomicU64::from_ptr(words).store(commit_word(seq, &body), Ordering::Release);
    }
}

/// Called in a forked child: drops every mapping of the parent's spool and
/// the parent's record of drops, and any lock a parent thread held.
pub(crate) fn forget_parent() {
    let mapped = MAPPED.swap(0, Ordering::Relaxed).min(MAX_CHUNKS);
    let ring = RING.load(Ordering::Acquire).max(1) as usize;
    for (chunk, slot) in CHUNKS[..mapped].iter().enumerate() {
        let base = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let (segment, _) = segment_of(chunk % ring);
        let in_segment = !SEGMENT_BASES[segment].load(Ordering::Relaxed).is_null();
        if !base.is_null() && !in_segment {
            // SAFETY: the child's inherited view of the parent's chunk, no longer used.
            unsafe { libc::munmap(base.cast(), CHUNK_BYTES) };
        }
    }
    for (segment, base) in SEGMENT_BASES.iter().enumerate() {
        let base = base.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !base.is_null() {
            // SAFETY: the parent's chunks and reserved address space, as inherited.
            unsafe { libc::munmap(base.cast(), segment_bytes(segment, ring)) };
        }
    }
    DROPPED.forget();
    RING.store(0, Ordering::Release);
    PUNCHED.store(std::ptr::null_mut(), Ordering::Release);
    RETRY_AFTER_NS.store(0, Ordering::Relaxed);
    GROW_HOLDER.store(0, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_double_and_hold_every_place_of_the_largest_ring() {
        assert_eq!(SEGMENTS, 11);
        assert_eq!(segment_of(0), (0, 0));
        assert_eq!(segment_of(15), (0, 0));
        assert_eq!(segment_of(16), (1, 16));
        assert_eq!(segment_of(31), (1, 16));
        assert_eq!(segment_of(32), (2, 32));
        assert_eq!(segment_of(16383), (10, 8192));
        let ring = MAX_RING_CHUNKS as usize;
        let total: usize = (0..SEGMENTS).map(|segment| segment_bytes(segment, ring)).sum();
        assert_eq!(total, ring * CHUNK_BYTES);
        // A ring of 8 places (under an address-space limit) reserves 8.
        assert_eq!(segment_bytes(0, 8), 8 * CHUNK_BYTES);
    }
    use std::sync::atomic::AtomicBool;

    #[test]
    fn the_growers_lock_refuses_its_own_holder_and_makes_others_wait() {
        let holder = AtomicU32::new(0);
        assert_eq!(lock_held_by(&holder, 7), Ok(()));
        assert_eq!(holder.load(Ordering::Relaxed), 7);
        // The holder again: a signal handler on the growing thread.
        assert_eq!(lock_held_by(&holder, 7), Err(libc::EAGAIN));
        // Another thread waits until the holder lets go.
        let taken = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                assert_eq!(lock_held_by(&holder, 8), Ok(()));
                taken.store(true, Ordering::Release);
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!taken.load(Ordering::Acquire), "took a lock that was held");
            holder.store(0, Ordering::Release);
        });
        assert!(taken.load(Ordering::Acquire));
        assert_eq!(holder.load(Ordering::Relaxed), 8);
    }
}
