//! Whole stacks a thread interned lately, kept by a 128-bit key of their
//! frames (`call_stack`'s: the native walk's hash, which a kept walk keeps,
//! and the few Python frames), so that a stack seen before costs a short
//! hash and one look-up.
//!
//! Interning a stack otherwise looks up, in the process's node table, every
//! frame below the first one that differs from the thread's previous stack.
//! In a PyTorch process that is most of them: the Python line changes near
//! the outer end, and the 20 or 30 native frames below it hang from it. Each
//! look-up lands somewhere in a table of 32 MiB, a cache miss, and on the
//! GPU machine they came to a microsecond an event. A training loop repeats
//! a few hundred stacks, so they are kept whole.
//!
//! Nothing but the hash is compared, 107 bits of it (the set's 11, a tag of
//! 32 and a check of 64): two different stacks are taken for each other with
//! a chance of 2^-107 a pair, far below anything else that can go wrong in a
//! process.

use crate::system::lazy_mapping::ZeroIsEmpty;
#[cfg(test)]
use crate::system::thread_box::zeroed_box;

/// Entries a thread keeps: sets of [`WAYS`], one cache line each.
const ENTRIES: usize = 8192;
/// Entries of a set. A training step repeats some 700 allocation stacks; in
/// 4,096 direct-mapped entries one in six of them shared its entry with
/// another and was interned frame by frame on every step.
const WAYS: usize = 4;
const SETS: usize = ENTRIES / WAYS;

/// One kept stack: the hash's second word and the high half of its first
/// (the low half picks the set), with the stack's node. 16 bytes, so a set
/// is one cache line.
#[derive(Clone, Copy)]
#[repr(C)]
struct Entry {
    check: u64,
    tag: u32,
    /// The stack's innermost node; 0 for an empty entry.
    id: u32,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Set {
    ways: [Entry; WAYS],
}

/// One thread's stacks, by hash: 128 KiB, made zeroed on the heap by the
/// thread's first capture (`system::thread_box`).
pub(crate) struct StackCache {
    sets: [Set; SETS],
}

// SAFETY: zeroed, every entry is empty (id 0).
unsafe impl ZeroIsEmpty for StackCache {}

/// The set of a hash, and what its entry holds of the hash.
#[inline]
fn place(hash: [u64; 2]) -> (usize, u64, u32) {
    (hash[0] as usize % SETS, hash[1], (hash[0] >> 32) as u32)
}

impl StackCache {
    /// The node of the stack with this hash, if kept. Compares 96 bits of
    /// the hash besides the 11 that chose the set.
    #[inline]
    pub(crate) fn get(&self, hash: [u64; 2]) -> Option<u32> {
        let (set, check, tag) = place(hash);
        self.sets[set]
            .ways
            .iter()
            .find(|entry| entry.id != 0 && entry.check == check && entry.tag == tag)
            .map(|entry| entry.id)
    }

    /// Keeps the node of the stack with this hash: first in its set, the
    /// set's oldest entry dropped.
    #[inline]
    pub(crate) fn put(&mut self, hash: [u64; 2], id: u32) {
        let (set, check, tag) = place(hash);
        let ways = &mut self.sets[set].ways;
        ways.copy_within(0..WAYS - 1, 1);
        ways[0] = Entry { check, tag, id };
    }

    /// Forgets every stack (the ids belong to another table now).
    pub(crate) fn clear(&mut self) {
        for set in &mut self.sets {
            for entry in &mut set.ways {
                entry.id = 0;
            }
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
pub(crate) fn hash_frames(frames: impl IntoIterator<Item = (u8, u64, u32)>) -> [u64; 2] {
    const K: [u64; 4] = [
        0xA076_1D64_78BD_642F,
        0xE703_7ED1_A0B4_28DB,
        0x8EBC_6AF0_9C88_C6E3,
        0x5899_65CC_7537_4CC3,
    ];
    let mut length = 0u64;
    let (mut low, mut high) = (K[0], K[1]);
    for (kind, value, offset) in frames {
        length += 1;
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
        let a = hash_frames([(1, 0x1000, 0), (1, 0x2000, 0)]);
        let swapped = hash_frames([(1, 0x2000, 0), (1, 0x1000, 0)]);
        let other_kind = hash_frames([(2, 0x1000, 0), (1, 0x2000, 0)]);
        let other_offset = hash_frames([(1, 0x1000, 4), (1, 0x2000, 0)]);
        let longer = hash_frames([(1, 0x1000, 0), (1, 0x2000, 0), (1, 0, 0)]);
        for other in [swapped, other_kind, other_offset, longer] {
            assert_ne!(a, other);
        }
        let mut cache = zeroed_box::<StackCache>().unwrap();
        assert_eq!(cache.get(a), None);
        cache.put(a, 17);
        assert_eq!(cache.get(a), Some(17));
        assert_eq!(cache.get(longer), None);
        cache.clear();
        assert_eq!(cache.get(a), None);
    }

    #[test]
    fn a_set_keeps_its_four_latest_stacks() {
        let mut cache = zeroed_box::<StackCache>().unwrap();
        // Five stacks of one set, told apart by the rest of their hashes.
        let hashes: Vec<[u64; 2]> = (1..=5u64).map(|i| [7 + (i << 32), i * 1000]).collect();
        for (i, hash) in hashes.iter().enumerate() {
            cache.put(*hash, i as u32 + 1);
        }
        assert_eq!(cache.get(hashes[0]), None);
        for (i, hash) in hashes.iter().enumerate().skip(1) {
            assert_eq!(cache.get(*hash), Some(i as u32 + 1));
        }
        // Same set and second word, other high half of the first word.
        assert_eq!(cache.get([7 + (9 << 32), 2000]), None);
        // Same second word and high half, another set.
        assert_eq!(cache.get([8 + (2 << 32), 2000]), None);
    }

    #[test]
    fn a_million_stacks_differing_in_one_frame_have_a_million_hashes() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1_000_000u64 {
            let frames = [(1u8, 0x7f00_0000_0000 + 16 * i, 0u32), (1, 0x1234, 0), (3, 0xdead, 6)];
            assert!(seen.insert(hash_frames(frames)));
        }
    }
}
