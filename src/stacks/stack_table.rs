//! Interning of call-stack nodes, lock-free, once per process.
//!
//! A node is (kind, value, parent, offset): one frame and the node of the
//! frame that called it. Its id is its slot in an open-addressing table
//! that is only ever added to, so ids are stable for the life of the
//! process. The thread that claims a slot publishes the node to the spool;
//! everyone else just reads its id. The table is an anonymous mapping
//! reserved without swap, so only the slots used cost memory.

use crate::spool::writer as spool_writer;
use crate::system::lazy_mapping::{LazyMapping, ZeroIsEmpty};
use crate::system::thread::current_tid;
use cudatrace_events::stacks::{BlobPiece, BLOB_PIECE_BYTES};
use cudatrace_events::{Api, Kind, Op, RawRecord};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Slots in the table (fewer under an address-space limit); ids run from 1
/// to this.
const SLOTS: usize = 1 << 20;
/// Slots probed before giving up on a full neighbourhood.
const MAX_PROBES: usize = 4096;
/// Spins waiting for another thread to finish publishing a slot it claimed.
const MAX_WAIT_SPINS: u32 = 100_000;
/// Then yields of the core, for a claimer that was preempted (rare: only
/// when two threads meet a new node at once and one loses its core).
const MAX_WAIT_YIELDS: u32 = 10_000;

#[repr(C)]
struct Slot {
    /// Non-zero hash of the key once claimed.
    claim: AtomicU64,
    value: AtomicU64,
    /// parent | offset << 32.
    parent_offset: AtomicU64,
    /// kind + 1 once the key fields are written; 0 before.
    ready: AtomicU32,
    _pad: u32,
}

// SAFETY: zeroed, a slot is unclaimed.
unsafe impl ZeroIsEmpty for Slot {}

#[unsafe(link_section = "cudatrace_hot")]
static TABLE: LazyMapping<Slot> = LazyMapping::with_lean_len(SLOTS, LEAN_SLOTS);

/// Slots under an address-space limit (2 MiB): frames past what it holds
/// are not stored, and their events take the stack so far.
const LEAN_SLOTS: usize = 1 << 16;

/// Kind given to the keys that mark a Python code object as described
/// (never a frame kind).
pub(crate) const CODE_OBJECT_KEY: u8 = 0x80;

fn hash(kind: u8, value: u64, parent: u32, offset: u32) -> u64 {
    let mut h = value.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^= (u64::from(parent) | u64::from(offset) << 32).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    h ^= u64::from(kind).wrapping_mul(0x1656_67B1_9E37_79F9);
    h ^= h >> 29;
    h | 1
}

/// The id of node (kind, value, parent, offset), and whether this call
/// added it. `None` when the table is full or cannot be mapped.
pub(crate) fn intern(kind: u8, value: u64, parent: u32, offset: u32) -> Option<(u32, bool)> {
    let table = TABLE.get()?;
    let claim = hash(kind, value, parent, offset);
    let parent_offset = u64::from(parent) | u64::from(offset) << 32;
    let slots = table.len();
    let start = (claim >> 12) as usize % slots;
    for probe in 0..MAX_PROBES {
        let index = (start + probe) % slots;
        let slot = &table[index];
        let mut seen = slot.claim.load(Ordering::Acquire);
        if seen == 0 {
            match slot
                .claim
                .compare_exchange(0, claim, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    slot.value.store(value, Ordering::Relaxed);
                    slot.parent_offset.store(parent_offset, Ordering::Relaxed);
                    slot.ready.store(u32::from(kind) + 1, Ordering::Release);
                    return Some((index as u32 + 1, true));
                }
                Err(current) => seen = current,
            }
        }
        if seen != claim {
            continue;
        }
        let mut spins = 0;
        let ready = loop {
            let ready = slot.ready.load(Ordering::Acquire);
            if ready != 0 || spins == MAX_WAIT_SPINS + MAX_WAIT_YIELDS {
                break ready;
            }
            spins += 1;
            if spins < MAX_WAIT_SPINS {
                std::hint::spin_loop();
            } else {
                // The claimer was preempted between its claim and its
                // publication: give it the core rather than give up, which
                // would intern the node again under a second id.
                std::thread::yield_now();
            }
        };
        if ready == u32::from(kind) + 1
            && slot.value.load(Ordering::Relaxed) == value
            && slot.parent_offset.load(Ordering::Relaxed) == parent_offset
        {
            return Some((index as u32 + 1, false));
        }
    }
    None
}

/// Publishes a node to the spool.
pub(crate) fn write_node(id: u32, kind: u8, value: u64, parent: u32, offset: u32) {
    let seq = spool_writer::reserve_seq();
    spool_writer::write(
        seq,
        RawRecord {
            address: value,
            size: u64::from(parent),
            stream: u64::from(id),
            arg1: u64::from(offset),
            arg2: u64::from(kind),
            tid: current_tid(),
            op: Op::StackNode as u8,
            kind: Kind::Device as u8,
            api: Api::Unknown as u8,
            device: -1,
            ..RawRecord::default()
        },
    );
}

/// Publishes a blob as a run of pieces.
pub(crate) fn write_blob(kind: u8, key: u64, blob: &[u8]) {
    let total = blob.len().min(cudatrace_events::stacks::MAX_BLOB_BYTES);
    for (i, piece) in blob[..total].chunks(BLOB_PIECE_BYTES).enumerate() {
        let [size, stream, arg2] = BlobPiece::payload_words(piece);
        let seq = spool_writer::reserve_seq();
        spool_writer::write(
            seq,
            RawRecord {
                address: key,
                size,
                stream,
                arg1: (i * BLOB_PIECE_BYTES) as u64 | (total as u64) << 32,
                arg2,
                tid: current_tid(),
                op: Op::Blob as u8,
                kind: Kind::Device as u8,
                api: Api::Unknown as u8,
                device: kind as i8,
                ..RawRecord::default()
            },
        );
    }
}

/// In a forked child: nodes were published to the parent's spool, so the
/// child starts an empty table and publishes the nodes it uses again.
pub(crate) fn forget_parent_table() {
    TABLE.forget();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_node_gets_the_same_id_from_many_threads_and_different_nodes_differ() {
        let ids: Vec<Vec<(u32, bool)>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| (0..1000u64).map(|i| intern(0, 0x4000 + i, 7, 0).unwrap()).collect()))
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for i in 0..1000 {
            let id = ids[0][i].0;
            assert!(ids.iter().all(|thread| thread[i].0 == id));
            assert_eq!(
                ids.iter().filter(|thread| thread[i].1).count(),
                1,
                "exactly one thread adds node {i}"
            );
        }
        let distinct: std::collections::HashSet<u32> = ids[0].iter().map(|&(id, _)| id).collect();
        assert_eq!(distinct.len(), 1000);
        assert_ne!(
            intern(1, 0x4000, 7, 0).unwrap().0,
            ids[0][0].0,
            "the kind is part of the key"
        );
        assert_ne!(
            intern(0, 0x4000, 8, 0).unwrap().0,
            ids[0][0].0,
            "the parent is part of the key"
        );
        assert_ne!(
            intern(0, 0x4000, 7, 2).unwrap().0,
            ids[0][0].0,
            "the offset is part of the key"
        );
    }
}
