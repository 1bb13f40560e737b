//! One process's snapshot while it is made, and what the format has no
//! place for.

use super::entry_ring::EntryRing;
use super::fragment::{Fragment, Memo};
use super::viewer_state::ViewerState;
use cudatrace_analysis::ProcessMemory;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// What the format has no place for, counted.
#[derive(Default)]
pub(super) struct LeftOut {
    pub(super) pinned_host: (u64, u64),
    pub(super) arrays: (u64, u64),
    pub(super) ipc_imports: u64,
    pub(super) unknown_device: (u64, u64),
    pub(super) unmapped_vmm_at_end: (u64, u64),
    pub(super) before_window: u64,
    /// Entries older than the newest `--max-events` of their device.
    pub(super) over_max_events: u64,
    /// `--max-events`: the newest entries kept of each device.
    pub(super) max_events: Option<u64>,
    /// Tensors PyTorch placed outside any segment it was seen to make.
    pub(super) tensors_outside: u64,
    /// Some segment was PyTorch's.
    pub(super) torch_segments: bool,
    /// Tensors whose blocks fit no free block of PyTorch's default rules.
    pub(super) block_misses: u64,
}

/// One process's snapshot being written.
pub struct ProcessSnapshot {
    pub(super) process: usize,
    pub(super) path: PathBuf,
    pub(super) memory: ProcessMemory,
    pub(super) state: ViewerState,
    /// Per device: the pickled trace entries, in a file of their own until
    /// the snapshot is put together.
    pub(super) devices: BTreeMap<u8, Fragment>,
    pub(super) left_out: LeftOut,
    /// Per device, with `--max-events`: its newest entries, pickled after
    /// the replay.
    pub(super) rings: BTreeMap<u8, EntryRing>,
    pub(super) entries_written: u64,
    /// The highest device any entry was for, written or not.
    pub(super) highest_device: Option<u8>,
    /// Sequence numbers of the driver events that made PyTorch's segments.
    pub(super) claimed: HashSet<u64>,
    /// The memo indices its pickle hands out: its own, so that its bytes
    /// do not depend on which processes were replayed with it.
    pub(super) memo: Memo,
}

impl ProcessSnapshot {
    /// Where its pickle goes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its memo indices, taken out to put the pickle together.
    pub fn take_memo(&mut self) -> Memo {
        std::mem::take(&mut self.memo)
    }

    /// How many entries were left out to keep each device's newest
    /// `--max-events`.
    pub fn over_max_events(&self) -> u64 {
        self.left_out.over_max_events
    }
}
