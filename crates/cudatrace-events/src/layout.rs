//! Byte layout of a spool file: one header page, then fixed-size records.
//!
//! All integers are little-endian (the only byte order the tracer runs on).
//! The file grows in chunks of [`CHUNK_RECORDS`] records, each reserved on
//! disk before the writer touches it; a record slot that was never written
//! reads as zeros.
//!
//! # The ring
//!
//! The file holds at most [`SpoolHeader::ring_chunks`] chunks: chunk *k*
//! (sequence numbers `k * CHUNK_RECORDS ..`) lives in the file's chunk place
//! `k % ring_chunks` ([`chunk_offset`]). A place is used again once the
//! collector has saved its chunk to the trace and given its space back
//! ([`SpoolHeader::punched_chunks`]), so the file's size stays bounded
//! however long the process runs, and within `ulimit -f`. Records of an
//! earlier chunk left in a place read as another sequence number's: never
//! this one's.
//!
//! # Publication protocol
//!
//! A writer fills words 1 to 8 of its slot, then stores word 0, the *commit
//! word*, with release ordering. The commit word holds the sequence number
//! plus one in its low 48 bits and a 16-bit check of the other eight words
//! in its high 16 bits ([`commit_word`]). A reader loads the commit word with
//! acquire ordering, then the body; the record is complete only when the
//! commit word is non-zero, names this slot's sequence number, the check
//! matches the body, and the op code is non-zero. Anything else is "not yet
//! written" while the writer lives, and damage once it is gone.

/// First eight bytes of every spool file.
pub const SPOOL_MAGIC: [u8; 8] = *b"CUTRSPL\0";
/// Version of this layout; bumped on any incompatible change.
pub const SPOOL_VERSION: u32 = 7;
/// Size of the header page; records start at this offset.
pub const HEADER_SIZE: usize = 4096;
/// Size of one record in bytes.
pub const RECORD_SIZE: usize = 72;
/// Records added to the file each time the writer runs out of reserved space.
pub const CHUNK_RECORDS: usize = 16384;
/// Bytes of one chunk.
pub const CHUNK_BYTES: usize = CHUNK_RECORDS * RECORD_SIZE;
/// Places in the header where forked children say they could not record.
pub const CHILD_FAILURE_SLOTS: usize = 16;
/// Offset of [`SpoolHeader::identity`] in the header.
pub const IDENTITY_OFFSET: usize = 128 + CHILD_FAILURE_SLOTS * std::mem::size_of::<ChildFailure>();
/// Bytes of an `exec`'d path kept in the header ([`SpoolHeader::exec_into`]).
pub const EXEC_INTO_CAPACITY: usize = 256;
/// Offset of [`SpoolHeader::process_start_ticks`] in the header.
pub const PROCESS_START_TICKS_OFFSET: usize = IDENTITY_OFFSET + std::mem::size_of::<ProcessIdentity>();
/// Offset of [`SpoolHeader::exec_into`] in the header.
pub const EXEC_INTO_OFFSET: usize = PROCESS_START_TICKS_OFFSET + 16;
/// Offset of the command line in the header.
pub const CMDLINE_OFFSET: usize = EXEC_INTO_OFFSET + EXEC_INTO_CAPACITY;
/// Bytes of `/proc/self/cmdline` kept in the header.
pub const CMDLINE_CAPACITY: usize = HEADER_SIZE - CMDLINE_OFFSET;
/// Offset of [`SpoolHeader::released_chunks`], which the collector writes.
pub const RELEASED_CHUNKS_OFFSET: u64 = 92;
/// Offset of [`SpoolHeader::reserved_seqs`], which the writer counts up.
pub const RESERVED_SEQS_OFFSET: u64 = 96;
/// Offset of [`SpoolHeader::punched_chunks`], which the collector writes.
pub const PUNCHED_CHUNKS_OFFSET: u64 = 116;
/// The most chunk places a spool has (a power of two): 18 GiB.
pub const MAX_RING_CHUNKS: u32 = 1 << 14;

/// Byte offset in the file of chunk `chunk`'s first record, in a spool
/// whose ring has `ring_chunks` places.
pub fn chunk_offset(chunk: u64, ring_chunks: u32) -> u64 {
    HEADER_SIZE as u64 + (chunk % u64::from(ring_chunks.max(1))) * CHUNK_BYTES as u64
}
/// The op byte of a tombstone: the record of this sequence number was
/// dropped (it could not be stored when it happened). Never an event.
pub const DROPPED_OP: u8 = 0xff;
/// Sequence numbers are the low 48 bits of the commit word.
pub const SEQ_BITS: u32 = 48;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

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
    /// Frees of memory the tracer never saw allocated.
    pub unknown_frees: u64,
    /// Allocations that could not be entered in the live table because it was full.
    pub registry_overflows: u64,
    /// Records dropped because the spool could not grow (disk full, file
    /// size limit, mmap failure); their sequence numbers are gaps.
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
    /// Chunks the collector has read, saved durably to the trace and given
    /// back to the file system; their records read as zeros. Written by the collector.
    pub released_chunks: u32,
    /// Sequence numbers handed out so far: every one below this was either
    /// stored, dropped, or is in flight in a hook.
    pub reserved_seqs: u64,
    /// The `errno` of the first failure that made a record be dropped; 0 if none.
    pub drop_errno: i32,
    /// 1 while the process is in a call of the `exec` family (set just
    /// before the real call, back to 0 if it returns): an image that ended
    /// with this set and no exit recorded was replaced by `exec`.
    pub exec_started: u32,
    /// Chunk places in the file (see the module documentation): a power of
    /// two, as many as `ulimit -f` allows, at most [`MAX_RING_CHUNKS`].
    pub ring_chunks: u32,
    /// Chunks whose place the collector has emptied (punched out) after
    /// releasing them: the writer reuses a place only below this. Written
    /// by the collector.
    pub punched_chunks: u32,
    /// Forked children that could not record and found every one of
    /// [`Self::child_failures`] taken.
    pub child_failures_lost: u32,
    /// Zero; keeps the slots 8-byte aligned.
    pub spare: u32,
    /// Where a forked child that cannot create its own spool says so: it
    /// still has this header mapped, shared, from before the fork, whatever
    /// user it has become and whatever descriptors it has left. Claimed in
    /// order by an atomic exchange of `pid`.
    pub child_failures: [ChildFailure; CHILD_FAILURE_SLOTS],
    /// Where the process ran and which rank of a distributed job it is.
    pub identity: ProcessIdentity,
    /// When the process started, in clock ticks after boot (the 22nd field
    /// of `/proc/self/stat`): the same for every image of one process, so
    /// that a new image tells a spool of an earlier image of its own process
    /// from one a dead process with the same pid left. 0 if unknown.
    pub process_start_ticks: u64,
    /// Bytes of [`Self::exec_into`] in use; written after them.
    pub exec_into_len: u32,
    /// Zero.
    pub exec_spare: u32,
    /// What the image `exec`'d: the path its `exec` call named, or, for an
    /// `exec` no hook saw (the raw system call), the new image's
    /// `/proc/self/exe`, written here by the new image as it loads.
    pub exec_into: [u8; EXEC_INTO_CAPACITY],
    /// The process's argv as in `/proc/self/cmdline`: NUL-separated, truncated.
    pub cmdline: [u8; CMDLINE_CAPACITY],
}

const _: () = assert!(std::mem::size_of::<SpoolHeader>() == HEADER_SIZE);
const _: () = assert!(std::mem::offset_of!(SpoolHeader, released_chunks) == RELEASED_CHUNKS_OFFSET as usize);
const _: () = assert!(std::mem::offset_of!(SpoolHeader, reserved_seqs) == RESERVED_SEQS_OFFSET as usize);
const _: () = assert!(std::mem::offset_of!(SpoolHeader, punched_chunks) == PUNCHED_CHUNKS_OFFSET as usize);
const _: () = assert!(std::mem::offset_of!(SpoolHeader, cmdline) == CMDLINE_OFFSET);
const _: () = assert!(std::mem::offset_of!(SpoolHeader, child_failures) == 128);
const _: () = assert!(std::mem::offset_of!(SpoolHeader, identity) == IDENTITY_OFFSET);
const _: () = assert!(std::mem::offset_of!(SpoolHeader, process_start_ticks) == PROCESS_START_TICKS_OFFSET);
const _: () = assert!(std::mem::offset_of!(SpoolHeader, exec_into) == EXEC_INTO_OFFSET);

/// Bytes of the host name kept in a header: Linux's longest (`HOST_NAME_MAX`).
pub const HOST_NAME_CAPACITY: usize = 64;

/// Where a process ran and its place in a distributed job, as the process
/// itself saw them: the host's name, and the `RANK`, `LOCAL_RANK` and
/// `WORLD_SIZE` of its environment (which `torchrun`, `srun` wrappers and
/// `mpirun` set for each worker).
///
/// The numbers are stored plus one, so that 0 means "not set". They are
/// written when the spool is created and, for those not set then, again
/// when the process exits (a program may set them itself once running);
/// each is one aligned word, stored atomically.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// `RANK` + 1, or 0.
    pub rank: u32,
    /// `LOCAL_RANK` + 1, or 0.
    pub local_rank: u32,
    /// `WORLD_SIZE` + 1, or 0.
    pub world_size: u32,
    /// Zero.
    pub spare: u32,
    /// The host name (`uname`'s node name), NUL-padded.
    pub host: [u8; HOST_NAME_CAPACITY],
}

const _: () = assert!(std::mem::size_of::<ProcessIdentity>() == 80);

/// A forked child that could not create its spool, as it wrote itself into
/// its parent's header (see [`SpoolHeader::child_failures`]).
///
/// The child claims the slot by changing `pid` from 0 to its pid, fills in
/// the rest, and stores `published` = 1 last, with release ordering; a
/// reader takes a slot only once `published` is 1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChildFailure {
    /// The child's pid; 0 while the slot is free.
    pub pid: u32,
    /// Its real user id when it gave up.
    pub uid: u32,
    /// The failure's `errno`, or 0.
    pub errno: i32,
    /// Why, as a [`crate::notices::NoSpool`] code.
    pub reason: u32,
    /// `CLOCK_MONOTONIC` when it gave up.
    pub time_ns: u64,
    /// Its name (`comm`), NUL-padded.
    pub name: [u8; 16],
    /// Its parent's pid (this header's process, or a process forked from
    /// it that had no spool of its own either).
    pub ppid: u32,
    /// 1 once the fields above are written.
    pub published: u32,
}

const _: () = assert!(std::mem::size_of::<ChildFailure>() == 48);
// Readers load a header's words from the last to the first (acquire), so
// `published` must be a slot's last word: it is then read before the
// fields it guards.
const _: () = assert!(std::mem::offset_of!(ChildFailure, published) == std::mem::size_of::<ChildFailure>() - 4);

/// One event as stored in the spool. See the module documentation for the
/// order in which its words are written and read.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawRecord {
    /// The commit word ([`commit_word`]); zero marks a slot not yet written.
    pub commit: u64,
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
    /// [`crate::Op`] code; never zero in a written record.
    pub op: u8,
    /// [`crate::Kind`] code.
    pub kind: u8,
    /// [`crate::Api`] code.
    pub api: u8,
    /// Device ordinal, or -1 for host memory or when unknown.
    pub device: i8,
    /// Id of the call stack's innermost node (see [`crate::stacks`]); 0 = none.
    pub stack: u32,
    /// Zero; room for later use.
    pub spare: u32,
}

const _: () = assert!(std::mem::size_of::<RawRecord>() == RECORD_SIZE);

/// Odd multipliers for the check, one per word.
const CHECK_FACTORS: [u64; 9] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0xD6E8_FEB8_6659_FD93,
    0xA076_1D64_78BD_642F,
    0xE703_7ED1_A0B4_28DB,
    0x8EBC_6AF0_9C88_C6E3,
    0x5899_65CC_7537_4CC3,
    0x94D0_49BB_1331_11EB,
];

/// The 16-bit check of a record body (words 1 to 8) for sequence number
/// `seq`. The products are independent, so this costs a few cycles.
#[inline]
pub fn body_check(seq: u64, body: &[u64; 8]) -> u16 {
    let mut sum = (seq.wrapping_add(1) ^ 0x5EED).wrapping_mul(CHECK_FACTORS[0]);
    for (word, factor) in body.iter().zip(&CHECK_FACTORS[1..]) {
        sum = sum.wrapping_add((word ^ (word >> 32)).wrapping_mul(*factor));
    }
    ((sum ^ (sum >> 32)).wrapping_mul(CHECK_FACTORS[0]) >> 48) as u16
}

/// The commit word of a record with sequence number `seq` and this body.
#[inline]
pub fn commit_word(seq: u64, body: &[u64; 8]) -> u64 {
    ((seq.wrapping_add(1)) & SEQ_MASK) | (u64::from(body_check(seq, body)) << SEQ_BITS)
}

/// The sequence number a non-zero commit word names.
#[inline]
pub fn committed_seq(commit: u64) -> u64 {
    (commit & SEQ_MASK).wrapping_sub(1)
}

/// Whether `commit` is the commit word of sequence number `seq` with this body.
#[inline]
pub fn commit_matches(commit: u64, seq: u64, body: &[u64; 8]) -> bool {
    commit != 0 && commit == commit_word(seq, body)
}

impl RawRecord {
    /// Words 1 to 8, as the check covers them.
    #[inline]
    pub fn body_words(&self) -> [u64; 8] {
        let last = u64::from(self.tid)
            | u64::from(self.op) << 32
            | u64::from(self.kind) << 40
            | u64::from(self.api) << 48
            | u64::from(self.device as u8) << 56;
        [
            self.time_ns,
            self.address,
            self.size,
            self.stream,
            self.arg1,
            self.arg2,
            last,
            u64::from(self.stack) | u64::from(self.spare) << 32,
        ]
    }

    /// Decodes a record from its stored bytes.
    pub fn from_bytes(bytes: &[u8; RECORD_SIZE]) -> RawRecord {
        let mut words = [0u64; RECORD_SIZE / 8];
        for (i, word) in words.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            *word = u64::from_le_bytes(b);
        }
        RawRecord::from_words(&words)
    }

    /// Decodes a record from its nine little-endian words.
    pub fn from_words(words: &[u64; RECORD_SIZE / 8]) -> RawRecord {
        let last = words[7];
        RawRecord {
            commit: words[0],
            time_ns: words[1],
            address: words[2],
            size: words[3],
            stream: words[4],
            arg1: words[5],
            arg2: words[6],
            tid: last as u32,
            op: (last >> 32) as u8,
            kind: (last >> 40) as u8,
            api: (last >> 48) as u8,
            device: (last >> 56) as u8 as i8,
            stack: words[8] as u32,
            spare: (words[8] >> 32) as u32,
        }
    }

    /// Encodes a record as it is stored.
    pub fn to_bytes(&self) -> [u8; RECORD_SIZE] {
        let mut out = [0u8; RECORD_SIZE];
        out[..8].copy_from_slice(&self.commit.to_le_bytes());
        for (i, w) in self.body_words().iter().enumerate() {
            out[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// This record with the commit word for sequence number `seq` filled in.
    pub fn committed(mut self, seq: u64) -> RawRecord {
        self.commit = commit_word(seq, &self.body_words());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RawRecord {
        RawRecord {
            commit: 0,
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
            stack: 77,
            spare: 0,
        }
        .committed(6)
    }

    #[test]
    fn record_bytes_round_trip_and_match_the_in_memory_layout() {
        let record = sample();
        let bytes = record.to_bytes();
        assert_eq!(RawRecord::from_bytes(&bytes), record);
        // The writer stores the struct directly; the reader decodes bytes.
        // Both must agree on where each field lies.
        // SAFETY: RawRecord is repr(C), RECORD_SIZE bytes, with no padding.
        let in_memory: [u8; RECORD_SIZE] = unsafe { std::mem::transmute(record) };
        assert_eq!(in_memory, bytes);
    }

    #[test]
    fn the_commit_word_names_the_sequence_number_and_checks_the_body() {
        let record = sample();
        assert_eq!(committed_seq(record.commit), 6);
        assert!(commit_matches(record.commit, 6, &record.body_words()));
        assert!(!commit_matches(record.commit, 7, &record.body_words()));
        // Any one word torn back to its unwritten zero fails the check.
        for word in 0..8 {
            let mut body = record.body_words();
            body[word] = 0;
            assert!(!commit_matches(record.commit, 6, &body), "word {word}");
        }
        // As does any single flipped bit.
        for bit in 0..(8 * 64) {
            let mut body = record.body_words();
            body[bit / 64] ^= 1 << (bit % 64);
            assert!(!commit_matches(record.commit, 6, &body), "bit {bit}");
        }
        assert!(!commit_matches(0, 6, &record.body_words()));
    }
}
