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

use super::pickle::Pickler;
use torch_blocks::{Allocation, Block, TorchBlocks, SMALL_SEGMENT};

mod torch_blocks;
use crate::analysis::{
    tensor_status_line, Change, Consumer, Frame, ProcessIndex, ProcessMemory, Replay, Step, TraceIndex, Window,
};
use crate::system::progress::Progress;
use crate::system::wording::{bytes, count};
use cudatrace_events::tensors::{self, Action};
use cudatrace_events::{Event, Kind, Op};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufWriter, Seek, Write};
use std::path::{Path, PathBuf};

/// Segments above this size are "large" ones, as PyTorch's allocator names them.
const SMALL_SEGMENT_LIMIT: u64 = 1 << 20;

/// One trace entry, before it is pickled.
#[derive(Clone, Copy, Debug)]
struct Entry {
    action: &'static str,
    address: u64,
    size: u64,
    stream: u64,
    stack: u32,
    time_ns: u64,
    /// For `oom`.
    device_free: u64,
}

/// A segment as the viewer sees it.
#[derive(Clone, Debug)]
struct Segment {
    size: u64,
    device: u8,
    stream: u64,
    stack: u32,
    /// A VMM mapping (part of an expandable segment), not an allocation.
    mapped: bool,
    /// For stream-ordered allocations from a pool of the program's own.
    pool: u64,
    /// One of PyTorch's segments: its blocks are the tensors in
    /// [`ViewerState::torch`], not one block covering it.
    torch: bool,
}

/// The segments the entries written so far lead to, per address. Entries
/// pass through it, so a free is written only for a block it holds.
#[derive(Default)]
struct ViewerState {
    segments: BTreeMap<u64, Segment>,
    /// The blocks of PyTorch's segments.
    torch: TorchBlocks,
}

impl ViewerState {
    /// Adds a segment, first freeing any it would overlap (their frees were
    /// never seen); returns the entries that make the change.
    fn add(&mut self, address: u64, segment: Segment, time_ns: u64, stack: u32, out: &mut Vec<(u8, Entry)>) {
        if segment.size == 0 {
            return;
        }
        let end = address.saturating_add(segment.size);
        let mut overlapping = Vec::new();
        for (&start, s) in self.segments.range(..end).rev() {
            if start >= address || start.saturating_add(s.size) > address {
                overlapping.push(start);
            }
            if start < address {
                break;
            }
        }
        for start in overlapping {
            self.remove(start, time_ns, stack, out);
        }
        let entry = Entry {
            action: if segment.mapped { "segment_map" } else { "segment_alloc" },
            address,
            size: segment.size,
            stream: segment.stream,
            stack: segment.stack,
            time_ns,
            device_free: 0,
        };
        out.push((segment.device, entry));
        if segment.torch {
            self.torch.segment_added(address, segment.size, segment.mapped);
        } else {
            out.push((
                segment.device,
                Entry {
                    action: "alloc",
                    ..entry
                },
            ));
        }
        self.segments.insert(address, segment);
    }

    /// The PyTorch segment holding `address`, if one does.
    fn torch_segment_at(&self, address: u64) -> Option<&Segment> {
        let (&start, segment) = self.segments.range(..=address).next_back()?;
        (segment.torch && address < start.saturating_add(segment.size)).then_some(segment)
    }

    /// Applies one of PyTorch's actions; returns whether it named a block
    /// outside PyTorch's segments (which the viewer cannot place).
    fn tensor(&mut self, event: &Event, action: Action, out: &mut Vec<(u8, Entry)>) -> bool {
        let entry = Entry {
            action: action.name(),
            address: event.address,
            size: event.size,
            stream: event.stream,
            stack: event.stack,
            time_ns: event.time_ns,
            device_free: 0,
        };
        match action {
            Action::Alloc => {
                let Some(segment) = self.torch_segment_at(event.address) else {
                    return true;
                };
                let device = segment.device;
                let allocation = Allocation {
                    requested: event.size,
                    stream: event.stream,
                    stack: event.stack,
                    small_pool: !segment.mapped && segment.size == SMALL_SEGMENT,
                    expandable: segment.mapped,
                };
                if let Some(old) = self.torch.allocate(event.address, allocation) {
                    // Its free was never seen: end it first.
                    let free = Entry {
                        size: old.requested,
                        stack: 0,
                        ..entry
                    };
                    out.push((
                        device,
                        Entry {
                            action: "free_requested",
                            ..free
                        },
                    ));
                    out.push((
                        device,
                        Entry {
                            action: "free_completed",
                            ..free
                        },
                    ));
                }
                out.push((device, entry));
            }
            Action::FreeRequested | Action::FreeCompleted => {
                let Some(device) = self.torch_segment_at(event.address).map(|s| s.device) else {
                    return false;
                };
                let freed = if action == Action::FreeRequested {
                    self.torch.request_free(event.address)
                } else {
                    self.torch.complete_free(event.address)
                };
                let Some(tensor) = freed else {
                    return false;
                };
                let entry = Entry {
                    size: tensor.requested,
                    stack: tensor.stack,
                    ..entry
                };
                if action == Action::FreeCompleted && !tensor.pending_free {
                    out.push((
                        device,
                        Entry {
                            action: "free_requested",
                            ..entry
                        },
                    ));
                }
                out.push((device, entry));
            }
            Action::Oom => {
                if let Some(device) = event.device {
                    let entry = Entry {
                        address: 0,
                        device_free: event.address,
                        ..entry
                    };
                    out.push((device, entry));
                }
            }
            // Segments come from the driver's events; snapshots are not memory.
            Action::SegmentAlloc
            | Action::SegmentFree
            | Action::SegmentMap
            | Action::SegmentUnmap
            | Action::Snapshot => {}
        }
        false
    }

    /// Removes the segment at `address`, if there is one.
    fn remove(&mut self, address: u64, time_ns: u64, stack: u32, out: &mut Vec<(u8, Entry)>) {
        let Some(segment) = self.segments.remove(&address) else {
            return;
        };
        let entry = Entry {
            action: "free_requested",
            address,
            size: segment.size,
            stream: segment.stream,
            stack,
            time_ns,
            device_free: 0,
        };
        if segment.torch {
            // Tensors still inside end with it (their frees were not seen).
            for (block_address, tensor) in self.torch.segment_removed(address, segment.size) {
                let free = Entry {
                    address: block_address,
                    size: tensor.requested,
                    stream: tensor.stream,
                    ..entry
                };
                if !tensor.pending_free {
                    out.push((segment.device, free));
                }
                out.push((
                    segment.device,
                    Entry {
                        action: "free_completed",
                        ..free
                    },
                ));
            }
        } else {
            out.push((segment.device, entry));
            out.push((
                segment.device,
                Entry {
                    action: "free_completed",
                    ..entry
                },
            ));
        }
        let action = if segment.mapped {
            "segment_unmap"
        } else {
            "segment_free"
        };
        out.push((segment.device, Entry { action, ..entry }));
    }
}

/// What the format has no place for, counted.
#[derive(Default)]
struct LeftOut {
    pinned_host: (u64, u64),
    arrays: (u64, u64),
    ipc_imports: u64,
    unknown_device: (u64, u64),
    unmapped_vmm_at_end: (u64, u64),
    before_window: u64,
    over_max_events: u64,
    /// Tensors PyTorch placed outside any segment it was seen to make.
    tensors_outside: u64,
    /// Some segment was PyTorch's.
    torch_segments: bool,
    /// Tensors whose blocks fit no free block of PyTorch's default rules.
    block_misses: u64,
}

/// One process's snapshot being written.
pub struct ProcessSnapshot {
    process: usize,
    path: PathBuf,
    memory: ProcessMemory,
    state: ViewerState,
    /// Per device: the pickled trace entries, in a file of their own until
    /// the snapshot is put together.
    devices: BTreeMap<u8, Fragment>,
    left_out: LeftOut,
    /// Entries in the window, from the counting pass; entries still to
    /// skip to keep the newest `--max-events`.
    to_skip: u64,
    entries_written: u64,
    /// The highest device any entry was for, written or not.
    highest_device: Option<u8>,
    /// Sequence numbers of the driver events that made PyTorch's segments.
    claimed: HashSet<u64>,
}

impl ProcessSnapshot {
    /// Where its pickle goes.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One device's trace entries, pickled into a temporary file.
struct Fragment {
    pickler: Pickler<BufWriter<File>>,
    /// Memo indices of the strings and frame lists this fragment wrote.
    strings: HashMap<&'static str, u32>,
    frames: HashMap<u32, u32>,
}

/// Memo indices handed out across a snapshot and its fragments.
pub struct Memo {
    next: u32,
    /// Frame lists memoized by any fragment (all precede the segments).
    frames: HashMap<u32, u32>,
}

/// Snapshots made, each still to be put together into its file.
pub struct Snapshots {
    /// One per process asked for.
    pub pickles: Vec<ProcessSnapshot>,
    /// Memo indices shared by all of them.
    pub memo: Memo,
    /// Blocks of events that could not be read again.
    pub stream_errors: Vec<String>,
}

/// Replays `index` for the processes in `targets` (each with the path its
/// pickle will have), covering `window` and, with `max_events`, only the
/// newest entries of each. The entries go to temporary files in `folder`.
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
            left_out: LeftOut::default(),
            to_skip: 0,
            entries_written: 0,
            highest_device: None,
            claimed: HashSet::new(),
        });
    }
    if selected.iter().any(|&p| index.processes[p].tensor_actions > 0) {
        claim_torch_segments(index, &selected, &mut snapshots, progress)?;
        progress.next_pass("snapshot");
    }
    if let Some(max) = max_events {
        for (process, entries) in count_entries(index, &selected, window, &snapshots, progress)? {
            if let Some(snapshot) = &mut snapshots[process] {
                snapshot.to_skip = entries.saturating_sub(max);
            }
        }
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
    };
    let replayed = Replay::new(index, progress)
        .window(window)
        .only(&selected)
        .run(&mut [&mut writer])?;
    let mut pickles: Vec<ProcessSnapshot> = snapshots.into_iter().flatten().collect();
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

/// The first pass of a trace with tensors: which driver allocations and
/// mappings are PyTorch's segments, so that their blocks are its tensors.
/// A segment action names the `cuMemAlloc` at its address; a mapped range
/// of an expandable segment, every `cuMemMap` inside it.
fn claim_torch_segments(
    index: &TraceIndex,
    selected: &[usize],
    snapshots: &mut [Option<ProcessSnapshot>],
    progress: &Progress,
) -> io::Result<()> {
    #[derive(Default)]
    struct Seen {
        allocations: HashMap<u64, u64>,
        mappings: BTreeMap<u64, u64>,
    }
    let mut seen: HashMap<usize, Seen> = HashMap::new();
    let mut claim = |step: &Step| {
        let (process, event) = (step.process, step.event);
        let Some(snapshot) = &mut snapshots[process] else {
            return;
        };
        if step.info.tensor_actions == 0 {
            return;
        }
        let seen = seen.entry(process).or_default();
        match (event.op, tensors::action_of(event)) {
            (Op::Alloc, _) if event.kind == Kind::Device => {
                seen.allocations.insert(event.address, event.seq);
            }
            (Op::Map, _) => {
                seen.mappings.insert(event.address, event.seq);
            }
            (Op::Unmap, _) => {
                let end = event.address.saturating_add(event.size);
                let gone: Vec<u64> = seen.mappings.range(event.address..end).map(|(&a, _)| a).collect();
                for address in gone {
                    seen.mappings.remove(&address);
                }
            }
            (_, Some(Action::SegmentAlloc)) => {
                if let Some(&seq) = seen.allocations.get(&event.address) {
                    snapshot.claimed.insert(seq);
                }
            }
            (_, Some(Action::SegmentMap)) => {
                let end = event.address.saturating_add(event.size);
                snapshot
                    .claimed
                    .extend(seen.mappings.range(event.address..end).map(|(_, &seq)| seq));
            }
            _ => {}
        }
    };
    Replay::new(index, progress)
        .only(selected)
        .events_only()
        .run(&mut [&mut claim])?;
    Ok(())
}

/// The entries each selected process would write in the window.
fn count_entries(
    index: &TraceIndex,
    selected: &[usize],
    window: Window,
    snapshots: &[Option<ProcessSnapshot>],
    progress: &Progress,
) -> io::Result<Vec<(usize, u64)>> {
    let mut states: HashMap<usize, (ViewerState, u64)> = HashMap::new();
    let mut entries = Vec::new();
    let mut count = |step: &Step| {
        let Some(snapshot) = &snapshots[step.process] else {
            return;
        };
        let (state, counted) = states.entry(step.process).or_default();
        entries.clear();
        entries_of(
            step.event,
            step.changes,
            &snapshot.claimed,
            state,
            &mut entries,
            &mut LeftOut::default(),
        );
        if !step.before_window {
            *counted += entries.len() as u64;
        }
    };
    Replay::new(index, progress)
        .window(window)
        .only(selected)
        .run(&mut [&mut count])?;
    Ok(states.into_iter().map(|(p, (_, n))| (p, n)).collect())
}

/// The entries `changes` (made by `event`) lead to, through `state`.
fn entries_of(
    event: &Event,
    changes: &[Change],
    claimed: &HashSet<u64>,
    state: &mut ViewerState,
    out: &mut Vec<(u8, Entry)>,
    left_out: &mut LeftOut,
) {
    if event.op == Op::Alloc && event.kind == Kind::IpcImport {
        left_out.ipc_imports += 1;
    }
    if let Some(action) = tensors::action_of(event) {
        if state.tensor(event, action, out) {
            left_out.tensors_outside += 1;
        }
        return;
    }
    let torch = claimed.contains(&event.seq);
    left_out.torch_segments |= torch;
    for change in changes {
        match change {
            Change::Allocated(a) => match (a.kind, a.device) {
                (Kind::HostPinned, _) => add(&mut left_out.pinned_host, a.size),
                (Kind::Array, _) => add(&mut left_out.arrays, a.size),
                (Kind::VmmPhysical, _) => {}
                (_, None) => add(&mut left_out.unknown_device, a.size),
                (_, Some(device)) => {
                    let segment = Segment {
                        size: a.size,
                        device,
                        stream: a.stream,
                        stack: a.stack,
                        mapped: false,
                        pool: if a.kind == Kind::Pool {
                            event.pool().unwrap_or(0)
                        } else {
                            0
                        },
                        torch,
                    };
                    state.add(a.address, segment, a.time_ns, a.stack, out);
                }
            },
            Change::Freed { allocation: a, .. } => {
                if !matches!(a.kind, Kind::HostPinned | Kind::Array | Kind::VmmPhysical) && a.device.is_some() {
                    state.remove(a.address, event.time_ns, event.stack, out);
                }
            }
            Change::Mapped {
                address,
                size,
                physical,
            } => {
                let device = physical.as_ref().and_then(|p| p.device).or(event.device);
                let Some(device) = device else {
                    add(&mut left_out.unknown_device, *size);
                    continue;
                };
                let segment = Segment {
                    size: *size,
                    device,
                    stream: 0,
                    stack: physical.as_ref().map_or(event.stack, |p| p.stack),
                    mapped: true,
                    pool: 0,
                    torch,
                };
                state.add(*address, segment, event.time_ns, event.stack, out);
            }
            Change::Unmapped { address, .. } => state.remove(*address, event.time_ns, event.stack, out),
            Change::OutOfMemory {
                requested, device_free, ..
            } => {
                if let Some(device) = event.device {
                    let entry = Entry {
                        action: "oom",
                        address: 0,
                        size: *requested,
                        stream: event.stream,
                        stack: event.stack,
                        time_ns: event.time_ns,
                        device_free: *device_free,
                    };
                    out.push((device, entry));
                }
            }
            Change::Reserved { .. } | Change::Unreserved { .. } => {}
        }
    }
}

fn add(counter: &mut (u64, u64), size: u64) {
    counter.0 += 1;
    counter.1 += size;
}

/// The last pass: pickles the entries of the events inside the window,
/// as a consumer of the replay.
struct EntryWriter<'a> {
    index: &'a TraceIndex,
    snapshots: &'a mut [Option<ProcessSnapshot>],
    folder: &'a Path,
    memo: &'a mut Memo,
    entries: Vec<(u8, Entry)>,
}

impl Consumer for EntryWriter<'_> {
    fn step(&mut self, step: &Step) -> io::Result<()> {
        let Some(snapshot) = &mut self.snapshots[step.process] else {
            return Ok(());
        };
        let entries = &mut self.entries;
        entries.clear();
        entries_of(
            step.event,
            step.changes,
            &snapshot.claimed,
            &mut snapshot.state,
            entries,
            &mut snapshot.left_out,
        );
        if entries.is_empty() {
            return Ok(());
        }
        let highest = entries.iter().map(|&(device, _)| device).max();
        snapshot.highest_device = snapshot.highest_device.max(highest);
        if step.before_window {
            snapshot.left_out.before_window += entries.len() as u64;
            return Ok(());
        }
        if snapshot.to_skip > 0 {
            let skipped = (entries.len() as u64).min(snapshot.to_skip);
            snapshot.to_skip -= skipped;
            snapshot.left_out.over_max_events += entries.len() as u64;
            return Ok(());
        }
        for &(device, entry) in entries.iter() {
            let fragment = match snapshot.devices.entry(device) {
                std::collections::btree_map::Entry::Occupied(slot) => slot.into_mut(),
                std::collections::btree_map::Entry::Vacant(slot) => slot.insert(Fragment::create(self.folder)?),
            };
            fragment.write_entry(self.index, step.info, &entry, self.memo)?;
            snapshot.entries_written += 1;
        }
        Ok(())
    }
}

impl Fragment {
    fn create(folder: &Path) -> io::Result<Fragment> {
        let file = anonymous_file(folder)?;
        let mut pickler = Pickler::fragment(BufWriter::with_capacity(1 << 20, file));
        pickler.begin_list()?;
        Ok(Fragment {
            pickler,
            strings: HashMap::new(),
            frames: HashMap::new(),
        })
    }

    fn write_entry(
        &mut self,
        index: &TraceIndex,
        info: &ProcessIndex,
        entry: &Entry,
        memo: &mut Memo,
    ) -> io::Result<()> {
        self.pickler.item()?;
        self.pickler.begin_dict()?;
        self.key_str("action", entry.action, memo)?;
        if entry.action == "oom" {
            self.key(memo, "device_free", |p| p.uint(entry.device_free))?;
        } else {
            self.key(memo, "addr", |p| p.uint(entry.address))?;
        }
        self.key(memo, "size", |p| p.uint(entry.size))?;
        self.key(memo, "stream", |p| p.uint(entry.stream))?;
        self.key(memo, "time_us", |p| p.uint(index.epoch_us(entry.time_ns)))?;
        self.pickler.item()?;
        self.string("frames", memo)?;
        write_frames(&mut self.pickler, index, info, entry.stack, &mut self.frames, memo)?;
        self.pickler.item_done()?;
        self.pickler.end()?;
        self.pickler.item_done()
    }

    fn string(&mut self, text: &'static str, memo: &mut Memo) -> io::Result<()> {
        match self.strings.get(text) {
            Some(&id) => self.pickler.get(id),
            None => {
                self.pickler.str(text)?;
                let id = memo.next;
                memo.next += 1;
                self.strings.insert(text, id);
                self.pickler.put(id)
            }
        }
    }

    fn key(
        &mut self,
        memo: &mut Memo,
        key: &'static str,
        value: impl FnOnce(&mut Pickler<BufWriter<File>>) -> io::Result<()>,
    ) -> io::Result<()> {
        self.pickler.item()?;
        self.string(key, memo)?;
        value(&mut self.pickler)?;
        self.pickler.item_done()
    }

    fn key_str(&mut self, key: &'static str, value: &'static str, memo: &mut Memo) -> io::Result<()> {
        self.pickler.item()?;
        self.string(key, memo)?;
        self.string(value, memo)?;
        self.pickler.item_done()
    }

    /// The fragment's bytes, from the start.
    fn into_file(self) -> io::Result<File> {
        let mut file = self.pickler.into_fragment()?.into_inner().map_err(|e| e.into_error())?;
        file.rewind()?;
        Ok(file)
    }
}

/// A file in `folder` with no name: it goes away with its handle.
fn anonymous_file(folder: &Path) -> io::Result<File> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = folder.join(format!(".cudatrace-snapshot-{}-{n}.part", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// Writes the frame list of `stack` (innermost first), memoized: the
/// viewer never changes frame lists, so they may be shared.
fn write_frames<W: Write>(
    pickler: &mut Pickler<W>,
    index: &TraceIndex,
    info: &ProcessIndex,
    stack: u32,
    local: &mut HashMap<u32, u32>,
    memo: &mut Memo,
) -> io::Result<()> {
    if let Some(&id) = local.get(&stack) {
        return pickler.get(id);
    }
    pickler.begin_list()?;
    for frame in index.frames(info, stack) {
        pickler.push(|p| write_frame(p, &frame))?;
    }
    pickler.end()?;
    let id = memo.next;
    memo.next += 1;
    pickler.put(id)?;
    local.insert(stack, id);
    memo.frames.insert(stack, id);
    Ok(())
}

fn write_frame<W: Write>(pickler: &mut Pickler<W>, frame: &Frame) -> io::Result<()> {
    pickler.begin_dict()?;
    let filename = frame
        .file
        .clone()
        .or_else(|| frame.module.clone())
        .unwrap_or_else(|| "??".into());
    pickler.entry("filename", |p| p.str(&filename))?;
    pickler.entry("line", |p| p.uint(u64::from(frame.line.unwrap_or(0))))?;
    pickler.entry("name", |p| p.str(&frame.function))?;
    pickler.end()
}

/// Puts one process's snapshot together into `file`; returns its size in bytes.
pub fn finish(index: &TraceIndex, mut snapshot: ProcessSnapshot, memo: &mut Memo, file: &mut File) -> io::Result<u64> {
    let info = &index.processes[snapshot.process];
    for allocation in snapshot.memory.live_device_memory() {
        if allocation.kind == Kind::VmmPhysical
            && !snapshot
                .memory
                .live_mappings()
                .any(|(_, _, p)| p.map(|p| p.address) == Some(allocation.address))
        {
            add(&mut snapshot.left_out.unmapped_vmm_at_end, allocation.size);
        }
    }
    let mut p = Pickler::new(BufWriter::with_capacity(1 << 20, file))?;
    p.begin_dict()?;
    // device_traces: one list per device, up to the highest one used.
    let highest = snapshot
        .devices
        .keys()
        .copied()
        .chain(snapshot.state.segments.values().map(|s| s.device))
        .chain(snapshot.highest_device)
        .max();
    p.item()?;
    p.str("device_traces")?;
    p.begin_list()?;
    let mut fragments = std::mem::take(&mut snapshot.devices);
    for device in 0..=highest.map_or(-1, i32::from) {
        match fragments.remove(&(device as u8)) {
            Some(fragment) => p.splice(&mut fragment.into_file()?)?,
            None => p.push(|p| {
                p.begin_list()?;
                p.end()
            })?,
        }
    }
    p.end()?;
    p.item_done()?;
    // segments: what the entries lead to.
    p.item()?;
    p.str("segments")?;
    p.begin_list()?;
    for (address, run) in segment_runs(&snapshot.state) {
        p.item()?;
        write_segment(&mut p, index, info, address, &run, &snapshot.state.torch, memo)?;
        p.item_done()?;
    }
    p.end()?;
    p.item_done()?;
    p.item()?;
    p.str("allocator_settings")?;
    snapshot.left_out.block_misses = snapshot.state.torch.misses;
    write_notes(
        &mut p,
        &snapshot.left_out,
        snapshot.entries_written,
        tensor_status_line(info),
    )?;
    p.item_done()?;
    p.end()?;
    let written = p.written();
    let mut out = p.finish()?;
    out.flush()?;
    Ok(written)
}

/// The final segments: allocations one each, and VMM mappings merged
/// into contiguous runs, as PyTorch's expandable segments are.
fn segment_runs(state: &ViewerState) -> Vec<(u64, Vec<(u64, Segment)>)> {
    let mut runs: Vec<(u64, Vec<(u64, Segment)>)> = Vec::new();
    for (&address, segment) in &state.segments {
        if let Some((_, blocks)) = runs.last_mut() {
            let (last_address, last) = blocks.last().expect("a run has a block");
            let joins = segment.mapped
                && last.mapped
                && last.device == segment.device
                && last.torch == segment.torch
                && last_address + last.size == address;
            if joins {
                blocks.push((address, segment.clone()));
                continue;
            }
        }
        runs.push((address, vec![(address, segment.clone())]));
    }
    runs
}

fn write_segment<W: Write>(
    p: &mut Pickler<W>,
    index: &TraceIndex,
    info: &ProcessIndex,
    address: u64,
    pieces: &[(u64, Segment)],
    torch: &TorchBlocks,
    memo: &mut Memo,
) -> io::Result<()> {
    let first = &pieces[0].1;
    let total: u64 = pieces.iter().map(|(_, s)| s.size).sum();
    let blocks = segment_blocks(address, pieces, torch);
    let sum = |states: &[&str]| -> u64 {
        blocks
            .iter()
            .filter(|b| states.contains(&b.state))
            .map(|b| b.size)
            .sum()
    };
    let allocated = sum(&["active_allocated"]);
    let active = sum(&["active_allocated", "active_pending_free"]);
    let requested: u64 = blocks
        .iter()
        .filter(|b| b.state != "inactive")
        .map(|b| b.requested)
        .sum();
    let mut frames = |p: &mut Pickler<W>, stack: u32| -> io::Result<()> {
        match memo.frames.get(&stack) {
            Some(&id) => p.get(id),
            None => write_frames(p, index, info, stack, &mut HashMap::new(), memo),
        }
    };
    p.begin_dict()?;
    p.entry("device", |p| p.uint(u64::from(first.device)))?;
    p.entry("address", |p| p.uint(address))?;
    p.entry("total_size", |p| p.uint(total))?;
    p.entry("allocated_size", |p| p.uint(allocated))?;
    p.entry("active_size", |p| p.uint(active))?;
    p.entry("requested_size", |p| p.uint(requested))?;
    p.entry("stream", |p| p.uint(first.stream))?;
    let kind = if total > SMALL_SEGMENT_LIMIT { "large" } else { "small" };
    p.entry("segment_type", |p| p.str(kind))?;
    p.entry("segment_pool_id", |p| {
        p.uint(0)?;
        p.uint(first.pool)?;
        p.tuple2()
    })?;
    p.entry("is_expandable", |p| p.bool(first.mapped))?;
    p.item()?;
    p.str("frames")?;
    frames(p, first.stack)?;
    p.item_done()?;
    p.item()?;
    p.str("blocks")?;
    p.begin_list()?;
    for block in &blocks {
        p.item()?;
        p.begin_dict()?;
        p.entry("address", |p| p.uint(block.address))?;
        p.entry("size", |p| p.uint(block.size))?;
        p.entry("requested_size", |p| p.uint(block.requested))?;
        p.entry("state", |p| p.str(block.state))?;
        p.item()?;
        p.str("frames")?;
        frames(p, block.stack)?;
        p.item_done()?;
        p.end()?;
        p.item_done()?;
    }
    p.end()?;
    p.item_done()?;
    p.end()
}

/// A block of a final segment, as the viewer's segment view lists it.
#[derive(Debug, PartialEq, Eq)]
struct FinalBlock {
    address: u64,
    size: u64,
    requested: u64,
    state: &'static str,
    stack: u32,
}

/// The blocks of a final segment at `address`: for one of PyTorch's, its
/// tensors and free blocks, tiling the segment as in PyTorch's own
/// snapshots; for any other, one block per allocation or mapping.
fn segment_blocks(address: u64, pieces: &[(u64, Segment)], torch: &TorchBlocks) -> Vec<FinalBlock> {
    if !pieces[0].1.torch {
        return pieces
            .iter()
            .map(|(a, s)| FinalBlock {
                address: *a,
                size: s.size,
                requested: s.size,
                state: "active_allocated",
                stack: s.stack,
            })
            .collect();
    }
    let end = address + pieces.iter().map(|(_, s)| s.size).sum::<u64>();
    torch
        .blocks_in(address, end)
        .into_iter()
        .map(|block| match block {
            Block::Tensor(address, tensor) => FinalBlock {
                address,
                size: tensor.size,
                requested: tensor.requested,
                state: if tensor.pending_free {
                    "active_pending_free"
                } else {
                    "active_allocated"
                },
                stack: tensor.stack,
            },
            Block::Free(address, size) => FinalBlock {
                address,
                size,
                requested: 0,
                state: "inactive",
                stack: 0,
            },
        })
        .collect()
}

/// `allocator_settings`: the viewer shows it as it is, so it says where
/// the snapshot came from and what it left out.
fn write_notes<W: Write>(
    p: &mut Pickler<W>,
    left_out: &LeftOut,
    entries: u64,
    tensors: Option<String>,
) -> io::Result<()> {
    let origin = if left_out.torch_segments {
        "written by cudatrace: the blocks of PyTorch's segments are its tensors, from its caching allocator; \
         every other allocation (cudaMalloc, cuMemAlloc, stream-ordered and managed allocations, VMM mappings) \
         is a segment of its own with one block"
    } else {
        "written by cudatrace from a driver-level trace: blocks are driver allocations (cudaMalloc, cuMemAlloc, \
         stream-ordered and managed allocations, VMM mappings), not tensors"
    };
    let mut notes = vec![
        origin.to_string(),
        format!("{} in the trace entries", count(entries, "entry", "entries")),
    ];
    notes.extend(tensors);
    if left_out.block_misses > 0 {
        notes.push(format!(
            "{} fit no free block under PyTorch's default splitting rules (other allocator settings?): \
             their blocks are shown at their requests rounded up to 512 bytes",
            count(left_out.block_misses, "tensor", "tensors")
        ));
    }
    if left_out.tensors_outside > 0 {
        notes.push(format!(
            "left out: {} PyTorch placed outside any segment seen made",
            count(left_out.tensors_outside, "tensor", "tensors")
        ));
    }
    let mut say = |what: &str, (n, size): (u64, u64)| {
        if n > 0 {
            notes.push(format!(
                "left out: {} of {what} ({})",
                count(n, "allocation", "allocations"),
                bytes(size)
            ));
        }
    };
    say("pinned host memory", left_out.pinned_host);
    say("CUDA arrays (keyed by handle, not address)", left_out.arrays);
    say("memory on a device the tracer could not learn", left_out.unknown_device);
    say(
        "VMM physical memory not mapped at the end",
        left_out.unmapped_vmm_at_end,
    );
    if left_out.ipc_imports > 0 {
        notes.push(format!(
            "left out: {} (memory of another process)",
            count(left_out.ipc_imports, "IPC import", "IPC imports")
        ));
    }
    if left_out.before_window > 0 {
        notes.push(format!(
            "left out: {} before --from",
            count(left_out.before_window, "entry", "entries")
        ));
    }
    if left_out.over_max_events > 0 {
        notes.push(format!(
            "left out: the oldest {} (--max-events)",
            count(left_out.over_max_events, "entry", "entries")
        ));
    }
    p.begin_dict()?;
    p.entry("cudatrace_notes", |p| {
        p.begin_list()?;
        for note in &notes {
            p.push(|p| p.str(note))?;
        }
        p.end()
    })?;
    p.end()
}
