//! A spool file opened for reading through shared mappings, so that records
//! are read with the memory ordering they were written with: the commit word
//! with an acquire load, then the body. A `read` copy gives no such promise
//! about the order or the width of its loads.
//!
//! Only the part of the file that exists is ever mapped, chunk by chunk, so
//! a file that ends early never faults.

use crate::cursor::SlotSource;
use crate::layout::{RawRecord, CHUNK_BYTES, CHUNK_RECORDS, HEADER_SIZE, RECORD_SIZE};
use crate::spool::{SpoolError, SpoolHeaderInfo, SpoolReader};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
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
    fn words(&self, at: usize) -> [u64; 8] {
        debug_assert!(at + RECORD_SIZE <= self.length && at.is_multiple_of(8));
        let word = |i: usize| {
            // SAFETY: inside the mapping and 8-byte aligned (mappings are page
            // aligned, offsets multiples of 8); other processes write these
            // words only through atomic stores or plain aligned stores.
            unsafe { AtomicU64::from_ptr(self.base.add(at + i * 8).cast_mut().cast()) }
        };
        let mut words = [0u64; 8];
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

/// An open spool file.
pub struct SpoolFile {
    file: File,
    header: Mapping,
    chunks: BTreeMap<u64, Mapping>,
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
        let spool = SpoolFile {
            file,
            header,
            chunks: BTreeMap::new(),
        };
        SpoolReader::parse_header(&spool.header_bytes())?;
        Ok(spool)
    }

    fn header_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER_SIZE);
        for at in (0..HEADER_SIZE).step_by(RECORD_SIZE) {
            for word in self.header.words(at) {
                bytes.extend_from_slice(&word.to_le_bytes());
            }
        }
        bytes
    }

    /// The header as it is now: its counters and exit fields change while
    /// the process runs.
    pub fn header(&self) -> SpoolHeaderInfo {
        SpoolReader::parse_header(&self.header_bytes()).expect("the header was checked when the file was opened")
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

impl SlotSource for SpoolFile {
    fn slot_count(&mut self) -> Result<u64, SpoolError> {
        let length = self.file.metadata().map_err(SpoolError::Io)?.len();
        Ok(length.saturating_sub(HEADER_SIZE as u64) / RECORD_SIZE as u64)
    }

    fn slot(&mut self, index: u64) -> RawRecord {
        let chunk = index / CHUNK_RECORDS as u64;
        let within = (index % CHUNK_RECORDS as u64) as usize * RECORD_SIZE;
        let mapped = self
            .chunks
            .get(&chunk)
            .is_some_and(|m| m.length >= within + RECORD_SIZE);
        if !mapped {
            // Map as much of the chunk as the file holds now; the caller only
            // asks for slots below `slot_count`.
            let offset = HEADER_SIZE as u64 + chunk * CHUNK_BYTES as u64;
            let present = self.file.metadata().map_or(0, |m| m.len()).saturating_sub(offset);
            let length = (present.min(CHUNK_BYTES as u64) as usize).max(within + RECORD_SIZE);
            match Mapping::new(&self.file, offset, length) {
                Ok(mapping) => {
                    self.chunks.insert(chunk, mapping);
                }
                // Address space exhausted: the slot reads as not yet written.
                Err(_) => return RawRecord::default(),
            }
        }
        RawRecord::from_words(&self.chunks[&chunk].words(within))
    }
}
