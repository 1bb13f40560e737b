//! [`make`]: one replay of the trace into a snapshot per process.

use super::entries::{claim_torch_segments, write_kept_entries, EntryWriter};
use super::fragment::Memo;
use super::process_snapshot::{LeftOut, ProcessSnapshot};
use super::viewer_state::ViewerState;
use cudatrace_analysis::Progress;
use cudatrace_analysis::{each_on_a_thread, process_groups, ProcessMemory, Replay, TraceIndex, UnreadBlock, Window};
use std::collections::{BTreeMap, HashSet};
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
    /// One per process asked for, in process order.
    pub pickles: Vec<ProcessSnapshot>,
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
            memo: Memo::default(),
        });
    }
    if claims_segments(index, &selected) {
        claim_torch_segments(index, &selected, &mut snapshots, progress);
        progress.next_pass("snapshot");
    }
    // Each process's entries depend on its own events alone: groups of
    // processes are replayed at once, each on a thread of its own.
    let cores = cudatrace_analysis::helper_threads() + 1;
    let groups: Vec<Vec<usize>> = process_groups(index, cores)
        .into_iter()
        .map(|group| {
            group
                .into_iter()
                .filter(|&p| snapshots[p].is_some())
                .collect::<Vec<_>>()
        })
        .filter(|group| !group.is_empty())
        .collect();
    if groups.len() < 2 {
        let made = replay_group(index, &selected, snapshots, window, folder, progress, 1)?;
        return Ok(Snapshots::of_groups(vec![made]));
    }
    let count = groups.len();
    let mut shares: Vec<Vec<Option<ProcessSnapshot>>> = Vec::with_capacity(count);
    for group in &groups {
        let mut share: Vec<Option<ProcessSnapshot>> = (0..index.processes.len()).map(|_| None).collect();
        for &process in group {
            share[process] = snapshots[process].take();
        }
        shares.push(share);
    }
    let inputs: Vec<_> = groups
        .iter()
        .zip(shares)
        .map(|(group, share)| (group, share, progress.share()))
        .collect();
    let made = each_on_a_thread(inputs, |(group, share, progress)| {
        replay_group(index, group, share, window, folder, &progress, count)
    });
    Ok(Snapshots::of_groups(made.into_iter().collect::<io::Result<Vec<_>>>()?))
}

/// What one group's replay made: its processes' snapshots, and blocks that
/// could not be read again.
type GroupMade = (Vec<ProcessSnapshot>, Vec<UnreadBlock>);

/// Replays `group` (one of `replays` replays at once), writing the entries
/// of the processes that `snapshots` has.
fn replay_group(
    index: &TraceIndex,
    group: &[usize],
    mut snapshots: Vec<Option<ProcessSnapshot>>,
    window: Window,
    folder: &Path,
    progress: &Progress,
    replays: usize,
) -> io::Result<GroupMade> {
    let mut writer = EntryWriter {
        index,
        snapshots: &mut snapshots,
        folder,
        entries: Vec::new(),
        devices_seen: Vec::new(),
    };
    let replayed = Replay::new(index, progress)
        .window(window)
        .only(group)
        .alongside(replays)
        .run(&mut writer)?;
    let mut pickles: Vec<ProcessSnapshot> = snapshots.into_iter().flatten().collect();
    let mut memories = replayed.memories;
    for snapshot in &mut pickles {
        write_kept_entries(index, snapshot, folder)?;
        snapshot.memory = std::mem::take(&mut memories[snapshot.process]);
    }
    Ok((pickles, replayed.stream_errors))
}

impl Snapshots {
    /// The groups' snapshots together, in process order.
    fn of_groups(groups: Vec<GroupMade>) -> Snapshots {
        let mut pickles = Vec::new();
        let mut stream_errors = Vec::new();
        for (snapshots, errors) in groups {
            pickles.extend(snapshots);
            stream_errors.extend(errors);
        }
        pickles.sort_by_key(|snapshot| snapshot.process);
        // Told in file order, however the replay was shared out (as the
        // summary tells them).
        stream_errors.sort_by_key(UnreadBlock::offset);
        Snapshots { pickles, stream_errors }
    }
}
