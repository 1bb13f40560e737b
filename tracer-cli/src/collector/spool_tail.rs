//! Follows one spool file while its process writes it.

use super::liveness::Liveness;
use cudatrace_events::layout::{CHUNK_RECORDS, HEADER_SIZE, RECORD_SIZE, RELEASED_CHUNKS_OFFSET};
use cudatrace_events::{Event, RawRecord, SpoolHeaderInfo, SpoolReader};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Records read per call, so that one busy process cannot hog a reader.
const BATCH_RECORDS: usize = 16384;

/// Chunks of a spool whose records are all read. Every slot in them is
/// complete, so their writer never touches them again.
pub struct Release {
    file: File,
    from_chunk: u64,
    to_chunk: u64,
}

impl Release {
    /// Punches the chunks out of the file (it keeps its size; the range reads
    /// as zeros) and notes in the header how far that went. A file system
    /// without hole punching keeps the space until the run ends.
    pub fn apply(self) {
        let chunk_bytes = (CHUNK_RECORDS * RECORD_SIZE) as u64;
        let start = HEADER_SIZE as u64 + self.from_chunk * chunk_bytes;
        let length = (self.to_chunk - self.from_chunk) * chunk_bytes;
        // SAFETY: punching a hole in a range of our own descriptor's file.
        let punched = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                start as libc::off_t,
                length as libc::off_t,
            )
        };
        if punched == 0 {
            let chunks = u32::try_from(self.to_chunk).unwrap_or(u32::MAX);
            let _ = self.file.write_all_at(&chunks.to_le_bytes(), RELEASED_CHUNKS_OFFSET);
        }
    }
}

/// Reading position in one spool.
pub struct SpoolTail {
    /// The spool file.
    pub path: PathBuf,
    /// Index of this process image in the trace.
    pub process: u32,
    /// Its pid.
    pub pid: u32,
    /// Which image of the pid (0, then 1 after an exec, ...).
    pub image: u32,
    /// Whether the process is alive.
    pub liveness: Liveness,
    file: File,
    next_index: u64,
    released_chunks: u64,
    empty_run: u64,
    /// Slots reserved by hooks that never completed.
    pub unfinished: u64,
    buffer: Vec<u8>,
}

impl SpoolTail {
    /// Opens a spool whose header is complete; `None` if it is not yet.
    pub fn open(
        path: &Path,
        file: File,
        process: u32,
        image: u32,
    ) -> Result<Option<(SpoolTail, SpoolHeaderInfo)>, String> {
        let mut header = vec![0u8; HEADER_SIZE];
        let got = file.read_at(&mut header, 0).map_err(|e| e.to_string())?;
        if got < HEADER_SIZE || header[..8] == [0u8; 8] {
            return Ok(None);
        }
        let info = SpoolReader::parse_header(&header).map_err(|e| e.to_string())?;
        if info.process.pid == 0 {
            return Ok(None); // header still being filled in
        }
        let tail = SpoolTail {
            path: path.to_owned(),
            process,
            pid: info.process.pid,
            image,
            liveness: Liveness::watch(info.process.pid),
            file,
            next_index: info.released_records,
            released_chunks: info.released_records / CHUNK_RECORDS as u64,
            empty_run: 0,
            unfinished: 0,
            buffer: vec![0u8; BATCH_RECORDS * RECORD_SIZE],
        };
        Ok(Some((tail, info)))
    }

    /// The header as it is now (its counters and exit fields change).
    pub fn header(&self) -> Result<SpoolHeaderInfo, String> {
        let mut header = vec![0u8; HEADER_SIZE];
        self.file.read_exact_at(&mut header, 0).map_err(|e| e.to_string())?;
        SpoolReader::parse_header(&header).map_err(|e| e.to_string())
    }

    /// Reads up to one batch of records after the last one read. While the
    /// process runs, reading stops at the first slot not yet completed, to
    /// keep sequence order. In the `final_pass`, empty slots are skipped:
    /// those followed by completed ones count as unfinished. Returns the
    /// events and whether the end of the file was reached.
    pub fn read_batch(&mut self, final_pass: bool) -> Result<(Vec<Event>, bool), String> {
        let length = self.file.metadata().map_err(|e| e.to_string())?.len() as usize;
        let slots = length.saturating_sub(HEADER_SIZE) / RECORD_SIZE;
        let first = self.next_index as usize;
        let count = slots.saturating_sub(first).min(BATCH_RECORDS);
        let bytes = &mut self.buffer[..count * RECORD_SIZE];
        self.file
            .read_exact_at(bytes, (HEADER_SIZE + first * RECORD_SIZE) as u64)
            .map_err(|e| e.to_string())?;
        let mut events = Vec::new();
        for (i, chunk) in bytes.chunks_exact(RECORD_SIZE).enumerate() {
            let raw = RawRecord::from_bytes(chunk.try_into().expect("whole records"));
            let index = (first + i) as u64;
            if raw.seq_plus_one == 0 {
                if !final_pass {
                    return Ok((events, false));
                }
                self.empty_run += 1;
                self.next_index = index + 1;
                continue;
            }
            self.unfinished += std::mem::take(&mut self.empty_run);
            let offset = HEADER_SIZE + index as usize * RECORD_SIZE;
            let event = SpoolReader::decode_record(&raw, index, self.pid, offset)
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            events.extend(event);
            self.next_index = index + 1;
        }
        Ok((events, first + count >= slots))
    }

    /// The chunks read to the end since the last call, to be given back to
    /// the file system once their events are safely in the trace.
    pub fn chunks_to_release(&mut self) -> Option<Release> {
        let whole = self.next_index / CHUNK_RECORDS as u64;
        if whole <= self.released_chunks {
            return None;
        }
        let file = self.file.try_clone().ok()?;
        let release = Release {
            file,
            from_chunk: self.released_chunks,
            to_chunk: whole,
        };
        self.released_chunks = whole;
        Some(release)
    }
}
