//! Putting one process's snapshot together: its device traces (the
//! fragments spliced in), the final segments with their blocks, and the
//! notes on what the format has no place for.

use super::entries::add;
use super::fragment::{write_frames, Memo};
use super::process_snapshot::{LeftOut, ProcessSnapshot};
use super::torch_blocks::{Block, TorchBlocks};
use super::viewer_state::{Segment, ViewerState, SMALL_SEGMENT_LIMIT};
use crate::outputs::pickle::Pickler;
use crate::wording::tensor_status_line;
use crate::wording::{bytes, count};
use cudatrace_analysis::{ProcessIndex, TraceIndex};
use cudatrace_events::Kind;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};

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
pub(super) fn segment_runs(state: &ViewerState) -> Vec<(u64, Vec<(u64, Segment)>)> {
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

pub(super) fn write_segment<W: Write>(
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
        match memo.frames.get(&(info.start.process, stack)) {
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
pub(super) struct FinalBlock {
    pub(super) address: u64,
    pub(super) size: u64,
    pub(super) requested: u64,
    pub(super) state: &'static str,
    pub(super) stack: u32,
}

/// The blocks of a final segment at `address`: for one of PyTorch's, its
/// tensors and free blocks, tiling the segment as in PyTorch's own
/// snapshots; for any other, one block per allocation or mapping.
pub(super) fn segment_blocks(address: u64, pieces: &[(u64, Segment)], torch: &TorchBlocks) -> Vec<FinalBlock> {
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
pub(super) fn write_notes<W: Write>(
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
            "left out: the oldest {}, past each device's newest {} (--max-events all keeps every one)",
            count(left_out.over_max_events, "entry", "entries"),
            left_out.max_events.unwrap_or(0)
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
