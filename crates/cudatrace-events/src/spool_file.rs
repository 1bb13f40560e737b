//! A spool file opened for reading through shared mappings, so that records
//! are read with the memory ordering they were written with: the commit word
//! with an acquire load, then the body. A `read` copy gives no such promise
//! about the order or the width of its loads.
//!
//! Only the part of the file that exists is ever mapped, chunk by chunk, so
//! a file that ends early never faults. A chunk with a hole (a range with no
//! disk blocks, which the writer never leaves below the end of the file, but
//! a crash or another program might) is read with `pread` instead: reading a
//! hole through a mapping of a full tmpfs raises `SIGBUS`. Records read that
//! way are still checked by their commit word.

use crate::cursor::SlotSource;
use crate::layout::{chunk_offset, RawRecord, CHUNK_BYTES, CHUNK_RECORDS, HEADER_SIZE, RECORD_SIZE};
use crate::slots::{parse_header, SpoolError, SpoolHeaderInfo};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// A read-only shared mapping.
struct Mapping {
    base: *const u8,
    length: usize,
}

impl Mapping {
    fn new(file: &File, offset: u64, length: usize) -> Result<Mapping, SpoolError> {
        // SAFETY: a read-only shared mapping of a range of an open file.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                length,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(SpoolError::Io(std::io::Error::last_os_error()));
        }
        Ok(Mapping {
            base: base.cast(),
            length,
        })
    }

    /// The eight words at byte `at`, the first with acquire ordering.
    fn words(&self, at: usize) -> [u64; RECORD_SIZE / 8] {
        debug_assert!(at + RECORD_SIZE <= self.length && at.is_multiple_of(8));
        let word = |i: usize| {
            // SAFETY: inside the mapping and 8-byte aligned (mappings are page
            // aligned, offsets multiples of 8); other processes write these
            // words only through atomic stores or plain aligned stores.
            unsafe { AtomicU64::from_ptr(self.base.add(at + i * 8).cast_mut().cast()) }
        };
        let mut words = [0u64; RECORD_SIZE / 8];
        words[0] = word(0).load(Ordering::Acquire);
        for (i, out) in words.iter_mut().enumerate().skip(1) {
            *out = word(i).load(Ordering::Relaxed);
        }
        words
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping, which nothing borrows.
        unsafe { libc::munmap(self.base.cast_mut().cast(), self.length) };
    }
}

// SAFETY: the mapping is read-only from our side and reads are atomic loads.
unsafe impl Send for Mapping {}

/// How the slots of one chunk are read.
enum ChunkView {
    Mapped(Mapping),
    /// The chunk has a hole: read with `pread`, up to this many bytes.
    Copied(usize),
}

impl ChunkView {
    fn covers(&self, end: usize) -> bool {
        match self {
            ChunkView::Mapped(mapping) => mapping.length >= end,
            ChunkView::Copied(length) => *length >= end,
        }
    }
}

/// An open spool file.
pub struct SpoolFile {
    file: File,
    header: Mapping,
    chunks: BTreeMap<u64, ChunkView>,
    /// Chunk places in the file, from the header.
    ring_chunks: u32,
}

impl SpoolFile {
    /// Opens the spool at `path` (for writing too with `writable`, to give
    /// collected chunks back). Checks that it is a regular file with a complete,
    /// known header before mapping anything.
    pub fn open(path: &Path, writable: bool) -> Result<SpoolFile, SpoolError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(SpoolError::Io)?;
        let metadata = file.metadata().map_err(SpoolError::Io)?;
        if !metadata.is_file() {
            return Err(SpoolError::NotAFile);
        }
        if metadata.len() < HEADER_SIZE as u64 {
            return Err(SpoolError::Truncated { len: metadata.len() });
        }
        let header = Mapping::new(&file, 0, HEADER_SIZE)?;
        let mut spool = SpoolFile {
            file,
            header,
            chunks: BTreeMap::new(),
            ring_chunks: 1,
        };
        spool.ring_chunks = parse_header(&spool.header_bytes())?.ring_chunks;
        Ok(spool)
    }

    /// The header's bytes: the magic first (the writer stores it last), then
    /// the other words from the last to the first, each with acquire
    /// ordering, so that a flag is read before the fields it guards (which
    /// lie before it).
    fn header_bytes(&self) -> Vec<u8> {
        let word = |i: usize| {
            // SAFETY: inside the header mapping, 8-byte aligned.
            unsafe { AtomicU64::from_ptr(self.header.base.add(i * 8).cast_mut().cast()) }.load(Ordering::Acquire)
        };
        let mut words = vec![0u64; HEADER_SIZE / 8];
        words[0] = word(0);
        for i in (1..words.len()).rev() {
            words[i] = word(i);
        }
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// The header as it is now: its counters and exit fields change while
    /// the process runs.
    pub fn header(&self) -> SpoolHeaderInfo {
        parse_header(&self.header_bytes()).expect("the header was checked when the file was opened")
    }

    /// The open file, for giving space back once records are collected.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Unmaps chunks wholly below slot `index`, which will not be read again.
    pub fn forget_before(&mut self, index: u64) {
        let first_kept = index / CHUNK_RECORDS as u64;
        self.chunks.retain(|&chunk, _| chunk >= first_kept);
    }
}

/// Whether bytes `offset..offset + length` of `file` include a hole.
fn has_hole(file: &File, offset: u64, length: usize) -> bool {
    // SAFETY: a query on our own descriptor; it moves the file offset, which
    // nothing here uses (reads give their offset).
    let hole = unsafe { libc::lseek(file.as_raw_fd(), offset as libc::off_t, libc::SEEK_HOLE) };
    hole >= 0 && (hole as u64) < offset + length as u64
}

impl SlotSource for SpoolFile {
    fn slot_count(&mut self) -> Result<u64, SpoolError> {
        let length = self.file.metadata().map_err(SpoolError::Io)?.len();
        let linear = length.saturating_sub(HEADER_SIZE as u64) / RECORD_SIZE as u64;
        // Once every place of the ring exists, the slots that may be read
        // are those of the chunks whose place is theirs: up to `ring` past
        // the chunks whose places were emptied. Further places still hold
        // an earlier lap's records, which must be neither read as damage
        // nor mapped (the collector will punch them).
        let ring_bytes = u64::from(self.ring_chunks) * CHUNK_BYTES as u64;
        if length >= HEADER_SIZE as u64 + ring_bytes {
            let header = self.header();
            let placed = (u64::from(header.punched_chunks) + u64::from(self.ring_chunks)) * CHUNK_RECORDS as u64;
            Ok(linear.max(header.reserved_seqs.min(placed)))
        } else {
            Ok(linear)
        }
    }

    fn slot(&mut self, index: u64) -> RawRecord {
        let chunk = index / CHUNK_RECORDS as u64;
        let within = (index % CHUNK_RECORDS as u64) as usize * RECORD_SIZE;
        let offset = chunk_offset(chunk, self.ring_chunks);
        if !self
            .chunks
            .get(&chunk)
            .is_some_and(|view| view.covers(within + RECORD_SIZE))
        {
            // As much of the chunk as the file holds now; the caller only
            // asks for slots below `slot_count`.
            let present = self.file.metadata().map_or(0, |m| m.len()).saturating_sub(offset);
            let length = (present.min(CHUNK_BYTES as u64) as usize).max(within + RECORD_SIZE);
            let view = if has_hole(&self.file, offset, length) {
                ChunkView::Copied(length)
            } else {
                match Mapping::new(&self.file, offset, length) {
                    Ok(mapping) => ChunkView::Mapped(mapping),
                    Err(_) => ChunkView::Copied(length),
                }
            };
            self.chunks.insert(chunk, view);
        }
        match &self.chunks[&chunk] {
            ChunkView::Mapped(mapping) => RawRecord::from_words(&mapping.words(within)),
            ChunkView::Copied(_) => {
                let mut bytes = [0u8; RECORD_SIZE];
                match self.file.read_exact_at(&mut bytes, offset + within as u64) {
                    Ok(()) => RawRecord::from_bytes(&bytes),
                    Err(_) => RawRecord::default(),
                }
            }
        }
    }
}
