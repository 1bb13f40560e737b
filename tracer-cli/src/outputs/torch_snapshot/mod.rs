//! PyTorch's memory snapshot: one pickle per process in the format of
//! `torch.cuda.memory._dump_snapshot()`, for PyTorch's memory visualizer
//! and `python -m torch.cuda._memory_viz`.
//!
//! Its blocks are driver allocations, not tensors: each device, pitched,
//! managed or stream-ordered allocation is one segment holding one block
//! that covers it exactly. VMM memory appears as PyTorch's expandable
//! segments do: each mapped range is a `segment_map` and a block, and the
//! final segments are the contiguous mapped runs. Pinned host memory, CUDA
//! arrays and IPC imports have no place in the format and are left out;
//! the snapshot's `allocator_settings` say what was.
//!
//! The final `segments` are the state the trace entries lead to, kept by
//! [`ViewerState`], so the viewer's backward replay finds every block
//! inside a segment at every step.

mod entries;
mod entry_ring;
mod fragment;
mod process_snapshot;
mod snapshot_file;
mod snapshots;
mod torch_blocks;
mod viewer_state;

pub use snapshot_file::finish;
pub use snapshots::{make, passes, Snapshots, DEFAULT_MAX_EVENTS};
