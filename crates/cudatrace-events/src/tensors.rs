//! What tensor records carry: the actions of PyTorch's CUDA caching
//! allocator, seen from inside the process by the trace tracker the library
//! attaches to it, and what became of that attach.
//!
//! A [`crate::Op::Tensor`] record is one `TraceEntry`: `arg1` the
//! [`Action`], `address` and `size` the block or segment (for
//! [`Action::Oom`], `address` is the device's free bytes), `stream` and
//! `device` as PyTorch gave them, `arg2` the memory pool (see
//! [`pool_word`]). Only [`Action::Alloc`] records carry a call stack.
//!
//! Segment actions name memory the driver events already account for:
//! tensors say how PyTorch cut its segments up, never add bytes of their own.

use crate::{Event, Op};

code_enum! {
    /// A caching-allocator action, numbered as PyTorch's `TraceEntry::Action`
    /// and named as its snapshots name it. A tensor record carries the code
    /// in a word.
    pub enum Action read from u64 {
        /// A block was handed to a tensor.
        Alloc = 0 => "alloc",
        /// A tensor's block was freed by the program; the allocator may still
        /// wait for streams that use it.
        FreeRequested = 1 => "free_requested",
        /// The block is free for reuse.
        FreeCompleted = 2 => "free_completed",
        /// A segment was allocated from the driver (`cudaMalloc`).
        SegmentAlloc = 3 => "segment_alloc",
        /// A segment was given back to the driver.
        SegmentFree = 4 => "segment_free",
        /// Pages of an expandable segment were mapped.
        SegmentMap = 5 => "segment_map",
        /// Pages of an expandable segment were unmapped.
        SegmentUnmap = 6 => "segment_unmap",
        /// The program asked PyTorch for a snapshot.
        Snapshot = 7 => "snapshot",
        /// An allocation failed for lack of memory.
        Oom = 8 => "oom",
    }
}

/// A tensor record's action, if the event is one.
pub fn action_of(event: &Event) -> Option<Action> {
    (event.op == Op::Tensor)
        .then(|| Action::from_code(event.arg1))
        .flatten()
}

/// PyTorch's `MempoolId_t` (two counters, both 0 for the default pool),
/// packed in one word: the first in the low half, the second in the high.
pub fn pool_word(first: u64, second: u64) -> u64 {
    (first & 0xffff_ffff) | (second << 32)
}

/// The two halves of [`pool_word`].
pub fn pool_of(word: u64) -> (u64, u64) {
    (word & 0xffff_ffff, word >> 32)
}

/// A PyTorch version as [`crate::Op::TensorStatus`] records carry it
/// (`major << 16 | minor << 8 | patch`).
pub fn version_word(major: u8, minor: u8, patch: u8) -> u64 {
    (u64::from(major) << 16) | (u64::from(minor) << 8) | u64::from(patch)
}

/// `major.minor.patch` of a [`version_word`].
pub fn version_text(word: u64) -> String {
    format!("{}.{}.{}", (word >> 16) & 0xff, (word >> 8) & 0xff, word & 0xff)
}

/// What a [`crate::Op::TensorStatus`] record says (its `arg1`).
pub mod status {
    /// The tracker was attached to the caching allocator.
    pub const ATTACHED: u64 = 1;
    /// The first segment action matched the driver call the hook saw:
    /// the layout is confirmed, and actions are recorded from here on.
    pub const CONFIRMED: u64 = 2;
    /// Tensors cannot be tracked in this process; `arg2` says why (a
    /// [`super::reason`]).
    pub const UNAVAILABLE: u64 = 3;
    /// Actions seen before the layout was confirmed, not recorded: `arg2`
    /// how many.
    pub const NOT_RECORDED: u64 = 4;
}

/// Why tensors are unavailable (the `arg2` of an
/// [`status::UNAVAILABLE`] record).
pub mod reason {
    /// The installed PyTorch's version has no known layout.
    pub const UNKNOWN_VERSION: u64 = 1;
    /// `libc10_cuda.so` lacks a symbol the attach needs (a stripped build?).
    pub const SYMBOLS_MISSING: u64 = 2;
    /// The allocator is not the native caching allocator (for example
    /// `backend:cudaMallocAsync`, whose allocations the driver hooks see).
    pub const NOT_NATIVE_ALLOCATOR: u64 = 3;
    /// The allocator's vtable does not hold the attach method where the
    /// known layout puts it.
    pub const VTABLE_MISMATCH: u64 = 4;
    /// The first segment action did not match the driver call just seen.
    pub const SEGMENT_MISMATCH: u64 = 5;
    /// An action carried a code or device no known layout has.
    pub const BAD_ENTRY: u64 = 6;
    /// Turned off by the user (`--tensors off`).
    pub const TURNED_OFF: u64 = 7;

    /// Words for a reason, as reports give it.
    pub fn text(reason: u64) -> &'static str {
        match reason {
            UNKNOWN_VERSION => "this PyTorch version's allocator layout is not known",
            SYMBOLS_MISSING => "libc10_cuda.so lacks the allocator's symbols",
            NOT_NATIVE_ALLOCATOR => {
                "the allocator is not PyTorch's native caching allocator (backend:cudaMallocAsync?); its driver allocations are traced"
            }
            VTABLE_MISMATCH => "the allocator's vtable does not match the known layout",
            SEGMENT_MISMATCH => "the allocator's first segment did not match the driver's allocation",
            BAD_ENTRY => "the allocator passed an entry no known layout has",
            TURNED_OFF => "turned off (--tensors off)",
            _ => "unknown reason",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_keep_pytorch_numbering_and_names() {
        assert_eq!(Action::from_code(0), Some(Action::Alloc));
        assert_eq!(Action::from_code(5), Some(Action::SegmentMap));
        assert_eq!(Action::from_code(8), Some(Action::Oom));
        assert_eq!(Action::from_code(9), None);
        assert_eq!(Action::from_code(u64::MAX), None);
        for (code, action) in Action::ALL.iter().enumerate() {
            assert_eq!(*action as usize, code);
        }
        assert_eq!(Action::FreeCompleted.name(), "free_completed");
    }

    #[test]
    fn pools_and_versions_round_trip() {
        assert_eq!(pool_of(pool_word(3, 0)), (3, 0));
        assert_eq!(pool_of(pool_word(0, 7)), (0, 7));
        assert_eq!(pool_word(0, 0), 0);
        assert_eq!(version_text(version_word(2, 11, 0)), "2.11.0");
        assert_eq!(version_word(2, 11, 1), 0x020b01);
    }
}
