//! One device's newest trace entries, kept as they come, so that a
//! snapshot limited to its newest entries reads the trace once: the
//! oldest make way for the newest, and what remains is pickled at the end.
//!
//! The ring lies in an unnamed temporary file, a chunk of entries at a
//! time, with the chunk being filled in memory: a snapshot of many devices
//! keeps its memory small whatever the limit.

use super::fragment::anonymous_file;
use super::viewer_state::Entry;
use cudatrace_events::tensors::Action;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Entries a chunk holds: 4096 of 48 bytes.
const CHUNK: usize = 4096;
/// Bytes of an entry in the file.
const ENTRY_BYTES: usize = 48;

/// An entry, and whether it is the first of its event on its device: an
/// event's entries on a device are kept or left out together.
#[derive(Clone, Copy, Debug)]
pub(super) struct RingEntry {
    pub(super) entry: Entry,
    pub(super) starts_event: bool,
}

/// A device's newest `capacity` entries.
pub(super) struct EntryRing {
    capacity: u64,
    /// Chunks the file holds: enough for `capacity` entries besides the
    /// chunk in memory.
    slots: u64,
    /// The chunk being filled, encoded as in the file.
    filling: Vec<u8>,
    /// Full chunks written so far; chunk `k` lies in slot `k % slots`.
    full_chunks: u64,
    file: Option<File>,
}

impl EntryRing {
    /// A ring keeping the newest `capacity` entries (at least one).
    pub(super) fn new(capacity: u64) -> EntryRing {
        let capacity = capacity.max(1);
        EntryRing {
            capacity,
            slots: capacity.div_ceil(CHUNK as u64),
            filling: Vec::new(),
            full_chunks: 0,
            file: None,
        }
    }

    /// Keeps `entry`, the oldest making way; a full chunk goes to a file
    /// in `folder`.
    pub(super) fn push(&mut self, entry: RingEntry, folder: &Path) -> io::Result<()> {
        if self.filling.capacity() == 0 {
            self.filling.reserve_exact(CHUNK * ENTRY_BYTES);
        }
        self.filling.extend_from_slice(&encode(&entry));
        if self.filling.len() < CHUNK * ENTRY_BYTES {
            return Ok(());
        }
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(anonymous_file(folder)?),
        };
        let slot = self.full_chunks % self.slots;
        file.write_all_at(&self.filling, slot * (CHUNK * ENTRY_BYTES) as u64)?;
        self.full_chunks += 1;
        self.filling.clear();
        Ok(())
    }

    /// Entries pushed so far.
    pub(super) fn pushed(&self) -> u64 {
        self.full_chunks * CHUNK as u64 + (self.filling.len() / ENTRY_BYTES) as u64
    }

    /// The newest entries kept, oldest first, each to `take`: the newest
    /// `capacity`, less those of an event whose first entry made way.
    /// Returns how many were left out.
    pub(super) fn drain(self, mut take: impl FnMut(&Entry) -> io::Result<()>) -> io::Result<u64> {
        let pushed = self.pushed();
        let first = pushed.saturating_sub(self.capacity);
        let in_file = self.full_chunks * CHUNK as u64;
        let mut kept = 0;
        let mut started = false;
        let mut offer = |item: &RingEntry| -> io::Result<()> {
            started |= item.starts_event;
            if started {
                kept += 1;
                take(&item.entry)?;
            }
            Ok(())
        };
        let mut chunk_bytes = vec![0u8; CHUNK * ENTRY_BYTES];
        let mut position = first;
        while position < in_file {
            let chunk = position / CHUNK as u64;
            let file = self.file.as_ref().expect("full chunks are in the file");
            file.read_exact_at(&mut chunk_bytes, (chunk % self.slots) * (CHUNK * ENTRY_BYTES) as u64)?;
            let from = (position % CHUNK as u64) as usize;
            for bytes in chunk_bytes.chunks_exact(ENTRY_BYTES).skip(from) {
                offer(&decode(bytes))?;
            }
            position = (chunk + 1) * CHUNK as u64;
        }
        let from = (position - in_file) as usize;
        for bytes in self.filling.chunks_exact(ENTRY_BYTES).skip(from) {
            offer(&decode(bytes))?;
        }
        Ok(pushed - kept)
    }
}

fn encode(item: &RingEntry) -> [u8; ENTRY_BYTES] {
    let entry = &item.entry;
    let mut out = [0u8; ENTRY_BYTES];
    out[0] = entry.action as u8;
    out[1] = u8::from(item.starts_event);
    out[4..8].copy_from_slice(&entry.stack.to_le_bytes());
    let words = [
        entry.address,
        entry.size,
        entry.stream,
        entry.time_ns,
        entry.device_free,
    ];
    for (at, word) in words.into_iter().enumerate() {
        out[8 + at * 8..16 + at * 8].copy_from_slice(&word.to_le_bytes());
    }
    out
}

fn decode(bytes: &[u8]) -> RingEntry {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    RingEntry {
        entry: Entry {
            // Written by `encode` from an action, so always one.
            action: Action::from_code(u64::from(bytes[0])).unwrap_or(Action::Alloc),
            stack: u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")),
            address: word(8),
            size: word(16),
            stream: word(24),
            time_ns: word(32),
            device_free: word(40),
        },
        starts_event: bytes[1] != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64, starts_event: bool) -> RingEntry {
        RingEntry {
            entry: Entry {
                action: if n.is_multiple_of(3) {
                    Action::Oom
                } else {
                    Action::FreeCompleted
                },
                address: n,
                size: n * 2,
                stream: n * 3,
                stack: n as u32 + 7,
                time_ns: n * 5,
                device_free: n * 11,
            },
            starts_event,
        }
    }

    fn drained(ring: EntryRing) -> (Vec<u64>, u64) {
        let mut seen = Vec::new();
        let left_out = ring
            .drain(|e| {
                assert_eq!((e.size, e.stream, e.stack, e.time_ns, e.device_free), {
                    let n = e.address;
                    (n * 2, n * 3, n as u32 + 7, n * 5, n * 11)
                });
                let oom = e.address.is_multiple_of(3);
                assert_eq!(e.action, if oom { Action::Oom } else { Action::FreeCompleted });
                seen.push(e.address);
                Ok(())
            })
            .unwrap();
        (seen, left_out)
    }

    #[test]
    fn the_newest_entries_come_back_in_order_across_chunks_in_the_file() {
        let folder = std::env::temp_dir();
        for (capacity, pushed) in [(10_000u64, 30_000u64), (5, 3), (4096, 4096), (4097, 9000), (1, 8193)] {
            let mut ring = EntryRing::new(capacity);
            for n in 0..pushed {
                ring.push(entry(n, true), &folder).unwrap();
            }
            let (seen, left_out) = drained(ring);
            let first = pushed.saturating_sub(capacity);
            assert_eq!(seen, (first..pushed).collect::<Vec<_>>(), "{capacity} of {pushed}");
            assert_eq!(left_out, first);
        }
    }

    #[test]
    fn an_event_whose_first_entry_made_way_is_left_out_whole() {
        let folder = std::env::temp_dir();
        let mut ring = EntryRing::new(5);
        // Events of two entries: (0, 1), (2, 3), ... (8, 9); the newest five
        // entries are 5..=9, and 5 belongs to the event that began at 4.
        for n in 0..10 {
            ring.push(entry(n, n.is_multiple_of(2)), &folder).unwrap();
        }
        assert_eq!(drained(ring), (vec![6, 7, 8, 9], 6));
    }
}
