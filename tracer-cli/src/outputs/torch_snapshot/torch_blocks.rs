//! PyTorch's caching allocator's blocks, rebuilt from its actions, so that
//! a snapshot's segments list each tensor's block at its real size and the
//! free blocks between them, as PyTorch's own snapshots do.
//!
//! An allocation action carries the bytes asked for, not the block's size:
//! the block is the request rounded up to 512 bytes, or the whole free block
//! it was cut from when the rest would be too small to split off (under
//! 512 bytes in the small pool and in expandable segments, 1 MiB or less in
//! the large pool). Blocks are always cut from the start of a free block,
//! and a freed block merges with free neighbours of its segment. Replaying
//! those rules over the actions gives PyTorch's blocks exactly with the
//! default settings; where an action does not fit (other settings, such as
//! `roundup_power2_divisions`), the block keeps its rounded size and the
//! miss is counted.

use cudatrace_analysis::cut_range;
use std::collections::BTreeMap;

/// PyTorch's smallest block and its rounding.
const MIN_BLOCK: u64 = 512;
/// Largest remainder the large pool leaves unsplit.
const SMALL_SIZE: u64 = 1 << 20;
/// The size of every small-pool segment.
pub const SMALL_SEGMENT: u64 = 2 << 20;

/// A tensor's block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// The block's bytes.
    pub size: u64,
    /// The bytes asked for.
    pub requested: u64,
    /// Its stream.
    pub stream: u64,
    /// Call stack of the allocation.
    pub stack: u32,
    /// Freed by the program, waiting for streams that use it.
    pub pending_free: bool,
    /// The segment it belongs to (blocks merge only within one).
    group: u64,
}

/// A free block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Free {
    size: u64,
    group: u64,
}

/// One block of a segment, in address order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// A tensor.
    Tensor(u64, Tensor),
    /// Free bytes: (address, size).
    Free(u64, u64),
}

/// The blocks of PyTorch's segments.
#[derive(Debug, Default)]
pub struct TorchBlocks {
    tensors: BTreeMap<u64, Tensor>,
    free: BTreeMap<u64, Free>,
    /// Mapped pieces of expandable segments: start → (end, group).
    pieces: BTreeMap<u64, (u64, u64)>,
    /// Allocations that fit no free block of the model.
    pub misses: u64,
}

/// A new allocation's description.
#[derive(Clone, Copy, Debug)]
pub struct Allocation {
    /// Bytes asked for.
    pub requested: u64,
    /// Its stream.
    pub stream: u64,
    /// Its call stack.
    pub stack: u32,
    /// Its segment is a small-pool one.
    pub small_pool: bool,
    /// Its segment is expandable.
    pub expandable: bool,
}

fn round_size(requested: u64) -> u64 {
    requested.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK
}

impl TorchBlocks {
    /// A segment (or a mapped piece of an expandable one) came into being:
    /// one free block, joined to the piece it extends.
    pub fn segment_added(&mut self, address: u64, size: u64, expandable: bool) {
        let mut group = address;
        if expandable {
            if let Some((_, &(end, piece_group))) = self.pieces.range(..address).next_back() {
                if end == address {
                    group = piece_group;
                }
            }
            self.pieces.insert(address, (address + size, group));
        }
        self.free.insert(address, Free { size, group });
        self.merge_around(address);
    }

    /// A segment or mapped piece went away: its free blocks go, and its
    /// tensors, which are returned (their frees were never seen).
    pub fn segment_removed(&mut self, address: u64, size: u64) -> Vec<(u64, Tensor)> {
        let end = address.saturating_add(size);
        self.pieces.remove(&address);
        cut_range(&mut self.free, address, end, |f| f.size, |f, size| Free { size, ..f });
        let gone: Vec<u64> = self.tensors.range(address..end).map(|(&a, _)| a).collect();
        gone.into_iter()
            .map(|a| (a, self.tensors.remove(&a).expect("listed")))
            .collect()
    }

    /// A tensor was allocated at `address`; returns the tensor it replaced
    /// there, if one was never freed.
    pub fn allocate(&mut self, address: u64, allocation: Allocation) -> Option<Tensor> {
        let replaced = self.tensors.remove(&address);
        if let Some(old) = replaced {
            self.release(address, old);
        }
        let rounded = round_size(allocation.requested);
        let (size, group) = match self.free.get(&address).copied() {
            Some(free) if free.size >= rounded => {
                self.free.remove(&address);
                let remaining = free.size - rounded;
                let split = if allocation.small_pool || allocation.expandable {
                    remaining >= MIN_BLOCK
                } else {
                    remaining > SMALL_SIZE
                };
                if split {
                    self.free.insert(
                        address + rounded,
                        Free {
                            size: remaining,
                            group: free.group,
                        },
                    );
                    (rounded, free.group)
                } else {
                    (free.size, free.group)
                }
            }
            _ => {
                self.misses += 1;
                (rounded, address)
            }
        };
        let tensor = Tensor {
            size,
            requested: allocation.requested,
            stream: allocation.stream,
            stack: allocation.stack,
            pending_free: false,
            group,
        };
        self.tensors.insert(address, tensor);
        replaced
    }

    /// The program freed the tensor at `address`; returns it unless it was
    /// not known or already freed.
    pub fn request_free(&mut self, address: u64) -> Option<Tensor> {
        let tensor = self.tensors.get_mut(&address)?;
        if tensor.pending_free {
            return None;
        }
        tensor.pending_free = true;
        Some(*tensor)
    }

    /// The tensor's block at `address` is free for reuse; returns it.
    pub fn complete_free(&mut self, address: u64) -> Option<Tensor> {
        let tensor = self.tensors.remove(&address)?;
        self.release(address, tensor);
        Some(tensor)
    }

    /// The tensor at `address`, if live.
    #[cfg(test)]
    pub fn tensor_at(&self, address: u64) -> Option<&Tensor> {
        self.tensors.get(&address)
    }

    fn release(&mut self, address: u64, tensor: Tensor) {
        self.free.insert(
            address,
            Free {
                size: tensor.size,
                group: tensor.group,
            },
        );
        self.merge_around(address);
    }

    /// Merges the free block at `address` with free neighbours of its group.
    fn merge_around(&mut self, mut address: u64) {
        let Some(mut block) = self.free.get(&address).copied() else {
            return;
        };
        if let Some((&before, &prev)) = self.free.range(..address).next_back() {
            if before + prev.size == address && prev.group == block.group {
                self.free.remove(&address);
                address = before;
                block.size += prev.size;
                self.free.insert(address, block);
            }
        }
        let next_address = address + block.size;
        if let Some(next) = self.free.get(&next_address).copied() {
            if next.group == block.group {
                self.free.remove(&next_address);
                block.size += next.size;
                self.free.insert(address, block);
            }
        }
    }

    /// The blocks of [start, end), tensors and free ones, in address order,
    /// with any bytes the model does not cover as free.
    pub fn blocks_in(&self, start: u64, end: u64) -> Vec<Block> {
        let mut listed: Vec<Block> = self
            .tensors
            .range(start..end)
            .map(|(&a, &t)| Block::Tensor(a, t))
            .chain(
                self.free
                    .range(start..end)
                    .map(|(&a, f)| Block::Free(a, f.size.min(end - a))),
            )
            .collect();
        listed.sort_by_key(|b| match b {
            Block::Tensor(a, _) | Block::Free(a, _) => *a,
        });
        let mut blocks = Vec::with_capacity(listed.len());
        let mut at = start;
        for block in listed {
            let (address, size) = match block {
                Block::Tensor(a, t) => (a, t.size),
                Block::Free(a, s) => (a, s),
            };
            if address > at {
                blocks.push(Block::Free(at, address - at));
            }
            blocks.push(block);
            at = at.max(address + size);
        }
        if at < end {
            blocks.push(Block::Free(at, end - at));
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(requested: u64, small_pool: bool) -> Allocation {
        Allocation {
            requested,
            stream: 0,
            stack: 1,
            small_pool,
            expandable: false,
        }
    }

    #[test]
    fn small_pool_blocks_round_to_512_and_split_while_512_bytes_remain() {
        let mut blocks = TorchBlocks::default();
        let base = 0x7f00_0000_0000;
        blocks.segment_added(base, SMALL_SEGMENT, false);
        assert_eq!(blocks.allocate(base, alloc(100, true)), None);
        assert_eq!(blocks.tensor_at(base).unwrap().size, 512);
        blocks.allocate(base + 512, alloc(SMALL_SEGMENT - 512 - 256, true));
        // 256 bytes would remain: too few to split, so the block takes them.
        assert_eq!(blocks.tensor_at(base + 512).unwrap().size, SMALL_SEGMENT - 512);
        assert_eq!(blocks.misses, 0);
        blocks.complete_free(base);
        blocks.complete_free(base + 512);
        // Both frees merged back into one free block covering the segment.
        assert_eq!(
            blocks.blocks_in(base, base + SMALL_SEGMENT),
            vec![Block::Free(base, SMALL_SEGMENT)]
        );
    }

    #[test]
    fn large_pool_blocks_keep_a_remainder_of_up_to_one_mib() {
        let mut blocks = TorchBlocks::default();
        let base = 0x7f00_0000_0000;
        blocks.segment_added(base, 20 << 20, false);
        blocks.allocate(base, alloc((19 << 20) + 1000, false));
        // 1 MiB minus 1,024 bytes would remain: the block keeps it.
        assert_eq!(blocks.tensor_at(base).unwrap().size, 20 << 20);
        blocks.complete_free(base);
        blocks.allocate(base, alloc(4 << 20, false));
        assert_eq!(blocks.tensor_at(base).unwrap().size, 4 << 20);
        let tensor = *blocks.tensor_at(base).unwrap();
        assert_eq!(
            blocks.blocks_in(base, base + (20 << 20)),
            vec![Block::Tensor(base, tensor), Block::Free(base + (4 << 20), 16 << 20)]
        );
    }

    #[test]
    fn expandable_pieces_merge_and_unmapping_trims_free_blocks() {
        let mut blocks = TorchBlocks::default();
        let base = 0x7e00_0000_0000;
        let two = 2 << 20;
        blocks.segment_added(base, two, true);
        blocks.segment_added(base + two, two, true);
        // The two pieces are one free block: an allocation spans them.
        blocks.allocate(
            base,
            Allocation {
                expandable: true,
                ..alloc(3 << 20, false)
            },
        );
        assert_eq!(blocks.tensor_at(base).unwrap().size, 3 << 20);
        assert_eq!(blocks.misses, 0);
        blocks.complete_free(base);
        assert_eq!(blocks.segment_removed(base + two, two), vec![]);
        assert_eq!(blocks.blocks_in(base, base + two), vec![Block::Free(base, two)]);
        assert_eq!(
            blocks.blocks_in(base + two, base + 2 * two),
            vec![Block::Free(base + two, two)]
        );
        // An allocation the model has no free block for is counted.
        blocks.allocate(0x1000, alloc(10, true));
        assert_eq!(blocks.misses, 1);
    }
}
