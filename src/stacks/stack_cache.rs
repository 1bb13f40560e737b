//! Whole stacks a thread interned lately, kept by a 128-bit hash of their
//! frames, so that a stack seen before costs a hash and one look-up.
//!
//! Interning a stack otherwise looks up, in the process's node table, every
//! frame below the first one that differs from the thread's previous stack.
//! In a PyTorch process that is most of them: the Python line changes near
//! the outer end, and the 20 or 30 native frames below it hang from it. Each
//! look-up lands somewhere in a table of 32 MiB, a cache miss, and on the
//! GPU machine they came to a microsecond an event. A training loop repeats
//! a few hundred stacks, so they are kept whole.
//!
//! Nothing but the hash is compared: two different stacks share a 128-bit
//! hash with a chance of 2^-128 a pair, far below anything else that can go
//! wrong in a process.

/// Entries a thread keeps, direct-mapped by hash.
const ENTRIES: usize = 4096;

#[derive(Clone, Copy)]
struct Entry {
    hash: [u64; 2],
    /// The stack's innermost node; 0 for an empty entry.
    id: u32,
}

/// One thread's stacks, by hash.
pub struct StackCache {
    entries: [Entry; ENTRIES],
}

impl StackCache {
    /// An empty cache, on the heap (96 KiB: a preloaded library's
    /// thread-local storage comes out of every thread's stack).
    #[cold]
    #[inline(never)]
    /// `None` where the memory cannot be had: then stacks are interned
    /// frame by frame, and the traced program never sees an abort of ours.
    pub fn new() -> Option<Box<StackCache>> {
        let layout = std::alloc::Layout::new::<StackCache>();
        // SAFETY: the layout is StackCache's, not zero-sized; all-zero bytes
        // are a valid cache of empty entries, and the Box takes the
        // allocation over with the same layout.
        unsafe {
            let raw = std::alloc::alloc_zeroed(layout);
            (!raw.is_null()).then(|| Box::from_raw(raw.cast::<StackCache>()))
        }
    }

    /// The node of the stack with this hash, if kept.
    #[inline]
    pub fn get(&self, hash: [u64; 2]) -> Option<u32> {
        let entry = &self.entries[hash[0] as usize % ENTRIES];
        (entry.id != 0 && entry.hash == hash).then_some(entry.id)
    }

    /// Keeps the node of the stack with this hash.
    #[inline]
    pub fn put(&mut self, hash: [u64; 2], id: u32) {
        self.entries[hash[0] as usize % ENTRIES] = Entry { hash, id };
    }

    /// Forgets every stack (the ids belong to another table now).
    pub fn clear(&mut self) {
        for entry in &mut self.entries {
            entry.id = 0;
        }
    }
}

/// The 128 bits of a product, folded into 64.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    product as u64 ^ (product >> 64) as u64
}

/// A 128-bit hash of a stack's frames, each (kind, value, offset).
#[inline]
pub fn hash_frames(frames: impl ExactSizeIterator<Item = (u8, u64, u32)>) -> [u64; 2] {
    const K: [u64; 4] = [
        0xA076_1D64_78BD_642F,
        0xE703_7ED1_A0B4_28DB,
        0x8EBC_6AF0_9C88_C6E3,
        0x5899_65CC_7537_4CC3,
    ];
    let length = frames.len() as u64;
    let (mut low, mut high) = (K[0], K[1]);
    for (kind, value, offset) in frames {
        let tag = u64::from(kind) | u64::from(offset) << 8;
        low = fold(low ^ value, K[2] ^ tag);
        // Independent of `low`, so that the two chains of multiplies run
        // side by side.
        high = fold(high ^ value.rotate_left(32) ^ tag.rotate_left(17), K[3]);
    }
    [fold(low, K[2] ^ length), fold(high ^ low, K[3] ^ length)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_stack_is_found_by_its_hash_and_no_other() {
        let a = hash_frames([(1, 0x1000, 0), (1, 0x2000, 0)].into_iter());
        let swapped = hash_frames([(1, 0x2000, 0), (1, 0x1000, 0)].into_iter());
        let other_kind = hash_frames([(2, 0x1000, 0), (1, 0x2000, 0)].into_iter());
        let other_offset = hash_frames([(1, 0x1000, 4), (1, 0x2000, 0)].into_iter());
        let longer = hash_frames([(1, 0x1000, 0), (1, 0x2000, 0), (1, 0, 0)].into_iter());
        for other in [swapped, other_kind, other_offset, longer] {
            assert_ne!(a, other);
        }
        let mut cache = StackCache::new().unwrap();
        assert_eq!(cache.get(a), None);
        cache.put(a, 17);
        assert_eq!(cache.get(a), Some(17));
        assert_eq!(cache.get(longer), None);
        cache.clear();
        assert_eq!(cache.get(a), None);
    }

    #[test]
    fn a_million_stacks_differing_in_one_frame_have_a_million_hashes() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1_000_000u64 {
            let frames = [(1u8, 0x7f00_0000_0000 + 16 * i, 0u32), (1, 0x1234, 0), (3, 0xdead, 6)];
            assert!(seen.insert(hash_frames(frames.into_iter())));
        }
    }
}
