//! Folding: how the collector keeps a trace under its size cap
//! (`run --max-size`), by rewriting it without its older detail.
//!
//! When the trace reaches [`FOLD_AT_PARTS`] tenths of the cap, the writer
//! thread rewrites it beside itself: the records it must keep whole
//! (process starts and ends, refusals, NVML's statuses), one fold record a
//! process, the older events that [`kept_below_cuts`] keeps (the state at
//! the cut, at each peak and at each OOM, every stack record and
//! measurement), NVML's older readings thinned to [`NVML_FOLDED_POINTS`] a
//! device and process, then the newest part of the trace as it was. The new
//! file is synced and renamed over the old one, so a crash at any moment
//! leaves one whole trace, and `collect` finds every event that is not in
//! it still in the spools. The old and new files together stay within the
//! cap plus a tenth: the rewrite aims at [`REWRITE_PARTS`] tenths.

use crate::system::beside_file::{create_locked, hidden_name, remove_leftovers};
use crate::system::terminal::say;
use crate::wording::collector_lines;
use crate::wording::trace_damage::{problem_text, unreadable_trace_text};
use cudatrace_analysis::Progress;
use cudatrace_analysis::{find_boundaries_so_far, AtCut, Kept, RetentionPass, StepCounts, Summary, TraceIndex};
use cudatrace_events::Event;
use cudatrace_trace::{read_record_at, Fold, Record, TraceReader, TraceWriter};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A trace is folded once it reaches this many tenths of its cap.
pub const FOLD_AT_PARTS: u64 = 8;
/// A fold aims to leave this many tenths of the cap: the old file at
/// [`FOLD_AT_PARTS`] and the new one together stay within the cap plus a
/// tenth.
pub const REWRITE_PARTS: u64 = 3;
/// Of the rewrite, the newest events kept as they were take at most this
/// many tenths of the cap; the kept state and summaries the rest.
pub const DETAIL_PARTS: u64 = 2;
/// NVML's readings kept from before the detailed part, per device and
/// process (the highest reading of each of as many equal slices of time).
pub const NVML_FOLDED_POINTS: usize = 1024;

/// What a fold left.
pub struct Folded {
    /// The new trace's writer, positioned at its end.
    pub trace: TraceWriter<BufWriter<File>>,
    /// About the bytes of the new trace that are not the newest events as
    /// they were: the state and summaries kept from before them.
    pub state_bytes: u64,
}

/// Rewrites the trace at `path` (written by `old`, which is flushed and
/// synced here) so that it takes about `target` bytes, of which at most
/// `detail` are the newest events as they were. On failure the old trace is
/// left as it was, to be written on, and the reason is returned.
pub fn fold(old: &mut TraceWriter<BufWriter<File>>, path: &Path, target: u64, detail: u64) -> Result<Folded, String> {
    old.flush()
        .and_then(|()| old.get_ref().get_ref().sync_data())
        .map_err(|e| e.to_string())?;
    // Where the trace really is: through a symbolic link, the file it
    // names is rewritten, and the link stays.
    let path = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // The file there must still be ours: one moved there since is never
    // read, nor replaced.
    let ours = old.get_ref().get_ref().metadata().map_err(|e| e.to_string())?;
    let there = std::fs::metadata(&path).map_err(|e| e.to_string())?;
    if (ours.dev(), ours.ino()) != (there.dev(), there.ino()) {
        return Err(format!("{} is no longer the file being written", path.display()));
    }
    let length = old.bytes_written();
    // A fault of ours in the rewrite must not end the collection: the old
    // trace is whole, and is written on.
    std::panic::catch_unwind(|| rewrite(&path, &ours, length, target, detail))
        .unwrap_or_else(|_| Err("an internal fault in the rewrite".into()))
}

/// The temporary file a fold writes, beside the trace.
fn folding_path(path: &Path) -> Result<PathBuf, String> {
    hidden_name(path, std::process::id(), "folding").ok_or_else(|| format!("{} has no file name", path.display()))
}

fn rewrite(path: &Path, old: &std::fs::Metadata, length: u64, target: u64, detail: u64) -> Result<Folded, String> {
    // First try: the newest `detail` bytes stay whole. If the state kept
    // from before them would not fit beside them, keep fewer. The steps of
    // the first try are counted while the index is read.
    let mut counts = StepCounts::for_fold_at(length.saturating_sub(detail));
    let index = TraceIndex::read_observing(path, &mut |index, process, offset, events| {
        counts.observe_block(index, process, offset, events)
    })
    .map_err(|e| unreadable_trace_text(&e))?;
    let header = index.header.clone().ok_or("the trace has no header")?;
    let progress = Progress::hidden();
    let mut cut_offset = cut_at(&index, length.saturating_sub(detail));
    let recent = cuts_at(&index, cut_at(&index, length / 2))?;
    let mut cuts = counts.cuts(index.processes.len());
    let (mut kept, mut at_cuts) = what_to_keep(&index, &mut cuts, &recent, Some(counts), &progress);
    let state_bytes = estimate_state_bytes(&index, &kept, cut_offset, length);
    let tail_bytes = length.saturating_sub(cut_offset);
    if state_bytes + tail_bytes > target && tail_bytes > 0 {
        let room = target.saturating_sub(state_bytes);
        cut_offset = cut_at(&index, length.saturating_sub(room));
        cuts = cuts_at(&index, cut_offset)?;
        (kept, at_cuts) = what_to_keep(&index, &mut cuts, &recent, None, &progress);
    }
    // From here on every process is whole: after the last event any of
    // them folds.
    let detail_from_ns = kept
        .iter()
        .filter_map(|k| k.last_time_below_cut)
        .chain(index.detail_from_ns())
        .max()
        .unwrap_or_else(|| index.start_ns());
    // The steps' records and series (or the low points) take at most half of what the state
    // and summaries may: a twentieth of the cap.
    let steps_budget = target.saturating_sub(detail) / 2;
    let staging = folding_path(path)?;
    // What collectors killed mid-fold, or a `collect` killed mid-way, left
    // beside the trace: nobody holds their locks.
    for leftover in remove_leftovers(path) {
        say(&collector_lines::removed_leftover(&leftover));
    }
    let written = write_folded(
        &index,
        &header,
        (&kept, &at_cuts, steps_budget),
        cut_offset,
        detail_from_ns,
        &staging,
    )
    .and_then(|trace| {
        std::fs::set_permissions(&staging, old.permissions()).map_err(|e| e.to_string())?;
        std::fs::rename(&staging, path).map_err(|e| e.to_string())?;
        Ok(trace)
    });
    match written {
        Ok(trace) => {
            // The rename reaches the disk with its folder.
            let folder = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if let Ok(folder) = File::open(folder) {
                let _ = folder.sync_all();
            }
            let tail_bytes = length.saturating_sub(cut_offset);
            let state_bytes = trace.bytes_written().saturating_sub(tail_bytes);
            Ok(Folded { trace, state_bytes })
        }
        Err(error) => {
            let _ = std::fs::remove_file(&staging);
            Err(error)
        }
    }
}

/// What a fold at `cuts` keeps of each process's events, and its steps (or
/// low points) as they stand at its cut: the steps' counts (`counted`,
/// taken while the index was read, or counted again here), then one replay
/// for both. A cut inside a step moves back to that step's start (in
/// `cuts`), so that the step is kept whole, unless the step began before
/// both `recent[i]` (the process's first sequence number in the newer half
/// of the trace) and the last fold's cut: a loop that has ended, or steps
/// too long to keep whole, hold the fold back once at most. A process whose
/// marker has too few steps yet is not folded at all, if it all lies in
/// that newer half; otherwise it keeps no steps.
fn what_to_keep(
    index: &TraceIndex,
    cuts: &mut [Option<u64>],
    recent: &[Option<u64>],
    counted: Option<StepCounts>,
    progress: &Progress,
) -> (Vec<Kept>, Vec<AtCut>) {
    let (mut boundaries, step_starts) = match counted {
        Some(counts) => counts.found(index),
        None => find_boundaries_so_far(index, cuts, progress),
    };
    for (process, start) in step_starts.into_iter().enumerate() {
        let info = &index.processes[process];
        match start {
            Some((0, _)) if info.fold.is_none() && recent[process] == Some(0) => cuts[process] = Some(0),
            Some((0, _)) => boundaries[process] = None,
            Some((seq, _))
                if recent[process].is_some_and(|recent| seq >= recent)
                    || info.fold.as_ref().is_some_and(|fold| seq > fold.folded_to) =>
            {
                cuts[process] = Some(cuts[process].map_or(seq, |cut| cut.min(seq)));
            }
            _ => {}
        }
    }
    let mut pass = RetentionPass::new(index, cuts);
    let at_cuts = Summary::steps_at_cuts(index, boundaries, cuts, progress, &mut pass);
    (pass.finish(index, cuts), at_cuts)
}

/// The offset of the first event block at or after `offset` (the file's
/// end when none is).
fn cut_at(index: &TraceIndex, offset: u64) -> u64 {
    index
        .processes
        .iter()
        .flat_map(|p| p.blocks.iter().map(|b| b.offset))
        .filter(|&o| o >= offset)
        .min()
        .unwrap_or(u64::MAX)
}

/// Each process's cut: the first sequence number of its first block at or
/// after `cut_offset`; `None` when it has none there.
fn cuts_at(index: &TraceIndex, cut_offset: u64) -> Result<Vec<Option<u64>>, String> {
    let pid_of = |process| index.pid_of(process);
    let mut cuts = Vec::new();
    for process in &index.processes {
        let Some(block) = process.blocks.iter().find(|b| b.offset >= cut_offset) else {
            cuts.push(None);
            continue;
        };
        let record = read_record_at(&index.file, block.offset, &pid_of).map_err(|d| problem_text(&d.problem))?;
        let Record::Events { events, .. } = record else {
            return Err("an event block moved while it was folded".into());
        };
        cuts.push(Some(events.first().ok_or("an empty event block")?.seq));
    }
    Ok(cuts)
}

/// About the bytes the kept events below the cuts take: their share of
/// the events before the cut (taken as the cut's share of the file), times
/// those events' bytes.
fn estimate_state_bytes(index: &TraceIndex, kept: &[Kept], cut_offset: u64, length: u64) -> u64 {
    let before = cut_offset.min(length);
    let events_before = (u128::from(index.events) * u128::from(before) / u128::from(length.max(1))).max(1);
    let kept_events: u64 = kept.iter().map(|k| k.below_cut.len() as u64).sum();
    (u128::from(before) * u128::from(kept_events) / events_before) as u64
}

/// Which of NVML's readings (in trace order) stay: every one from
/// `detail_from_ns` on, and before it the highest of each slice of time.
fn nvml_kept(index: &TraceIndex, detail_from_ns: u64) -> Vec<bool> {
    let mut keep = vec![true; index.nvml.len()];
    let mut older: HashMap<(&str, u32), Vec<usize>> = HashMap::new();
    for (i, sample) in index.nvml.iter().enumerate() {
        if sample.time_ns < detail_from_ns {
            older.entry((sample.uuid.as_str(), sample.pid)).or_default().push(i);
        }
    }
    for readings in older.values().filter(|r| r.len() > NVML_FOLDED_POINTS) {
        let first = index.nvml[readings[0]].time_ns;
        let span = (detail_from_ns - first).max(1);
        let mut best: Vec<Option<usize>> = vec![None; NVML_FOLDED_POINTS];
        for &i in readings {
            keep[i] = false;
            let slice = ((u128::from(index.nvml[i].time_ns - first) * NVML_FOLDED_POINTS as u128 / u128::from(span))
                as usize)
                .min(NVML_FOLDED_POINTS - 1);
            let higher = best[slice].is_none_or(|b| index.nvml[i].used_bytes > index.nvml[b].used_bytes);
            if higher {
                best[slice] = Some(i);
            }
        }
        best.into_iter().flatten().for_each(|i| keep[i] = true);
    }
    keep
}

fn write_folded(
    index: &TraceIndex,
    header: &cudatrace_trace::Header,
    (kept, at_cuts, steps_budget): (&[Kept], &[AtCut], u64),
    cut_offset: u64,
    detail_from_ns: u64,
    staging: &Path,
) -> Result<TraceWriter<BufWriter<File>>, String> {
    // Locked, as the trace it replaces was: unlocked, it is a leftover.
    let file = create_locked(staging, 0o644).map_err(|e| e.to_string())?;
    let mut trace = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), header).map_err(|e| e.to_string())?;
    let by_process: HashMap<u32, usize> = index
        .processes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.start.process, i))
        .collect();
    let nvml_keep = nvml_kept(index, detail_from_ns);
    let mut nvml_seen = 0usize;
    let source = File::open(&index.path).map_err(|e| e.to_string())?;
    let mut reader =
        TraceReader::new(BufReader::with_capacity(1 << 20, source)).map_err(|d| problem_text(&d.problem))?;
    let io = |e: std::io::Error| e.to_string();
    loop {
        let offset = reader.offset();
        let record = match reader.next_record() {
            Ok(Some(record)) => record,
            Ok(None) => break,
            Err(damage) if damage.skipped => continue,
            Err(_) => break,
        };
        let before_cut = offset < cut_offset;
        match record {
            Record::Header(_)
            | Record::Fold(_)
            | Record::StepsState(_)
            | Record::LowPointsState(_)
            | Record::Footer(_) => {}
            Record::Process(start) => {
                trace.process_start(&start).map_err(io)?;
                if let Some(&i) = by_process.get(&start.process) {
                    let k = &kept[i];
                    let fold = Fold {
                        process: start.process,
                        folded_to: k.folded_to,
                        lost_below: k.lost_below,
                        folded_events: k.folded_events,
                        detail_from_ns,
                        sites: k.sites.clone(),
                    };
                    if fold.folded_to > 0 {
                        trace.record(&Record::Fold(fold)).map_err(io)?;
                        if let Some(steps) = &at_cuts[i].steps {
                            trace
                                .record(&Record::StepsState(steps.state(start.process, steps_budget)))
                                .map_err(io)?;
                        } else if let Some(low_points) = at_cuts[i].low_points.as_ref().filter(|l| l.points() > 0) {
                            trace
                                .record(&Record::LowPointsState(low_points.state(start.process, steps_budget)))
                                .map_err(io)?;
                        }
                    }
                }
            }
            Record::Events { process, events } => {
                let Some(&i) = by_process.get(&process) else { continue };
                let k = &kept[i];
                let events: Vec<Event> = if before_cut {
                    events
                        .into_iter()
                        .filter(|e| e.seq >= k.folded_to || k.below_cut.contains(&e.seq))
                        .collect()
                } else {
                    events
                };
                if !events.is_empty() {
                    trace.events(process, &events).map_err(io)?;
                }
            }
            Record::ProcessEnd(end) => trace.process_end(&end).map_err(io)?,
            Record::Nvml(sample) => {
                let keep = nvml_keep.get(nvml_seen).copied().unwrap_or(true);
                nvml_seen += 1;
                if keep {
                    trace.record(&Record::Nvml(sample)).map_err(io)?;
                }
            }
            other => trace.record(&other).map_err(io)?,
        }
    }
    trace.flush().map_err(io)?;
    trace.get_ref().get_ref().sync_all().map_err(io)?;
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudatrace_analysis::test_events::{driver_event, tensor_event};
    use cudatrace_analysis::{DeviceKey, Summary};
    use cudatrace_events::tensors::Action;
    use cudatrace_events::{Kind, Op};
    use cudatrace_trace::{Header, ProcessEnd, ProcessStart};

    const BIG: u64 = 1 << 20;

    /// A run: a model (stack 1) made at the start and kept; an early peak
    /// (stack 3, freed soon after) and an OOM while it was held; then many
    /// short-lived allocations (stack 2), each with a tensor of its own.
    fn events() -> Vec<Event> {
        let mut events = Vec::new();
        let mut seq = 0;
        let mut push = |events: &mut Vec<Event>, make: &dyn Fn(u64, u64) -> Event| {
            events.push(make(seq, 1000 + seq * 10));
            seq += 1;
        };
        push(&mut events, &|s, t| {
            driver_event(s, t, Op::Alloc, Kind::Device, 0x10_0000, 4 * BIG, 1)
        });
        for round in 0..6000u64 {
            let address = 0x90_0000 + (round % 4) * 0x1000;
            push(&mut events, &|s, t| {
                driver_event(s, t, Op::Alloc, Kind::Device, address, 4096, 2)
            });
            push(&mut events, &|s, t| tensor_event(s, t, Action::Alloc, address, 1024, 2));
            if round == 100 {
                push(&mut events, &|s, t| {
                    driver_event(s, t, Op::Alloc, Kind::Device, 0x50_0000, 8 * BIG, 3)
                });
                push(&mut events, &|s, t| {
                    driver_event(s, t, Op::Oom, Kind::Device, 0, 64 * BIG, 4)
                });
            }
            if round == 110 {
                push(&mut events, &|s, t| {
                    driver_event(s, t, Op::Free, Kind::Device, 0x50_0000, 0, 0)
                });
            }
            push(&mut events, &|s, t| {
                tensor_event(s, t, Action::FreeRequested, address, 1024, 0)
            });
            push(&mut events, &|s, t| {
                tensor_event(s, t, Action::FreeCompleted, address, 1024, 0)
            });
            push(&mut events, &|s, t| {
                driver_event(s, t, Op::Free, Kind::Device, address, 0, 0)
            });
        }
        events
    }

    fn write_trace(path: &Path, events: &[Event]) -> TraceWriter<BufWriter<File>> {
        let header = Header {
            format_version: cudatrace_trace::FORMAT_VERSION,
            tracer_version: "test".into(),
            host: "box".into(),
            start_realtime_ns: 0,
            start_monotonic_ns: 0,
            command: vec!["train".into()],
        };
        let file = File::create(path).unwrap();
        let mut trace = TraceWriter::new(BufWriter::new(file), &header).unwrap();
        let start = ProcessStart {
            process: 0,
            pid: 1,
            ppid: 0,
            image: 0,
            start_monotonic_ns: 0,
            start_realtime_ns: 0,
            argv: vec!["train".into()],
            place: Default::default(),
        };
        trace.process_start(&start).unwrap();
        for block in events.chunks(1000) {
            trace.events(0, block).unwrap();
        }
        trace
    }

    /// One step's tensors, each (stack, address, freed within the step),
    /// with sequence numbers from `seq` and times 10 ns apart.
    fn push_step(events: &mut Vec<Event>, seq: &mut u64, tensors: &[(u32, u64, bool)]) {
        for &(stack, address, freed) in tensors {
            events.push(tensor_event(*seq, 1000 + *seq * 10, Action::Alloc, address, BIG, stack));
            *seq += 1;
            if freed {
                events.push(tensor_event(
                    *seq,
                    1000 + *seq * 10,
                    Action::FreeCompleted,
                    address,
                    BIG,
                    0,
                ));
                *seq += 1;
            }
        }
    }

    fn summary(path: &Path) -> (TraceIndex, Summary) {
        let index = TraceIndex::read(path).unwrap();
        let summary = Summary::build_without_steps(&index, &Progress::hidden());
        (index, summary)
    }

    #[test]
    fn a_fold_keeps_the_peak_the_oom_the_counts_and_the_state_exact() {
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (whole, folded) = (dir.join("whole.trace"), dir.join("folded.trace"));
        let events = events();
        let mut trace = write_trace(&whole, &events);
        trace.flush().unwrap();
        let mut trace = write_trace(&folded, &events);
        let length = trace.bytes_written();
        let mut trace = fold(&mut trace, &folded, length / 4, length / 10).unwrap().trace;
        // Folding a folded trace again keeps what the first fold kept.
        let mut trace = fold(&mut trace, &folded, length / 4, length / 10).unwrap().trace;
        trace
            .process_end(&ProcessEnd {
                process: 0,
                exit_status: Some(0),
                reserved_events: events.len() as u64,
                ..Default::default()
            })
            .unwrap();
        trace.flush().unwrap();
        let folded_bytes = std::fs::metadata(&folded).unwrap().len();
        assert!(folded_bytes <= length / 4, "{folded_bytes} of {length}");

        let (whole_index, whole) = summary(&whole);
        let (index, summary) = summary(&folded);
        let fold = index.processes[0].fold.clone().expect("a fold record");
        assert!(fold.folded_to > 20_000, "folded to {}", fold.folded_to);
        assert_eq!(fold.lost_below, 0);
        let records = |i: &TraceIndex| i.memory_events + i.processes.iter().map(|p| p.tensor_actions).sum::<u64>();
        assert_eq!(records(&index) + index.folded_events(), records(&whole_index));
        assert_eq!(summary.lost_events(&index), 0);
        let (a, b) = (&whole.processes[0], &summary.processes[0]);
        let (a, b) = (&a.devices[&DeviceKey::Gpu(0)], &b.devices[&DeviceKey::Gpu(0)]);
        assert_eq!(
            (b.allocations, b.frees, b.bytes_allocated),
            (6002, 6001, 12 * BIG + 6000 * 4096)
        );
        assert_eq!(
            (a.allocations, a.frees, a.bytes_allocated),
            (b.allocations, b.frees, b.bytes_allocated)
        );
        assert_eq!((b.peak, b.peak_time_ns), (12 * BIG + 4096, a.peak_time_ns));
        assert_eq!(b.peak_by_stack, a.peak_by_stack);
        assert_eq!(b.current, 4 * BIG);
        assert_eq!(b.live_by_stack, a.live_by_stack);
        assert_eq!(b.ooms.len(), 1);
        let (held_a, held_b) = (a.ooms[0].held.as_ref().unwrap(), b.ooms[0].held.as_ref().unwrap());
        assert_eq!(
            (held_b.live_bytes, &held_b.live_by_stack),
            (12 * BIG + 4096, &held_a.live_by_stack)
        );
        let tensors = |s: &Summary| {
            let stats = &s.processes[0].tensors.devices[&DeviceKey::Gpu(0)];
            (stats.allocated_peak, stats.allocations, stats.frees)
        };
        assert_eq!(tensors(&summary).1, 6000);
        assert_eq!(tensors(&summary), tensors(&whole));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_put_where_the_trace_was_is_never_read_nor_replaced() {
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-moved-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.trace");
        let mut trace = write_trace(&path, &events());
        std::fs::rename(&path, dir.join("moved.trace")).unwrap();
        std::fs::write(&path, b"someone else's file").unwrap();
        let length = trace.bytes_written();
        let refused = fold(&mut trace, &path, length / 4, length / 10).err();
        assert_eq!(
            refused,
            Some(format!("{} is no longer the file being written", path.display()))
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"someone else's file");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".folding"))
            .collect();
        assert_eq!(leftovers, Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// 6,000 allocations of 4 KiB, each freed before the next.
    fn filler(events: &mut Vec<Event>, seq: &mut u64) {
        for _ in 0..6000u64 {
            events.push(driver_event(
                *seq,
                1000 + *seq * 10,
                Op::Alloc,
                Kind::Device,
                0x90_0000,
                4096,
                2,
            ));
            *seq += 1;
            events.push(driver_event(
                *seq,
                1000 + *seq * 10,
                Op::Free,
                Kind::Device,
                0x90_0000,
                0,
                0,
            ));
            *seq += 1;
        }
    }

    /// `events` written whole and written then folded to a quarter: both
    /// summaries.
    fn whole_and_folded(name: &str, events: &[Event]) -> (Summary, Summary) {
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (whole, folded) = (dir.join("whole.trace"), dir.join("folded.trace"));
        write_trace(&whole, events).flush().unwrap();
        let mut trace = write_trace(&folded, events);
        let length = trace.bytes_written();
        let mut trace = fold(&mut trace, &folded, length / 4, length / 10).unwrap().trace;
        trace.flush().unwrap();
        let summaries = (summary(&whole).1, summary(&folded).1);
        let _ = std::fs::remove_dir_all(&dir);
        summaries
    }

    #[test]
    fn an_allocation_that_replaced_one_never_freed_ends_in_a_folded_trace_too() {
        let mut events = vec![
            driver_event(0, 1000, Op::Alloc, Kind::Device, 0xA000_0000, 100 * BIG, 1),
            // At the same address, its free never seen: the first ends here.
            driver_event(1, 1010, Op::Alloc, Kind::Device, 0xA000_0000, BIG, 2),
            driver_event(2, 1020, Op::Free, Kind::Device, 0xA000_0000, 0, 0),
        ];
        let mut seq = 3;
        filler(&mut events, &mut seq);
        let (whole, folded) = whole_and_folded("reuse", &events);
        let device = |s: &Summary| {
            let d = &s.processes[0].devices[&DeviceKey::Gpu(0)];
            (d.current, d.peak, d.allocations, d.frees)
        };
        assert_eq!(device(&whole), (0, 100 * BIG, 6002, 6002));
        assert_eq!(device(&folded), device(&whole));
    }

    #[test]
    fn vmm_memory_released_while_mapped_ends_at_its_unmap_in_a_folded_trace_too() {
        let mut events = Vec::new();
        for (seq, (op, kind, address, arg1)) in [
            (Op::Alloc, Kind::VmmPhysical, 0x77, 0),
            (Op::Map, Kind::VirtualAddress, 0x7000_0000, 0x77),
            (Op::Free, Kind::VmmPhysical, 0x77, 0),
            (Op::Unmap, Kind::VirtualAddress, 0x7000_0000, 0),
        ]
        .into_iter()
        .enumerate()
        {
            let mut event = driver_event(seq as u64, 1000 + seq as u64 * 10, op, kind, address, 100 * BIG, 1);
            event.arg1 = arg1;
            events.push(event);
        }
        let mut seq = 4;
        filler(&mut events, &mut seq);
        let (whole, folded) = whole_and_folded("vmm", &events);
        let device = |s: &Summary| {
            let d = &s.processes[0].devices[&DeviceKey::Gpu(0)];
            (d.current, d.peak)
        };
        assert_eq!(device(&whole), (0, 100 * BIG));
        assert_eq!(device(&folded), device(&whole));
    }

    #[test]
    fn pytorch_s_own_oom_records_do_not_use_up_the_oom_states_kept() {
        let mut events = Vec::new();
        let mut seq = 0;
        let mut push = |events: &mut Vec<Event>, make: &dyn Fn(u64) -> Event| {
            events.push(make(seq));
            seq += 1;
        };
        for i in 0..16u64 {
            let address = 0xB000_0000 + i * 0x100_0000;
            let stack = 10 + i as u32;
            push(&mut events, &|s| {
                driver_event(s, 1000 + s * 10, Op::Alloc, Kind::Device, address, BIG, stack)
            });
            push(&mut events, &|s| {
                driver_event(s, 1000 + s * 10, Op::Oom, Kind::Device, 0, 64 * BIG, 4)
            });
            push(&mut events, &|s| {
                tensor_event(s, 1000 + s * 10, Action::Oom, 0, 64 * BIG, 4)
            });
            push(&mut events, &|s| {
                driver_event(s, 1000 + s * 10, Op::Free, Kind::Device, address, 0, 0)
            });
        }
        filler(&mut events, &mut seq);
        let (whole, folded) = whole_and_folded("ooms", &events);
        let held = |s: &Summary| -> Vec<Option<u64>> {
            s.processes[0].devices[&DeviceKey::Gpu(0)]
                .ooms
                .iter()
                .map(|oom| oom.held.as_ref().map(|h| h.live_bytes))
                .collect()
        };
        assert_eq!(held(&whole), vec![Some(BIG); 16]);
        assert_eq!(held(&folded), held(&whole));
    }

    #[test]
    fn pinned_host_counts_are_the_whole_run_s() {
        let mut events = Vec::new();
        for seq in 0..6000u64 {
            let op = if seq.is_multiple_of(2) { Op::Alloc } else { Op::Free };
            let mut event = driver_event(seq, 1000 + seq * 10, op, Kind::HostPinned, 0x55_0000, 4096, 5);
            event.device = None;
            events.push(event);
        }
        let mut seq = 6000;
        filler(&mut events, &mut seq);
        let (whole, folded) = whole_and_folded("host", &events);
        let host = |s: &Summary| (s.processes[0].host.allocations, s.processes[0].host.frees);
        assert_eq!(host(&whole), (3000, 3000));
        assert_eq!(host(&folded), host(&whole));
    }

    #[test]
    fn the_detail_starts_after_the_last_event_any_process_folds() {
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-two-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("two.trace");
        let mut trace = write_trace(&path, &[]);
        trace
            .process_start(&ProcessStart {
                process: 1,
                pid: 2,
                ppid: 0,
                image: 0,
                start_monotonic_ns: 0,
                start_realtime_ns: 0,
                argv: vec!["x".into()],
                place: Default::default(),
            })
            .unwrap();
        // Allocations and frees of 4 KiB, one every `step` ns from `t0`.
        let pairs = |first: u64, n: u64, t0: u64, step: u64, pid: u32| -> Vec<Event> {
            (0..n)
                .map(|i| {
                    let seq = first + i;
                    let op = if seq.is_multiple_of(2) { Op::Alloc } else { Op::Free };
                    Event {
                        pid,
                        ..driver_event(seq, t0 + i * step, op, Kind::Device, 0x9000, 4096, 2)
                    }
                })
                .collect()
        };
        // Process 0 until 1 ms; then process 1's block, written late, up to
        // 2 ms; then process 0 again, from 1 ms on.
        trace.events(0, &pairs(0, 20000, 0, 50, 1)).unwrap();
        trace.events(1, &pairs(0, 2000, 500_000, 750, 2)).unwrap();
        for k in 0..20u64 {
            trace
                .events(0, &pairs(20000 + k * 1000, 1000, 1_000_000 + k * 50_000, 50, 1))
                .unwrap();
        }
        let length = trace.bytes_written();
        fold(&mut trace, &path, length / 2, length / 3)
            .unwrap()
            .trace
            .flush()
            .unwrap();
        let index = TraceIndex::read(&path).unwrap();
        // Process 1's last event (at 2 ms less a step) was folded: the
        // detail starts there, not before.
        let fold = index.processes[1].fold.clone().expect("process 1 folded");
        assert_eq!(fold.folded_to, 2000);
        assert_eq!(index.detail_from_ns(), Some(500_000 + 1999 * 750));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fold_removes_what_killed_writers_left_beside_the_trace_and_nothing_being_written() {
        use std::os::fd::AsRawFd;
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-leftovers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.trace");
        let mut trace = write_trace(&path, &events());
        // A collector of a pid now reused killed mid-fold, and a `collect`
        // killed mid-way; and one being written, its writer holding its lock.
        let left = [
            dir.join(format!(".run.trace.cudatrace-{}.folding", std::process::id())),
            dir.join(".run.trace.cudatrace-1.partial"),
        ];
        let written = dir.join(".run.trace.cudatrace-2.folding");
        for file in left.iter().chain([&written]) {
            std::fs::write(file, b"unfinished").unwrap();
        }
        let writer = File::open(&written).unwrap();
        // SAFETY: locking a descriptor of ours.
        assert_eq!(unsafe { libc::flock(writer.as_raw_fd(), libc::LOCK_EX) }, 0);
        let length = trace.bytes_written();
        fold(&mut trace, &path, length / 4, length / 10).unwrap();
        let mut beside: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        beside.sort();
        assert_eq!(beside, [".run.trace.cudatrace-2.folding", "run.trace"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn through_a_symbolic_link_the_file_it_names_is_folded_and_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (real, link) = (dir.join("real.trace"), dir.join("link.trace"));
        let mut trace = write_trace(&real, &events());
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let length = trace.bytes_written();
        fold(&mut trace, &link, length / 4, length / 10)
            .unwrap()
            .trace
            .flush()
            .unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        let folded = std::fs::metadata(&real).unwrap();
        assert!(folded.len() <= length / 4, "{} of {length}", folded.len());
        assert_eq!(folded.permissions().mode() & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_loop_that_has_ended_does_not_hold_the_fold_back() {
        // 100 steps of two tensors, then a long phase of pinned memory: the
        // last step began early in the trace, and must not keep it all.
        let mut events = Vec::new();
        let mut seq = 0;
        for _ in 0..100u64 {
            push_step(
                &mut events,
                &mut seq,
                &[(10, 0xC000_0000, true), (11, 0xC100_0000, true)],
            );
        }
        for _ in 0..15000u64 {
            for op in [Op::Alloc, Op::Free] {
                let mut event = driver_event(seq, 1000 + seq * 10, op, Kind::HostPinned, 0x55_0000, 4096, 5);
                event.device = None;
                events.push(event);
                seq += 1;
            }
        }
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-ended-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.trace");
        let mut trace = write_trace(&path, &events);
        let length = trace.bytes_written();
        let folded = fold(&mut trace, &path, length / 4, length / 10)
            .unwrap()
            .trace
            .bytes_written();
        assert!(folded <= length / 4, "{folded} of {length}");
        let index = TraceIndex::read(&path).unwrap();
        assert!(index.processes[0].steps_state.is_some(), "the steps are kept");
        let summary = Summary::build(&index, &Progress::hidden());
        let steps = summary.processes[0].steps.as_ref().expect("steps");
        assert_eq!(steps.records.last().map(|r| r.last), Some(100));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A program with no loop (allocations at irregular times from 40
    /// stacks, each freed soon after) that leaks 4 KiB from stack 7 at
    /// irregular gaps: 30,000 events over some 30 s.
    fn leak_without_a_loop() -> Vec<Event> {
        let (mut events, mut seq, mut time, mut random) = (Vec::new(), 0u64, 1_000u64, 12345u64);
        let mut next = |bound: u64| {
            random = random
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (random >> 33) % bound
        };
        let mut leaks = 0u64;
        while seq < 30_000 {
            time += 500_000 + next(1_500_000);
            if next(40) == 0 {
                let address = 0xE000_0000 + leaks * 0x1000;
                events.push(driver_event(seq, time, Op::Alloc, Kind::Device, address, 4096, 7));
                leaks += 1;
                seq += 1;
                continue;
            }
            let (address, stack) = (0xA000_0000 + next(1 << 20) * 0x1000, 100 + next(40) as u32);
            events.push(driver_event(
                seq,
                time,
                Op::Alloc,
                Kind::Device,
                address,
                1 << 20,
                stack,
            ));
            events.push(driver_event(seq + 1, time + 100, Op::Free, Kind::Device, address, 0, 0));
            seq += 2;
        }
        events
    }

    #[test]
    fn growth_without_steps_is_measured_over_the_whole_run_after_folds() {
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-low-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let events = leak_without_a_loop();
        let growing_of = |path: &Path| {
            let index = TraceIndex::read(path).unwrap();
            let summary = Summary::build(&index, &Progress::hidden());
            let low_points = summary.processes[0]
                .low_points
                .as_ref()
                .expect("measured at low points");
            let folded_points = low_points.older_points();
            // Every point a fold stored is read back.
            let stored = index.processes[0]
                .low_points_state
                .as_ref()
                .map_or(0, |l| l.points.len());
            assert_eq!(folded_points, stored);
            let sites = cudatrace_analysis::growing_sites(&index, &index.processes[0], &summary.processes[0]);
            let site = sites.iter().find(|s| s.stack == 7).cloned();
            (
                sites.len(),
                site,
                folded_points,
                index.processes[0].low_points_state.is_some(),
            )
        };
        let whole_path = dir.join("whole.trace");
        write_trace(&whole_path, &events).flush().unwrap();
        let (count, whole, older, state) = growing_of(&whole_path);
        assert_eq!((count, older, state), (1, 0, false));
        let whole = whole.expect("the leak grows in the whole trace");
        let path = dir.join("run.trace");
        let mut trace = write_trace(&path, &events);
        let length = trace.bytes_written();
        // Three folds, each keeping a tenth of the trace in detail.
        for _ in 0..3 {
            trace = fold(&mut trace, &path, length / 3, length / 10).unwrap().trace;
        }
        let (count, folded, older, state) = growing_of(&path);
        assert!(state && older > 0, "{older} older points, state {state}");
        assert_eq!(count, 1);
        let folded = folded.expect("the leak grows in the folded trace");
        let rate = |g: &cudatrace_analysis::GrowingSite| {
            let cudatrace_analysis::Measured::LowPoints { part_ns } = g.measured else {
                panic!("not low points")
            };
            (
                g.bytes_per_step as f64 * 1e9 / part_ns as f64,
                part_ns as f64 * g.steps as f64 / 1e9,
            )
        };
        let ((whole_rate, whole_span), (folded_rate, folded_span)) = (rate(&whole), rate(&folded));
        // The same rate, within 10%, measured over most of the run, not
        // only over its detailed tenth.
        assert!(
            (folded_rate - whole_rate).abs() <= whole_rate * 0.1,
            "{folded_rate} against {whole_rate}"
        );
        assert!(
            folded_span >= whole_span * 0.8,
            "over {folded_span} s against {whole_span} s"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn low_points_kept_by_folds_are_all_read_back_and_a_young_loop_keeps_them() {
        // The program without a loop, then a loop of 10 steps of 200
        // allocations: too few steps for a fold to go by.
        let mut events = leak_without_a_loop();
        let (mut seq, mut time) = (events.len() as u64, events.last().unwrap().time_ns);
        for _ in 0..10 {
            for stack in 0..200u32 {
                time += 1_000_000;
                let address = 0xB000_0000 + u64::from(stack) * 0x10_0000;
                events.push(driver_event(
                    seq,
                    time,
                    Op::Alloc,
                    Kind::Device,
                    address,
                    1 << 20,
                    300 + stack,
                ));
                events.push(driver_event(seq + 1, time + 100, Op::Free, Kind::Device, address, 0, 0));
                seq += 2;
            }
        }
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-young-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.trace");
        let mut trace = write_trace(&path, &events);
        let length = trace.bytes_written();
        for fold_number in 1..=2 {
            trace = fold(&mut trace, &path, length / 3, length / 10).unwrap().trace;
            let index = TraceIndex::read(&path).unwrap();
            let stored = index.processes[0]
                .low_points_state
                .as_ref()
                .expect("the low points are kept");
            assert!(index.processes[0].steps_state.is_none(), "fold {fold_number}");
            // Every stored point is dated before the detail starts: the
            // first event kept whole (the last stretch folded ends there).
            let folded_to = index.processes[0].fold.as_ref().unwrap().folded_to;
            let cut_ns = events.iter().find(|e| e.seq >= folded_to).unwrap().time_ns;
            let times: Vec<u64> = stored.points.iter().map(|p| p.time_ns).collect();
            assert!(times.windows(2).all(|w| w[0] < w[1]), "fold {fold_number}: {times:?}");
            assert!(
                times.last() < Some(&cut_ns),
                "fold {fold_number}: {times:?} against {cut_ns}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn steps_counted_while_the_index_is_read_are_those_of_a_replay() {
        // 1,000 steps of three tensors, one of them kept every step
        // (growth), in blocks of 1,000 events; then cuts at a quarter, half
        // and three quarters of the file.
        let mut events = Vec::new();
        let mut seq = 0;
        for step in 0..1000u64 {
            let kept = 0xD000_0000 + step * BIG;
            push_step(
                &mut events,
                &mut seq,
                &[(10, 0xC000_0000, true), (11, 0xC100_0000, true), (12, kept, false)],
            );
        }
        let dir = std::env::temp_dir().join(format!("cudatrace-fold-counted-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.trace");
        let mut trace = write_trace(&path, &events);
        trace.flush().unwrap();
        let length = trace.bytes_written();
        for quarter in 1..4 {
            let offset = length / 4 * quarter;
            let mut counts = StepCounts::for_fold_at(offset);
            let index = TraceIndex::read_observing(&path, &mut |index, process, at, events| {
                counts.observe_block(index, process, at, events)
            })
            .unwrap();
            let cuts = cuts_at(&index, cut_at(&index, offset)).unwrap();
            assert!(cuts[0].is_some());
            assert_eq!(counts.cuts(1), cuts, "at {quarter} quarters");
            let replayed = find_boundaries_so_far(&index, &cuts, &Progress::hidden());
            let streamed = counts.found(&index);
            // Steps found, and the start of the step under way at the cut.
            assert!(streamed.0[0].is_some() && streamed.1[0].is_some(), "{streamed:?}");
            assert_eq!(streamed, replayed, "at {quarter} quarters");
        }
        // The whole trace, as report reads it, before and after a fold.
        for folds in 0..2 {
            if folds == 1 {
                trace = fold(&mut trace, &path, length / 3, length / 10).unwrap().trace;
            }
            let mut counts = StepCounts::for_whole_trace();
            let index = TraceIndex::read_observing(&path, &mut |index, process, at, events| {
                counts.observe_block(index, process, at, events)
            })
            .unwrap();
            assert_eq!(index.processes[0].steps_state.is_some(), folds == 1);
            let replayed = cudatrace_analysis::find_boundaries(&index, &Progress::hidden());
            assert!(replayed[0].is_some());
            assert_eq!(counts.found(&index).0, replayed, "after {folds} folds");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
