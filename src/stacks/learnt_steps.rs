//! The steps the native unwinder has learnt, shared by every thread. Each
//! step framehop takes is remembered, keyed by the return address it started
//! from, as one of the few shapes an x86-64 frame has: "the caller's stack
//! pointer is this far above mine (and its frame pointer is saved here)" or
//! "follow the frame pointer". A step seen before is then two or three
//! loads, which matters at the depths real programs call CUDA from.
//!
//! The table is read and written without a lock, by any thread in a hook:
//! a slot's key is written last and checked again after its step is read,
//! and each write of a step counts in the step's word, so that a reader
//! whose slot was taken by another key and given back meanwhile (the key
//! the same before and after, the step another's) sees the count move. The
//! count has 8 bits: only a reader stalled across 256 writes of its slot,
//! between two loads, could miss it, and then take a wrong step, which the
//! walk's bounds keep inside the thread's stack.

use crate::system::lazy_mapping::{LazyMapping, ZeroIsEmpty};
use std::sync::atomic::{AtomicU64, Ordering};

/// One unwinding step from a return address, as learnt from framehop.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Step {
    /// The caller's stack pointer is `cfa` bytes above this frame's; its
    /// return address lies just below that, and its frame pointer is saved
    /// `bp_at` bytes above this frame's stack pointer (or left as it is).
    Stack { cfa: u32, bp_at: Option<u32> },
    /// The frame pointer chain: the caller's frame pointer at `[bp]`, the
    /// return address at `[bp + 8]`.
    FramePointer,
}

/// A learnt step, as stored: confirmed, or seen once in a frame whose frame
/// pointer lay inside it (where the frame could be based on it, as libffi's
/// call frames are: then no fixed step describes it), with the frame
/// pointer's distance from the stack pointer then.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Learnt {
    /// A step to take from this return address whatever the frame pointer.
    Confirmed(Step),
    /// A step to take only with the frame pointer this far above the stack
    /// pointer, as when it was learnt.
    Tentative(Step, u64),
}

const FRAME_POINTER: u64 = 1 << 63;
const STACK: u64 = 1 << 62;
const TENTATIVE: u64 = 1 << 60;
const FIELD: u64 = (1 << 20) - 1;
/// Where the slot's count of writes lies in a step's word (8 bits).
const WRITES_SHIFT: u32 = 40;
const WRITES: u64 = 0xff << WRITES_SHIFT;
/// The largest distance a tentative step keeps (12 bits); a larger one is
/// kept as this, and never matches.
pub(crate) const BP_DISTANCE_BITS: u64 = (1 << 12) - 1;

impl Learnt {
    /// Packed in a word (never 0): flags, then the distance seen (12 bits),
    /// the slot's count of writes (8 bits, 0 here: see [`write_slot`]), the
    /// frame pointer's slot + 1 and the CFA's distance (20 bits each).
    /// `None` for a step too large to pack (a frame of a megabyte or more).
    fn pack(self) -> Option<u64> {
        let (step, tentative) = match self {
            Learnt::Confirmed(step) => (step, 0),
            // A distance too large to keep is kept as the largest, which
            // the walk never takes for a match.
            Learnt::Tentative(step, distance) => (step, TENTATIVE | distance.min(BP_DISTANCE_BITS) << 48),
        };
        let word = match step {
            Step::FramePointer => FRAME_POINTER,
            Step::Stack { cfa, bp_at } => {
                let slot = u64::from(bp_at.map_or(0, |at| at + 1));
                if u64::from(cfa) > FIELD || slot > FIELD {
                    return None;
                }
                STACK | slot << 20 | u64::from(cfa)
            }
        };
        Some(word | tentative)
    }

    fn unpack(word: u64) -> Option<Learnt> {
        let step = if word & FRAME_POINTER != 0 {
            Step::FramePointer
        } else if word & STACK != 0 {
            Step::Stack {
                cfa: (word & FIELD) as u32,
                bp_at: (((word >> 20) & FIELD) as u32).checked_sub(1),
            }
        } else {
            return None;
        };
        Some(if word & TENTATIVE != 0 {
            Learnt::Tentative(step, (word >> 48) & BP_DISTANCE_BITS)
        } else {
            Learnt::Confirmed(step)
        })
    }
}

/// A remembered step: the key (return address, with the module map's
/// generation in its top bits) and the packed step. Written step first,
/// key last; a reader checks the key again after reading the step.
#[repr(C)]
pub(crate) struct LearntSlot {
    key: AtomicU64,
    step: AtomicU64,
}

// SAFETY: zeroed, a slot is empty (no key matches 0: return addresses are not 0).
unsafe impl ZeroIsEmpty for LearntSlot {}

/// Remembered steps, shared by every thread, in sets of `LEARNT_WAYS` slots
/// chosen by return address. A set is one cache line, so a look-up costs one
/// line wherever the step lies in it; and return addresses that share a set
/// (a large program has thousands in use) do not evict each other, which
/// would send both through framehop on every event.
const LEARNT_SLOTS: usize = 1 << 16;
/// The slots of a set.
pub(crate) const LEARNT_WAYS: usize = 4;
/// The table, mapped at its first use.
#[unsafe(link_section = "cudatrace_hot")]
pub(crate) static LEARNT: LazyMapping<LearntSlot> = LazyMapping::new(LEARNT_SLOTS);

/// A step's key: its return address, with the module map's generation in
/// the top bits, so that a library loaded since at the same address does not
/// find another library's steps.
#[inline]
pub(crate) fn learnt_key(address: u64, generation: u64) -> u64 {
    address ^ generation << 48
}

/// The index of the set a return address's step is kept in.
#[inline(always)]
pub(crate) fn learnt_set_index(address: u64) -> usize {
    let sets = LEARNT_SLOTS / LEARNT_WAYS;
    ((address ^ (address >> 17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & (sets - 1)
}

fn learnt_set(slots: &[LearntSlot], address: u64) -> &[LearntSlot] {
    let set = learnt_set_index(address);
    &slots[set * LEARNT_WAYS..(set + 1) * LEARNT_WAYS]
}

/// The step kept for `key`, the return address `address`'s.
#[cfg(test)]
fn recall(slots: &[LearntSlot], key: u64, address: u64) -> Option<Learnt> {
    recall_in(slots, key, learnt_set_index(address))
}

/// The step kept for `key` in learnt set `set` (a return address's, see
/// [`learnt_set_index`]); `None` where no slot holds it.
#[inline]
pub(crate) fn recall_in(slots: &[LearntSlot], key: u64, set: usize) -> Option<Learnt> {
    let slot = slots
        .get(set * LEARNT_WAYS..(set + 1) * LEARNT_WAYS)?
        .iter()
        .find(|slot| slot.key.load(Ordering::Acquire) == key)?;
    confirmed(slot, key, slot.step.load(Ordering::Acquire))
}

/// `word`, read from `slot` after its key was seen to be `key`, as `key`'s
/// step: `None` unless the slot holds `key` still and that very word (its
/// count of writes included), so that no writer wrote it meanwhile.
#[inline]
fn confirmed(slot: &LearntSlot, key: u64, word: u64) -> Option<Learnt> {
    let unchanged = slot.key.load(Ordering::Acquire) == key && slot.step.load(Ordering::Acquire) == word;
    unchanged.then(|| Learnt::unpack(word)).flatten()
}

/// A slot a writer holds while it writes the step.
const WRITING: u64 = u64::MAX;

fn remember(slots: &[LearntSlot], key: u64, address: u64, learnt: Learnt) {
    let Some(word) = learnt.pack() else { return };
    let set = learnt_set(slots, address);
    // The key's own slot, else an empty one, else one picked by the address
    // (so that two keys do not keep taking the same slot from each other).
    let slot = set
        .iter()
        .find(|slot| slot.key.load(Ordering::Acquire) == key)
        .or_else(|| set.iter().find(|slot| slot.key.load(Ordering::Acquire) == 0))
        .unwrap_or(&set[((address >> 2) ^ (address >> 9)) as usize % LEARNT_WAYS]);
    write_slot(slot, key, word);
}

/// Writes a packed step and its key into a slot, unless another writer
/// holds it; the step's word counts the slot's writes (see the module
/// documentation).
fn write_slot(slot: &LearntSlot, key: u64, word: u64) {
    // One writer at a time: the one that takes the key word from what it
    // saw to WRITING writes the step, then its key; the others give up.
    let seen = slot.key.load(Ordering::Acquire);
    if seen == WRITING
        || slot
            .key
            .compare_exchange(seen, WRITING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    let writes = (slot.step.load(Ordering::Acquire) & WRITES).wrapping_add(1 << WRITES_SHIFT) & WRITES;
    slot.step.store(word & !WRITES | writes, Ordering::Release);
    slot.key.store(key, Ordering::Release);
}

/// Remembers what framehop did from `address`, given what was remembered
/// before (`seen`): a step seen twice with the frame pointer at different
/// places does not depend on it, and is confirmed.
pub(crate) fn learn(slots: &[LearntSlot], key: u64, address: u64, seen: Option<Learnt>, observed: Learnt) {
    let learnt_now = match (seen, observed) {
        (Some(Learnt::Tentative(step, distance)), Learnt::Tentative(now, now_distance))
            if step == now && distance != now_distance =>
        {
            Some(Learnt::Confirmed(step))
        }
        (Some(Learnt::Tentative(..)), Learnt::Tentative(..)) => None,
        (_, observed) => Some(observed),
    };
    if let Some(learnt_now) = learnt_now {
        remember(slots, key, address, learnt_now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learnt_steps_pack_and_unpack() {
        for learnt in [
            Learnt::Confirmed(Step::FramePointer),
            Learnt::Confirmed(Step::Stack { cfa: 48, bp_at: None }),
            Learnt::Confirmed(Step::Stack {
                cfa: 4096,
                bp_at: Some(16),
            }),
            Learnt::Tentative(
                Step::Stack {
                    cfa: 64,
                    bp_at: Some(0),
                },
                40,
            ),
        ] {
            assert_eq!(Learnt::unpack(learnt.pack().unwrap()), Some(learnt));
        }
        assert_eq!(
            Learnt::Confirmed(Step::Stack {
                cfa: 1 << 20,
                bp_at: None
            })
            .pack(),
            None
        );
        let largest = Learnt::Confirmed(Step::Stack {
            cfa: (1 << 20) - 1,
            bp_at: Some((1 << 20) - 2),
        });
        assert_eq!(Learnt::unpack(largest.pack().unwrap()), Some(largest));
        // The count of writes is no part of the step.
        let counted = largest.pack().unwrap() | 0x5a << WRITES_SHIFT;
        assert_eq!(Learnt::unpack(counted), Some(largest));
        assert_eq!(Learnt::unpack(0), None);
        // A distance too large to keep comes back as the largest.
        let step = Step::Stack { cfa: 64, bp_at: None };
        assert_eq!(
            Learnt::unpack(Learnt::Tentative(step, 5000).pack().unwrap()),
            Some(Learnt::Tentative(step, BP_DISTANCE_BITS))
        );
    }

    #[test]
    fn a_set_holds_as_many_steps_as_it_has_slots_and_then_takes_one_back() {
        let slots: Vec<LearntSlot> = (0..LEARNT_SLOTS)
            .map(|_| LearntSlot {
                key: AtomicU64::new(0),
                step: AtomicU64::new(0),
            })
            .collect();
        let a = 0x7f00_0000_0040u64;
        let same_set: Vec<u64> = (0..1u64 << 22)
            .map(|i| a + i * 16)
            .filter(|&b| std::ptr::eq(learnt_set(&slots, a).as_ptr(), learnt_set(&slots, b).as_ptr()))
            .take(LEARNT_WAYS + 1)
            .collect();
        let step = |i: usize| {
            Learnt::Confirmed(Step::Stack {
                cfa: 8 * (i as u32 + 1),
                bp_at: None,
            })
        };
        for (i, &address) in same_set[..LEARNT_WAYS].iter().enumerate() {
            remember(&slots, address, address, step(i));
        }
        for (i, &address) in same_set[..LEARNT_WAYS].iter().enumerate() {
            assert_eq!(recall(&slots, address, address), Some(step(i)));
        }
        // Learning one again updates its own slot.
        remember(&slots, same_set[0], same_set[0], step(9));
        assert_eq!(recall(&slots, same_set[0], same_set[0]), Some(step(9)));
        // One more takes exactly one slot from the others.
        let extra = same_set[LEARNT_WAYS];
        remember(&slots, extra, extra, step(7));
        assert_eq!(recall(&slots, extra, extra), Some(step(7)));
        let kept = same_set[..LEARNT_WAYS]
            .iter()
            .filter(|&&address| recall(&slots, address, address).is_some())
            .count();
        assert_eq!(kept, LEARNT_WAYS - 1);
    }

    #[test]
    fn a_writer_leaves_a_slot_another_writer_holds_alone() {
        let slots: Vec<LearntSlot> = (0..LEARNT_SLOTS)
            .map(|_| LearntSlot {
                key: AtomicU64::new(0),
                step: AtomicU64::new(0),
            })
            .collect();
        let address = 0x5555_0000_2000u64;
        let first = Learnt::Confirmed(Step::Stack { cfa: 8, bp_at: None });
        remember(&slots, address, address, first);
        assert_eq!(recall(&slots, address, address), Some(first));
        // Another writer holds the slot, between its step and its key.
        let slot = learnt_set(&slots, address)
            .iter()
            .find(|slot| slot.key.load(Ordering::Acquire) == address)
            .unwrap();
        slot.key.store(WRITING, Ordering::Release);
        write_slot(slot, address, Learnt::Confirmed(Step::FramePointer).pack().unwrap());
        assert_eq!(
            slot.step.load(Ordering::Acquire),
            first.pack().unwrap() | 1 << WRITES_SHIFT,
            "the step is not written twice"
        );
        assert_eq!(
            recall(&slots, address, address),
            None,
            "nobody reads a slot being written"
        );
    }

    #[test]
    fn a_slot_taken_by_another_key_and_given_back_is_not_read_across() {
        let slots: Vec<LearntSlot> = (0..LEARNT_SLOTS)
            .map(|_| LearntSlot {
                key: AtomicU64::new(0),
                step: AtomicU64::new(0),
            })
            .collect();
        let (k, x) = (0x5555_0000_3000u64, 0x5555_0000_7000u64);
        let (step_k, step_x) = (Step::Stack { cfa: 8, bp_at: None }, Step::FramePointer);
        remember(&slots, k, k, Learnt::Confirmed(step_k));
        let slot = learnt_set(&slots, k)
            .iter()
            .find(|slot| slot.key.load(Ordering::Acquire) == k)
            .unwrap();
        // A reader has seen the key k; before it reads the step, another
        // writer takes the slot for x, and a third gives it back to k.
        write_slot(slot, x, Learnt::Confirmed(step_x).pack().unwrap());
        let word = slot.step.load(Ordering::Acquire);
        assert_eq!(Learnt::unpack(word), Some(Learnt::Confirmed(step_x)));
        write_slot(slot, k, Learnt::Confirmed(step_k).pack().unwrap());
        assert_eq!(slot.key.load(Ordering::Acquire), k, "the key is k again");
        assert_eq!(confirmed(slot, k, word), None, "x's step is not taken for k's");
        // Read afresh, the slot gives k's step.
        assert_eq!(recall(&slots, k, k), Some(Learnt::Confirmed(step_k)));
    }

    #[test]
    fn one_writer_at_a_time_and_readers_never_see_a_step_under_another_key() {
        let slots: Vec<LearntSlot> = (0..LEARNT_SLOTS)
            .map(|_| LearntSlot {
                key: AtomicU64::new(0),
                step: AtomicU64::new(0),
            })
            .collect();
        // More return addresses than a set has slots, all in one set, each
        // with its own step: they take slots from each other.
        let a = 0x5555_0000_1000u64;
        let mut addresses = vec![a];
        addresses.extend(
            (1..1 << 22)
                .map(|i| a + i * 16)
                .filter(|&b| std::ptr::eq(learnt_set(&slots, a).as_ptr(), learnt_set(&slots, b).as_ptr()))
                .take(LEARNT_WAYS + 1),
        );
        let step_of = |address: u64| {
            Learnt::Confirmed(Step::Stack {
                cfa: 8 * (1 + addresses.iter().position(|&x| x == address).unwrap() as u32),
                bp_at: None,
            })
        };
        assert_eq!(addresses.len(), LEARNT_WAYS + 2);
        std::thread::scope(|scope| {
            for writer in 0..4 {
                let (slots, addresses, step_of) = (&slots, &addresses, &step_of);
                scope.spawn(move || {
                    for round in 0..20_000 {
                        let address = addresses[(writer + round) % addresses.len()];
                        remember(slots, address, address, step_of(address));
                        for &reader in addresses {
                            if let Some(seen) = recall(slots, reader, reader) {
                                assert_eq!(seen, step_of(reader));
                            }
                        }
                    }
                });
            }
        });
    }
}
