//! `cudatrace flamegraph`: device bytes by call stack, at the peak or at
//! exit, as folded stacks or as an SVG drawn by `inferno`.
//!
//! Each stack is rooted at its process and device. Where PyTorch's tensors
//! were recorded, its segments are shown as the tensors in them, and what
//! its cache holds in no tensor is left out (it would take most of the
//! width and hide the tensors; the title gives its bytes) unless asked
//! for, as one frame, so that every byte is counted once; other memory
//! (cuBLAS workspaces, NCCL, the program's own) keeps its allocation stacks.

use crate::wording::device_label;
use crate::wording::stack_names;
use cudatrace_analysis::{
    headline_text, in_backward_pass, made_by_caching_allocator, tensors_stopped_midway, ByStack, FramesShown, Moment,
    ProcessIndex, Summary, TraceIndex, BACKWARD_PASS, NO_STACK,
};
use std::collections::BTreeMap;

/// The frame that holds the bytes PyTorch reserved but put in no tensor.
pub const CACHE_FRAME: &str = "PyTorch's cache (reserved, in no tensor)";

/// Escapes what would break a folded line: `;` separates frames, the last
/// space comes before the count, a newline ends the line. `%` is escaped so
/// that the escape can be undone.
pub fn escape_folded(name: &str, spaces: bool) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            ';' => out.push_str("%3B"),
            '\n' => out.push_str("%0A"),
            '\r' => out.push_str("%0D"),
            ' ' if spaces => out.push_str("%20"),
            c => out.push(c),
        }
    }
    out
}

/// The folded stacks of the whole trace, `(frames outermost first, bytes)`,
/// merged where equal and sorted, with PyTorch's cache as a frame of its
/// own if `with_cache`; and the cache's bytes.
pub fn folded_stacks(
    index: &TraceIndex,
    summary: &Summary,
    at: Moment,
    shown: FramesShown,
    with_cache: bool,
) -> (Vec<(Vec<String>, u64)>, u64) {
    let mut merged: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    let mut cache_bytes = 0u64;
    // At an out-of-memory failure, only the failing process's device.
    // (The command has checked that the failure exists and kept its state.)
    let failure = match at {
        Moment::Oom(n) => summary
            .oom(n)
            .ok()
            .map(|(process, device, oom)| (process, device, oom.held.as_deref())),
        _ => None,
    };
    let several_hosts = index.several_hosts();
    for (number, (info, process)) in index.processes.iter().zip(&summary.processes).enumerate() {
        let root = process_frame(info, several_hosts);
        for (device, stats) in &process.devices {
            let (by_stack, tensor_stacks) = match (at, failure) {
                (Moment::Oom(_), Some((p, d, Some(held)))) if p == number && d == *device => {
                    (&held.live_by_stack, held.tensors.as_ref().map(|(_, by_stack)| by_stack))
                }
                (Moment::Oom(_), _) => continue,
                (Moment::Peak, _) => (
                    &stats.peak_by_stack,
                    process.tensors.devices.get(device).map(|t| &t.peak_by_stack),
                ),
                (Moment::Exit, _) => (
                    &stats.live_by_stack,
                    process
                        .tensors
                        .devices
                        .get(device)
                        .filter(|_| !tensors_stopped_midway(info))
                        .map(|t| &t.live_by_stack),
                ),
            };
            let base = vec![root.clone(), device_label(*device)];
            let mut segments_bytes = 0u64;
            for (&stack, &(bytes, _)) in by_stack {
                if tensor_stacks.is_some() && made_by_caching_allocator(&index.all_frames(info, stack)) {
                    segments_bytes += bytes;
                    continue;
                }
                add(&mut merged, &base, index, info, stack, shown, bytes);
            }
            if let Some(tensor_stacks) = tensor_stacks {
                let tensor_bytes = add_all(&mut merged, &base, index, info, tensor_stacks, shown);
                let cache = segments_bytes.saturating_sub(tensor_bytes);
                cache_bytes += cache;
                if cache > 0 && with_cache {
                    let mut frames = base.clone();
                    frames.push(CACHE_FRAME.to_string());
                    *merged.entry(frames).or_default() += cache;
                }
            }
        }
    }
    let mut stacks: Vec<(Vec<String>, u64)> = merged.into_iter().filter(|(_, bytes)| *bytes > 0).collect();
    stacks.sort();
    (stacks, cache_bytes)
}

/// Adds every stack of `by_stack`; returns their bytes.
fn add_all(
    merged: &mut BTreeMap<Vec<String>, u64>,
    base: &[String],
    index: &TraceIndex,
    info: &ProcessIndex,
    by_stack: &ByStack,
    shown: FramesShown,
) -> u64 {
    let mut total = 0;
    for (&stack, &(bytes, _)) in by_stack {
        add(merged, base, index, info, stack, shown, bytes);
        total += bytes;
    }
    total
}

fn add(
    merged: &mut BTreeMap<Vec<String>, u64>,
    base: &[String],
    index: &TraceIndex,
    info: &ProcessIndex,
    stack: u32,
    shown: FramesShown,
    bytes: u64,
) {
    let frames = index.frames(info, stack);
    let mut names = base.to_vec();
    // The backward pass is one tower, named, as it is one call site in the
    // report: its thread's own frames say nothing of the program.
    if in_backward_pass(&frames) {
        names.push(BACKWARD_PASS.to_string());
    }
    if frames.is_empty() {
        names.push(NO_STACK.to_string());
    } else {
        let mut inner_first = stack_names(&frames, shown, |f| headline_text(f, false));
        inner_first.reverse();
        names.extend(inner_first);
    }
    *merged.entry(names).or_default() += bytes;
}

/// The root frame of a process: its pid and program, after its rank where
/// it has one, and its host where the trace has several (two hosts' pids
/// may be the same).
fn process_frame(info: &ProcessIndex, several_hosts: bool) -> String {
    let program = info
        .start
        .argv
        .first()
        .map(|arg| arg.rsplit('/').next().unwrap_or(arg).to_string())
        .unwrap_or_default();
    let place = &info.start.place;
    let rank = place.rank.map(|r| format!("rank {r} ")).unwrap_or_default();
    let host = if several_hosts {
        format!(" on {}", place.host)
    } else {
        String::new()
    };
    format!("{rank}pid {} {program}{host}", info.start.pid)
}

/// The folded lines: `frame;frame;... bytes`, frames escaped (spaces too).
pub fn folded_text(stacks: &[(Vec<String>, u64)]) -> String {
    let mut out = String::new();
    for (frames, bytes) in stacks {
        let names: Vec<String> = frames.iter().map(|f| escape_folded(f, true)).collect();
        out += &format!("{} {bytes}\n", names.join(";"));
    }
    out
}

/// The SVG of `stacks`.
pub fn svg(stacks: &[(Vec<String>, u64)], title: &str) -> Result<Vec<u8>, String> {
    // Spaces stay in the SVG's names: the count follows the last one.
    let lines: Vec<String> = stacks
        .iter()
        .map(|(frames, bytes)| {
            let names: Vec<String> = frames.iter().map(|f| escape_folded(f, false)).collect();
            format!("{} {bytes}", names.join(";"))
        })
        .collect();
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.count_name = "bytes".to_string();
    options.colors = inferno::flamegraph::color::Palette::Basic(inferno::flamegraph::color::BasicPalette::Mem);
    options.deterministic = true;
    let mut out = Vec::new();
    if lines.is_empty() {
        return Err("no memory to draw at that moment".to_string());
    }
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)
        .map_err(|e| format!("cannot draw the flamegraph: {e}"))?;
    Ok(out)
}

/// All the bytes the stacks hold, for the title.
pub fn total_bytes(stacks: &[(Vec<String>, u64)]) -> u64 {
    stacks.iter().map(|(_, bytes)| bytes).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_names_escape_separators_spaces_and_the_escape_itself() {
        assert_eq!(escape_folded("a;b c%d\ne", true), "a%3Bb%20c%25d%0Ae");
        assert_eq!(escape_folded("at::empty(long, int)", false), "at::empty(long, int)");
        let stacks = vec![(vec!["pid 1 python".to_string(), "f(int a)".to_string()], 42)];
        assert_eq!(folded_text(&stacks), "pid%201%20python;f(int%20a) 42\n");
    }
}
