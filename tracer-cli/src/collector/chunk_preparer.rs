//! Keeps the next chunk places of every live spool ready for its writer.
//!
//! A traced process grows its spool one chunk at a time, on the hook path:
//! it reserves the chunk's place on disk and faults its pages in
//! (`MADV_POPULATE_WRITE`). On ext4 a fresh place costs the hook about
//! 80 ns a record in all (the file system allocates, zeroes and maps every
//! page); a place whose pages another process has already made costs about
//! 22 ns, only the mapping (`docs/history/performance-2026-11.md`). So this thread, in the
//! collector, does the expensive part ahead of the writer: for each live
//! spool it reserves and populates the places of the next [`AHEAD`] chunks
//! past the one being written, in the page cache, where the writer's own
//! reservation and mapping then find them.
//!
//! It never changes what a spool holds: reserving (`fallocate`) and
//! populating write no data, and it only touches a place that holds no
//! unread records: a first-lap place past the file's written chunks, or a
//! place whose earlier chunk the collector has already punched out (the
//! header's `punched_chunks`). Whatever fails (a full disk, a size limit)
//! is left for the writer to meet as it would without this thread. It
//! never takes the last [`SPARE_BYTES`] of the disk: when space is short,
//! the writer's own next chunk comes first.
//!
//! Places made ready that the writer never used are given back when its
//! spool is read for the last time ([`Gate`]).

use crossbeam_channel::Receiver;
use cudatrace_events::layout::{chunk_offset, CHUNK_BYTES, CHUNK_RECORDS, PUNCHED_CHUNKS_OFFSET, RESERVED_SEQS_OFFSET};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Disk space the preparer leaves free (`tracer-cli/tests/reliability.rs`
/// repeats it, to know what the preparer may do on the test's disk).
pub const SPARE_BYTES: u64 = 256 << 20;

/// Shared by the preparer and the spool's reader: once closed (after the
/// spool's last read), no place is made ready again, so that the reader
/// may cut the file back to the chunks the writer used.
#[derive(Default)]
pub struct Gate {
    closed: Mutex<bool>,
}

impl Gate {
    /// Closes the gate, then runs `after_closing` with no preparation
    /// under way.
    pub fn close_and(&self, after_closing: impl FnOnce()) {
        let mut closed = self.closed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *closed = true;
        after_closing();
    }
}

/// Chunks made ready past the one being written: at two million records a
/// second (a tight allocation loop), 4 chunks last the writer 30 ms.
pub const AHEAD: u64 = 4;
/// How long the thread sleeps when no spool needed anything: at first
/// [`IDLE_PAUSE_FIRST`], doubling while nothing is needed up to
/// [`IDLE_PAUSE_MOST`]. Four chunks ahead last a writer of two million
/// records a second 30 ms, so a pause of 8 ms keeps it three chunks ahead;
/// an idle collector then wakes 125 times a second instead of 1,000.
const IDLE_PAUSE_FIRST: Duration = Duration::from_millis(1);
/// The longest pause between two looks at the spools.
const IDLE_PAUSE_MOST: Duration = Duration::from_millis(8);
/// How long the thread waits for a spool when it follows none, between two
/// looks at whether the collection is draining.
const NO_SPOOL_WAIT: Duration = Duration::from_millis(20);

/// One live spool, as the preparer follows it.
pub struct SpoolPlaces {
    gate: Arc<Gate>,
    file: File,
    ring_chunks: u32,
    /// The next chunk whose place is not yet made ready.
    next_chunk: u64,
}

impl SpoolPlaces {
    /// Follows the spool open as `file` (writable), whose ring has
    /// `ring_chunks` places, until its reader closes `gate` (after the
    /// spool's last read: its writer is gone, or the collection is over).
    pub fn new(gate: Arc<Gate>, file: File, ring_chunks: u32) -> SpoolPlaces {
        SpoolPlaces {
            gate,
            file,
            ring_chunks: ring_chunks.max(1),
            // Chunk 0 is the writer's from the spool's creation.
            next_chunk: 1,
        }
    }

    /// The header's (reserved sequence numbers, punched chunks).
    fn writer_position(&self) -> Option<(u64, u64)> {
        let mut reserved = [0u8; 8];
        let mut punched = [0u8; 4];
        self.file.read_exact_at(&mut reserved, RESERVED_SEQS_OFFSET).ok()?;
        self.file.read_exact_at(&mut punched, PUNCHED_CHUNKS_OFFSET).ok()?;
        Some((u64::from_le_bytes(reserved), u64::from(u32::from_le_bytes(punched))))
    }

    /// Makes ready the places up to [`AHEAD`] chunks past the writer's;
    /// `Some(true)` if it made any, `None` once the spool's gate is closed.
    pub fn prepare(&mut self) -> Option<bool> {
        let closed = self
            .gate
            .closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *closed {
            return None;
        }
        let Some((reserved, punched)) = self.writer_position() else {
            return Some(false);
        };
        let writing = reserved / CHUNK_RECORDS as u64;
        let ring = u64::from(self.ring_chunks);
        self.next_chunk = self.next_chunk.max(writing + 1);
        let mut made = false;
        while self.next_chunk <= writing + AHEAD {
            let chunk = self.next_chunk;
            // A later lap's place still holds records until punched out.
            if chunk >= ring && chunk >= punched + ring {
                break;
            }
            if !self.make_ready(chunk_offset(chunk, self.ring_chunks)) {
                break;
            }
            self.next_chunk += 1;
            made = true;
        }
        drop(closed);
        Some(made)
    }

    /// Reserves the place at `offset` and brings its pages into the page
    /// cache, writable; false if either could not be done.
    fn make_ready(&self, offset: u64) -> bool {
        let fd = self.file.as_raw_fd();
        if !room_for_a_chunk(fd) {
            return false;
        }
        // SAFETY: reserving blocks of a spool file of ours; no data changes.
        if unsafe { libc::fallocate(fd, 0, offset as libc::off_t, CHUNK_BYTES as libc::off_t) } != 0 {
            return false;
        }
        // SAFETY: a new shared mapping of a range just reserved, unmapped below.
        let mapping = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CHUNK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset as libc::off_t,
            )
        };
        if mapping == libc::MAP_FAILED {
            return false;
        }
        // SAFETY: advice on our own mapping, then unmapping it; neither
        // writes data. A kernel before 5.14 refuses the advice: the writer
        // then makes the pages itself, as without this thread.
        unsafe {
            libc::madvise(mapping, CHUNK_BYTES, libc::MADV_POPULATE_WRITE);
            libc::munmap(mapping, CHUNK_BYTES);
        }
        true
    }
}

/// Whether the disk holding `fd` keeps [`SPARE_BYTES`] free after one
/// more chunk.
fn room_for_a_chunk(fd: i32) -> bool {
    // SAFETY: statvfs is plain data; a valid out-pointer.
    let mut disk: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a query on our own descriptor.
    if unsafe { libc::fstatvfs(fd, &mut disk) } != 0 {
        return false;
    }
    let free = disk.f_bavail.saturating_mul(disk.f_frsize);
    free >= SPARE_BYTES + CHUNK_BYTES as u64
}

/// The preparer thread: takes new spools from `inbox` and keeps their next
/// places ready until their gates close or `draining` is set.
pub fn prepare_places(draining: &AtomicBool, inbox: &Receiver<SpoolPlaces>) {
    let mut spools: Vec<SpoolPlaces> = Vec::new();
    let mut pause = IDLE_PAUSE_FIRST;
    while !draining.load(Ordering::Acquire) {
        if spools.is_empty() {
            // Nothing to follow: wait for a spool rather than poll.
            match inbox.recv_timeout(NO_SPOOL_WAIT) {
                Ok(spool) => spools.push(spool),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
        }
        let followed = spools.len();
        spools.extend(inbox.try_iter());
        if spools.len() > followed {
            // A new spool's first places are wanted soon.
            pause = IDLE_PAUSE_FIRST;
        }
        let mut made = false;
        spools.retain_mut(|spool| match spool.prepare() {
            Some(made_some) => {
                made |= made_some;
                true
            }
            None => false,
        });
        if !made {
            std::thread::sleep(pause);
        }
        pause = next_pause(pause, made);
    }
}

/// The pause after a look at the spools that made places ready (`made`) or
/// none: back to the first when a writer moved on, else twice the last, at
/// most [`IDLE_PAUSE_MOST`].
fn next_pause(last: Duration, made: bool) -> Duration {
    if made {
        IDLE_PAUSE_FIRST
    } else {
        (last * 2).min(IDLE_PAUSE_MOST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudatrace_events::layout::HEADER_SIZE;

    #[test]
    fn an_idle_preparer_looks_less_and_less_often_and_at_once_again_after_a_writer_moved() {
        // The pauses slept after looks that found nothing to do.
        let mut pause = IDLE_PAUSE_FIRST;
        let mut slept = Vec::new();
        for _ in 0..5 {
            slept.push(pause.as_millis());
            pause = next_pause(pause, false);
        }
        assert_eq!(slept, [1, 2, 4, 8, 8]);
        assert_eq!(next_pause(pause, true), Duration::from_millis(1));
    }

    fn spool_with(reserved: u64, punched: u32, chunks_present: u64) -> File {
        let file = tempfile_in_tmp();
        let mut header = vec![0u8; HEADER_SIZE];
        header[RESERVED_SEQS_OFFSET as usize..][..8].copy_from_slice(&reserved.to_le_bytes());
        header[PUNCHED_CHUNKS_OFFSET as usize..][..4].copy_from_slice(&punched.to_le_bytes());
        file.write_all_at(&header, 0).unwrap();
        file.set_len(HEADER_SIZE as u64 + chunks_present * CHUNK_BYTES as u64)
            .unwrap();
        file
    }

    fn tempfile_in_tmp() -> File {
        let path = std::env::temp_dir().join(format!(
            "cudatrace-preparer-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file
    }

    fn places(file: &File, ring: u32) -> SpoolPlaces {
        SpoolPlaces {
            gate: Arc::default(),
            file: file.try_clone().unwrap(),
            ring_chunks: ring,
            next_chunk: 1,
        }
    }

    #[test]
    fn the_places_of_the_next_four_chunks_are_reserved_in_the_first_lap() {
        // The writer is in chunk 2 of a 64-place ring: chunks 3 to 6 are made ready.
        let file = spool_with(2 * CHUNK_RECORDS as u64 + 5, 0, 3);
        let mut spool = places(&file, 64);
        assert_eq!(spool.prepare(), Some(true));
        assert_eq!(spool.next_chunk, 7);
        assert_eq!(
            file.metadata().unwrap().len(),
            HEADER_SIZE as u64 + 7 * CHUNK_BYTES as u64
        );
        // Nothing more until the writer moves on.
        assert_eq!(spool.prepare(), Some(false));
        let header = {
            let mut bytes = [0u8; 8];
            file.read_exact_at(&mut bytes, RESERVED_SEQS_OFFSET).unwrap();
            u64::from_le_bytes(bytes)
        };
        assert_eq!(header, 2 * CHUNK_RECORDS as u64 + 5);
        // The places hold zeros: nothing was written.
        let mut slot = vec![0xaau8; 4096];
        file.read_exact_at(&mut slot, HEADER_SIZE as u64 + 6 * CHUNK_BYTES as u64)
            .unwrap();
        assert!(slot.iter().all(|&b| b == 0));
    }

    #[test]
    fn once_its_gate_is_closed_a_spool_gets_no_more_places() {
        let file = spool_with(2 * CHUNK_RECORDS as u64, 0, 3);
        let mut spool = places(&file, 64);
        let mut closed_with_size = None;
        spool
            .gate
            .clone()
            .close_and(|| closed_with_size = Some(file.metadata().unwrap().len()));
        assert_eq!(spool.prepare(), None);
        assert_eq!(closed_with_size, Some(HEADER_SIZE as u64 + 3 * CHUNK_BYTES as u64));
        assert_eq!(
            file.metadata().unwrap().len(),
            HEADER_SIZE as u64 + 3 * CHUNK_BYTES as u64
        );
    }

    #[test]
    fn closing_a_gate_waits_for_the_preparation_under_way() {
        let gate = Arc::new(Gate::default());
        let ran = AtomicBool::new(false);
        // A preparation holds the gate's lock while it works.
        let preparing = gate.closed.lock().unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| gate.close_and(|| ran.store(true, Ordering::Release)));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!ran.load(Ordering::Acquire), "closed during a preparation");
            drop(preparing);
        });
        assert!(ran.load(Ordering::Acquire));
        assert!(*gate.closed.lock().unwrap());
    }

    #[test]
    fn a_later_lap_s_place_waits_until_its_earlier_chunk_is_punched_out() {
        // A 4-place ring, the writer in chunk 5 (place 1), chunks 0 to 2 punched:
        // chunk 6 (place 2, chunk 2's) is ready, chunk 7 (place 3, chunk 3's) is not.
        let file = spool_with(5 * CHUNK_RECORDS as u64, 3, 4);
        let marker = [7u8; 72];
        file.write_all_at(&marker, HEADER_SIZE as u64 + 3 * CHUNK_BYTES as u64)
            .unwrap();
        let mut spool = places(&file, 4);
        assert_eq!(spool.prepare(), Some(true));
        assert_eq!(spool.next_chunk, 7);
        let mut read = [0u8; 72];
        file.read_exact_at(&mut read, HEADER_SIZE as u64 + 3 * CHUNK_BYTES as u64)
            .unwrap();
        assert_eq!(read, marker);
        assert_eq!(
            file.metadata().unwrap().len(),
            HEADER_SIZE as u64 + 4 * CHUNK_BYTES as u64
        );
        // Once chunk 3 is punched out, its place is made ready for chunk 7.
        file.write_all_at(&4u32.to_le_bytes(), PUNCHED_CHUNKS_OFFSET).unwrap();
        assert_eq!(spool.prepare(), Some(true));
        assert_eq!(spool.next_chunk, 8);
    }
}
