//! Byte layout of a spool file: one header page, then fixed-size records.
//!
//! All integers are little-endian (the only byte order the tracer runs on).
//! The file is created sparse and grows in chunks of [`CHUNK_RECORDS`]
//! records; a record slot that was never written reads as zeros.

/// First eight bytes of every spool file.
pub const SPOOL_MAGIC: [u8; 8] = *b"CUTRSPL\0";
/// Version of this layout; bumped on any incompatible change.
pub const SPOOL_VERSION: u32 = 1;
/// Size of the header page; records start at this offset.
pub const HEADER_SIZE: usize = 4096;
/// Size of one record in bytes.
pub const RECORD_SIZE: usize = 64;
/// Records added to the file each time the writer runs out of mapped space.
pub const CHUNK_RECORDS: usize = 16384;
/// Bytes of `/proc/self/cmdline` kept in the header.
pub const CMDLINE_CAPACITY: usize = HEADER_SIZE - 96;
/// Offset of [`SpoolHeader::released_chunks`], which the collector writes.
pub const RELEASED_CHUNKS_OFFSET: u64 = 92;

/// The header page at the start of a spool file.
///
/// The counters are updated atomically by the writer while the process runs,
/// so a reader sees their latest values even after a crash.
#[repr(C)]
pub struct SpoolHeader {
    /// [`SPOOL_MAGIC`].
    pub magic: [u8; 8],
    /// [`SPOOL_VERSION`].
    pub version: u32,
    /// [`RECORD_SIZE`], so that readers can reject a mismatched writer.
    pub record_size: u32,
    /// [`HEADER_SIZE`].
    pub header_size: u32,
    /// [`CHUNK_RECORDS`].
    pub chunk_records: u32,
    /// Process id of the writer.
    pub pid: u32,
    /// Parent process id of the writer at the time the spool was created.
    pub ppid: u32,
    /// `CLOCK_MONOTONIC` when the spool was created; record times use the same clock.
    pub start_monotonic_ns: u64,
    /// `CLOCK_REALTIME` at the same instant: the wall-clock anchor of the process.
    pub start_realtime_ns: u64,
    /// Frees of memory the tracer never saw allocated (not recorded as events).
    pub unknown_frees: u64,
    /// Allocations that could not be entered in the live table because it was full.
    pub registry_overflows: u64,
    /// Records dropped because the spool could not grow (disk full, mmap failure).
    pub dropped_records: u64,
    /// `CLOCK_MONOTONIC` when the process called `exit`.
    pub exit_time_ns: u64,
    /// The status the process passed to `exit`.
    pub exit_status: i32,
    /// 1 once `exit_time_ns` and `exit_status` are set (written last); 0 while
    /// running, or if the process ended without calling `exit` (a signal, `_exit`, `exec`).
    pub exit_recorded: u32,
    /// Number of meaningful bytes in `cmdline`.
    pub cmdline_len: u32,
    /// Chunks the collector has read, saved to the trace and given back to
    /// the file system; their records read as zeros. Written by the collector.
    pub released_chunks: u32,
    /// The process's argv as in `/proc/self/cmdline`: NUL-separated, truncated.
    pub cmdline: [u8; CMDLINE_CAPACITY],
}

const _: () = assert!(std::mem::size_of::<SpoolHeader>() == HEADER_SIZE);

/// One event as stored in the spool.
///
/// `seq_plus_one` is written last, with release ordering: a slot whose
/// `seq_plus_one` is zero was never completed (its hook had not returned) and
/// is ignored by readers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawRecord {
    /// Per-process sequence number plus one; zero marks an unfinished slot.
    pub seq_plus_one: u64,
    /// `CLOCK_MONOTONIC` in nanoseconds.
    pub time_ns: u64,
    /// Device or host address, or the handle for arrays and VMM physical memory.
    pub address: u64,
    /// Bytes concerned; for `Oom`, the bytes that were requested.
    pub size: u64,
    /// The stream of stream-ordered calls (`2` is the per-thread default stream).
    pub stream: u64,
    /// Op-specific: device free bytes for `Oom`, the physical handle for `Map`,
    /// the pitch for pitched allocations, the pool for pool allocations.
    pub arg1: u64,
    /// Op-specific: device total bytes for `Oom`, the handle offset for `Map`.
    pub arg2: u64,
    /// Kernel thread id of the caller.
    pub tid: u32,
    /// [`crate::Op`] code.
    pub op: u8,
    /// [`crate::Kind`] code.
    pub kind: u8,
    /// [`crate::Api`] code.
    pub api: u8,
    /// Device ordinal, or -1 for host memory or when unknown.
    pub device: i8,
}

const _: () = assert!(std::mem::size_of::<RawRecord>() == RECORD_SIZE);

impl RawRecord {
    /// Decodes a record from its stored bytes.
    pub fn from_bytes(bytes: &[u8; RECORD_SIZE]) -> RawRecord {
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(b)
        };
        RawRecord {
            seq_plus_one: word(0),
            time_ns: word(1),
            address: word(2),
            size: word(3),
            stream: word(4),
            arg1: word(5),
            arg2: word(6),
            tid: u32::from_le_bytes([bytes[56], bytes[57], bytes[58], bytes[59]]),
            op: bytes[60],
            kind: bytes[61],
            api: bytes[62],
            device: bytes[63] as i8,
        }
    }

    /// Encodes a record as it is stored.
    pub fn to_bytes(&self) -> [u8; RECORD_SIZE] {
        let mut out = [0u8; RECORD_SIZE];
        let words = [
            self.seq_plus_one,
            self.time_ns,
            self.address,
            self.size,
            self.stream,
            self.arg1,
            self.arg2,
        ];
        for (i, w) in words.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out[56..60].copy_from_slice(&self.tid.to_le_bytes());
        out[60] = self.op;
        out[61] = self.kind;
        out[62] = self.api;
        out[63] = self.device as u8;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_bytes_round_trip_and_match_the_in_memory_layout() {
        let record = RawRecord {
            seq_plus_one: 7,
            time_ns: 123_456_789,
            address: 0x7f00_0000_1000,
            size: 4096,
            stream: 2,
            arg1: 11,
            arg2: 12,
            tid: 4242,
            op: 1,
            kind: 3,
            api: 66,
            device: -1,
        };
        let bytes = record.to_bytes();
        assert_eq!(RawRecord::from_bytes(&bytes), record);
        // The writer stores the struct directly; the reader decodes bytes.
        // Both must agree on where each field lies.
        let in_memory: [u8; RECORD_SIZE] = unsafe { std::mem::transmute(record) };
        assert_eq!(in_memory, bytes);
    }
}
