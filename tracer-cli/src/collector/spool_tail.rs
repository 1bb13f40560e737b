//! Following one spool file: reading its records in sequence order while
//! its process runs, and once it is gone; and what the trace says about the
//! process at its start and end. Shared by the live collector and `collect`.

use crate::collector::liveness::Liveness;
use crate::wording::collector_lines;
use crate::wording::spool_error_text;
use crate::wording::spool_faults::no_spool_text;
use crate::wording::stderr;
use cudatrace_events::layout::{
    chunk_offset, CHUNK_BYTES, CHUNK_RECORDS, HEADER_SIZE, PUNCHED_CHUNKS_OFFSET, RELEASED_CHUNKS_OFFSET,
};
use cudatrace_events::notices::NoSpool;
use cudatrace_events::{ChildFailure, Event, Pass, SpoolCursor, SpoolError, SpoolFile, SpoolHeaderInfo};
use cudatrace_trace::{DamagedSpool, ProcessEnd, ProcessStart, Refusal, UnrecordedProcess};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Slots read per call, so that one busy process cannot hog a reader.
const BATCH_SLOTS: usize = 16384;

/// Chunks of a spool whose records are all read. Every slot in them is
/// settled, so their writer never touches them again.
pub struct Release {
    file: File,
    from_chunk: u64,
    to_chunk: u64,
    ring_chunks: u32,
}

impl Release {
    /// Notes in the header that the chunks are collected, then punches
    /// their places out of the file (it keeps its size; the range reads as
    /// zeros), then notes that their places are empty, for the writer to
    /// use again. In that order, so that a reader never takes a punched
    /// chunk for records, and the writer never reserves a place that is
    /// about to be punched. Only to be applied once the trace holding their
    /// events is durable. A file system without hole punching keeps the
    /// space (the writer reuses the places all the same).
    pub fn apply(self) {
        let chunks = u32::try_from(self.to_chunk).unwrap_or(u32::MAX);
        if self
            .file
            .write_all_at(&chunks.to_le_bytes(), RELEASED_CHUNKS_OFFSET)
            .is_err()
        {
            return;
        }
        // At most one ring's worth: beyond that the places repeat.
        let first = self
            .from_chunk
            .max(self.to_chunk.saturating_sub(u64::from(self.ring_chunks)));
        for chunk in first..self.to_chunk {
            // SAFETY: punching a hole in a range of our own descriptor's file.
            unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    chunk_offset(chunk, self.ring_chunks) as libc::off_t,
                    CHUNK_BYTES as libc::off_t,
                )
            };
        }
        let _ = self.file.write_all_at(&chunks.to_le_bytes(), PUNCHED_CHUNKS_OFFSET);
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
    spool: SpoolFile,
    /// How far reading got, and what it found.
    pub cursor: SpoolCursor,
    released_chunks: u64,
    ring_chunks: u32,
    /// Child-failure slots of the header already turned into processes
    /// that could not record (a bit a slot).
    failures_taken: u64,
}

/// The forked children that said in a spool's header that they could not
/// record (see `cudatrace_events::layout::ChildFailure`); children that
/// found no free slot are one entry of pid 0 that counts them.
pub fn child_failures(header: &SpoolHeaderInfo, spool_dir: &Path) -> Vec<UnrecordedProcess> {
    let mut processes: Vec<UnrecordedProcess> = header
        .child_failures
        .iter()
        .map(|(_, failure)| child_failure(failure, spool_dir))
        .collect();
    if header.child_failures_lost > 0 {
        processes.push(lost_children(header.process.pid, header.child_failures_lost));
    }
    processes
}

fn child_failure(failure: &ChildFailure, spool_dir: &Path) -> UnrecordedProcess {
    let end = failure.name.iter().position(|&b| b == 0).unwrap_or(failure.name.len());
    UnrecordedProcess {
        pid: failure.pid,
        ppid: failure.ppid,
        uid: failure.uid,
        time_ns: failure.time_ns,
        errno: failure.errno,
        name: String::from_utf8_lossy(&failure.name[..end]).into_owned(),
        reason: NoSpool::from_code(failure.reason).map_or_else(
            || collector_lines::unknown_child_reason(failure.reason),
            |reason| no_spool_text(reason, spool_dir),
        ),
    }
}

/// The children of `parent` that could not record and found no free slot
/// to say who they were: one entry of pid 0 whose `uid` field holds how
/// many (see `docs/trace-format.md`, record `U`).
fn lost_children(parent: u32, count: u32) -> UnrecordedProcess {
    UnrecordedProcess {
        pid: 0,
        ppid: parent,
        uid: count,
        time_ns: 0,
        errno: 0,
        name: String::new(),
        reason: collector_lines::children_not_named(count),
    }
}

/// Whether a spool that cannot be opened yet may still become readable: its
/// header is being written (or not yet reserved) by a live process.
pub fn may_become_readable(error: &SpoolError) -> bool {
    matches!(error, SpoolError::Truncated { .. } | SpoolError::Unfinished)
}

impl SpoolTail {
    /// Opens a spool whose header is complete.
    pub fn open(
        path: &Path,
        process: u32,
        image: u32,
        writable: bool,
    ) -> Result<(SpoolTail, SpoolHeaderInfo), SpoolError> {
        let spool = SpoolFile::open(path, writable)?;
        let header = spool.header();
        let tail = SpoolTail {
            path: path.to_owned(),
            process,
            pid: header.process.pid,
            image,
            liveness: Liveness::watch(header.process.pid),
            spool,
            cursor: SpoolCursor::new(header.process.pid, header.released_records),
            released_chunks: header.released_records / CHUNK_RECORDS as u64,
            ring_chunks: header.ring_chunks,
            failures_taken: 0,
        };
        Ok((tail, header))
    }

    /// The header as it is now (its counters and exit fields change).
    pub fn header(&self) -> SpoolHeaderInfo {
        self.spool.header()
    }

    /// Reads up to one batch of records after the last one read. Returns
    /// the events and whether the end of the file was reached.
    pub fn read_batch(&mut self, pass: Pass) -> Result<(Vec<Event>, bool), String> {
        let mut events = Vec::new();
        let at_end = self
            .cursor
            .read(&mut self.spool, pass, BATCH_SLOTS, &mut events)
            .map_err(|e| stderr::path_failed(&self.path, spool_error_text(&e)))?;
        self.spool.forget_before(self.cursor.next);
        Ok((events, at_end))
    }

    /// The forked children that said they could not record since the last
    /// call (see [`child_failures`]); those that found no slot are counted
    /// once, at `final_pass`.
    pub fn new_child_failures(
        &mut self,
        header: &SpoolHeaderInfo,
        spool_dir: &Path,
        final_pass: bool,
    ) -> Vec<UnrecordedProcess> {
        let mut processes = Vec::new();
        for (index, failure) in &header.child_failures {
            if self.failures_taken & (1 << index) == 0 {
                self.failures_taken |= 1 << index;
                processes.push(child_failure(failure, spool_dir));
            }
        }
        // Counted once, when the spool is read for the last time: the count
        // only grows until then.
        if final_pass && header.child_failures_lost > 0 {
            processes.push(lost_children(self.pid, header.child_failures_lost));
        }
        processes
    }

    /// Ends a final read: slots handed out but never stored are counted.
    pub fn finish(&mut self, header: &SpoolHeaderInfo) {
        self.cursor.finish(header.reserved_seqs);
    }

    /// A second descriptor of the spool file, for making its next chunk
    /// places ready; `None` if the spool was opened read-only (the collector
    /// opens spools writable) or the descriptor cannot be duplicated.
    pub fn writable_file(&self) -> Option<File> {
        let file = self.spool.file().try_clone().ok()?;
        // SAFETY: a query of our own descriptor's flags.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        (flags >= 0 && flags & libc::O_ACCMODE == libc::O_RDWR).then_some(file)
    }

    /// After the last read of a spool whose writer is gone: cuts the file
    /// back to the chunks its writer used, giving back the places the
    /// collector made ready ahead of it. A file whose ring was reached holds
    /// no such places and is left as it is.
    pub fn trim_unused_places(&self, header: &SpoolHeaderInfo) {
        let used_chunks = header.reserved_seqs.div_ceil(CHUNK_RECORDS as u64).max(1);
        if used_chunks >= u64::from(self.ring_chunks) {
            return;
        }
        let used_bytes = HEADER_SIZE as u64 + used_chunks * CHUNK_BYTES as u64;
        let file = self.spool.file();
        if file.metadata().is_ok_and(|meta| meta.len() > used_bytes) {
            let _ = file.set_len(used_bytes);
        }
    }

    /// The chunks read to the end since the last call, to be given back to
    /// the file system once their events are safely in the trace. Only while
    /// every slot read is settled: live reads stop at the first slot not yet
    /// whole, and final reads of a dead process have no writer left.
    pub fn chunks_to_release(&mut self) -> Option<Release> {
        let whole = self.cursor.next / CHUNK_RECORDS as u64;
        if whole <= self.released_chunks {
            return None;
        }
        let file = self.spool.file().try_clone().ok()?;
        let release = Release {
            file,
            from_chunk: self.released_chunks,
            to_chunk: whole,
            ring_chunks: self.ring_chunks,
        };
        self.released_chunks = whole;
        Some(release)
    }

    /// The trace's record of this process image starting.
    pub fn start_record(&self, header: &SpoolHeaderInfo) -> ProcessStart {
        ProcessStart {
            process: self.process,
            pid: self.pid,
            ppid: header.process.ppid,
            image: self.image,
            argv: header.process.argv.clone(),
            start_monotonic_ns: header.process.start_monotonic_ns,
            start_realtime_ns: header.process.start_realtime_ns,
            place: header.process.place.clone(),
        }
    }

    /// The trace's record of this process image ending, after a final read.
    pub fn end_record(
        &self,
        header: &SpoolHeaderInfo,
        exit_status: Option<i32>,
        exit_time_ns: Option<u64>,
        still_running: bool,
    ) -> ProcessEnd {
        ProcessEnd {
            process: self.process,
            exit_status,
            exit_time_ns,
            still_running,
            unfinished_records: cudatrace_events::unfinished(self.cursor.unwritten, header.dropped_records),
            unknown_frees: header.unknown_frees,
            registry_overflows: header.registry_overflows,
            dropped_records: header.dropped_records,
            drop_errno: header.drop_errno,
            reserved_events: header.reserved_seqs,
            damaged_records: self.cursor.damaged,
            ranks_at_end: [
                header.process.place.rank,
                header.process.place.local_rank,
                header.process.place.world_size,
            ],
            exec_into: None,
            process_exit_status: None,
        }
    }
}

/// Whether a file found in a spool folder may be read: a regular file owned
/// by this user. `Err(None)` if it has vanished, `Err(Some(refusal))` if not.
pub fn check_spool_file(path: &Path) -> Result<(), Option<Refusal>> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::symlink_metadata(path).map_err(|_| None)?;
    // SAFETY: no preconditions.
    let uid = unsafe { libc::geteuid() };
    let reason = if !metadata.file_type().is_file() {
        collector_lines::spool_refused(false)
    } else if metadata.uid() != uid {
        collector_lines::spool_refused(true)
    } else {
        return Ok(());
    };
    Err(Some(Refusal {
        path: path.display().to_string(),
        uid: metadata.uid(),
        reason: reason.into(),
    }))
}

/// The trace's record of a spool that cannot be read at all.
pub fn damaged_spool(path: &Path, pid: u32, image: u32, error: &SpoolError) -> DamagedSpool {
    DamagedSpool {
        pid,
        image,
        path: path.display().to_string(),
        reason: spool_error_text(error),
    }
}
