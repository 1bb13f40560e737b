//! [`make`]: one replay of the trace into a snapshot per process.

use super::entries::{claim_torch_segments, write_kept_entries, EntryWriter};
use super::fragment::Memo;
use super::process_snapshot::{LeftOut, ProcessSnapshot};
use super::viewer_state::ViewerState;
use cudatrace_analysis::Progress;
use cudatrace_analysis::{ProcessMemory, Replay, TraceIndex, UnreadBlock, Window};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

/// Whether a snapshot of `processes` first claims PyTorch's segments: some
/// of them recorded tensors.
fn claims_segments(index: &TraceIndex, processes: &[usize]) -> bool {
    processes.iter().any(|&p| index.processes[p].tensor_actions > 0)
}

/// How many times [`make`] reads the trace's events for `processes`: the
/// claim of PyTorch's segments, the entries.
pub fn passes(index: &TraceIndex, processes: &[usize]) -> u64 {
    1 + u64::from(claims_segments(index, processes))
}

/// Snapshots made, each still to be put together into its file.
pub struct Snapshots {
    /// One per process asked for.
    pub pickles: Vec<ProcessSnapshot>,
    /// Memo indices shared by all of them.
    pub memo: Memo,
    /// Blocks of events that could not be read again.
    pub stream_errors: Vec<UnreadBlock>,
}

/// The newest entries of each device a snapshot keeps by default: the
/// figure PyTorch's documentation gives for `max_entries`, and what its
/// memory visualizer opens without lagging.
pub const DEFAULT_MAX_EVENTS: u64 = 100_000;

/// Replays `index` for the processes in `targets` (each with the path its
/// pickle will have), covering `window` and, with `max_events`, only the
/// newest entries of each device. The entries go to temporary files in `folder`.
pub fn make(
    index: &TraceIndex,
    targets: Vec<(usize, PathBuf)>,
    window: Window,
    max_events: Option<u64>,
    folder: &Path,
    progress: &Progress,
) -> io::Result<Snapshots> {
    let selected: Vec<usize> = targets.iter().map(|&(process, _)| process).collect();
    let mut snapshots: Vec<Option<ProcessSnapshot>> = (0..index.processes.len()).map(|_| None).collect();
    for (process, path) in targets {
        snapshots[process] = Some(ProcessSnapshot {
            process,
            path,
            memory: ProcessMemory::default(),
            state: ViewerState::default(),
            devices: BTreeMap::new(),
            left_out: LeftOut {
                max_events,
                ..LeftOut::default()
            },
            rings: BTreeMap::new(),
            entries_written: 0,
            highest_device: None,
            claimed: HashSet::new(),
        });
    }
    if claims_segments(index, &selected) {
        claim_torch_segments(index, &selected, &mut snapshots, progress);
        progress.next_pass("snapshot");
    }
    let mut memo = Memo {
        next: 0,
        frames: HashMap::new(),
    };
    let mut writer = EntryWriter {
        index,
        snapshots: &mut snapshots,
        folder,
        memo: &mut memo,
        entries: Vec::new(),
        devices_seen: Vec::new(),
    };
    let replayed = Replay::new(index, progress)
        .window(window)
        .only(&selected)
        .run(&mut writer)?;
    let mut pickles: Vec<ProcessSnapshot> = snapshots.into_iter().flatten().collect();
    for snapshot in &mut pickles {
        write_kept_entries(index, snapshot, folder, &mut memo)?;
    }
    let mut memories = replayed.memories;
    for snapshot in &mut pickles {
        snapshot.memory = std::mem::take(&mut memories[snapshot.process]);
    }
    Ok(Snapshots {
        pickles,
        memo,
        stream_errors: replayed.stream_errors,
    })
}
