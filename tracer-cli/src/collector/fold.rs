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

use crate::analysis::{kept_below_cuts, Kept, TraceIndex};
use crate::outputs::wording::trace_damage::{problem_text, unreadable_trace_text};
use crate::system::progress::Progress;
use cudatrace_events::Event;
use cudatrace_trace::{read_record_at, Fold, Record, TraceReader, TraceWriter};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
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

/// Rewrites the trace at `path` (written by `old`, which is flushed and
/// synced here) so that it takes about `target` bytes, of which at most
/// `detail` are the newest events as they were, and returns the new
/// trace's writer, positioned at its end. On failure the old trace is left
/// as it was, to be written on, and the reason is returned.
pub fn fold(
    old: &mut TraceWriter<BufWriter<File>>,
    path: &Path,
    target: u64,
    detail: u64,
) -> Result<TraceWriter<BufWriter<File>>, String> {
    old.flush()
        .and_then(|()| old.get_ref().get_ref().sync_data())
        .map_err(|e| e.to_string())?;
    let length = old.bytes_written();
    // A fault of ours in the rewrite must not end the collection: the old
    // trace is whole, and is written on.
    std::panic::catch_unwind(|| rewrite(path, length, target, detail))
        .unwrap_or_else(|_| Err("an internal fault in the rewrite".into()))
}

/// The temporary file a fold writes, beside the trace.
fn folding_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.cudatrace-{}.folding", std::process::id()))
}

fn rewrite(path: &Path, length: u64, target: u64, detail: u64) -> Result<TraceWriter<BufWriter<File>>, String> {
    let index = TraceIndex::read(path).map_err(|e| unreadable_trace_text(&e))?;
    let header = index.header.clone().ok_or("the trace has no header")?;
    let progress = Progress::hidden();
    // First try: the newest `detail` bytes stay whole. If the state kept
    // from before them would not fit beside them, keep fewer.
    let mut cut_offset = cut_at(&index, length.saturating_sub(detail));
    let (mut cuts, mut detail_from_ns) = cuts_at(&index, cut_offset)?;
    let mut kept = kept_below_cuts(&index, &cuts, &progress);
    let state_bytes = estimate_state_bytes(&index, &kept, cut_offset);
    let tail_bytes = length.saturating_sub(cut_offset);
    if state_bytes + tail_bytes > target && tail_bytes > 0 {
        let room = target.saturating_sub(state_bytes);
        cut_offset = cut_at(&index, length.saturating_sub(room));
        (cuts, detail_from_ns) = cuts_at(&index, cut_offset)?;
        kept = kept_below_cuts(&index, &cuts, &progress);
    }
    let detail_from_ns = detail_from_ns.max(index.detail_from_ns().unwrap_or(0));
    let staging = folding_path(path);
    let written = write_folded(&index, &header, &kept, cut_offset, detail_from_ns, &staging);
    match written {
        Ok(trace) => {
            std::fs::rename(&staging, path).map_err(|e| {
                let _ = std::fs::remove_file(&staging);
                e.to_string()
            })?;
            if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                if let Ok(folder) = File::open(folder) {
                    let _ = folder.sync_all();
                }
            }
            Ok(trace)
        }
        Err(error) => {
            let _ = std::fs::remove_file(&staging);
            Err(error)
        }
    }
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

/// Each process's cut (the first sequence number of its first block at or
/// after `cut_offset`; `None` when it has none there) and the earliest time
/// of those blocks' first events: where the detail starts.
fn cuts_at(index: &TraceIndex, cut_offset: u64) -> Result<(Vec<Option<u64>>, u64), String> {
    let pid_of = |process| index.pid_of(process);
    let mut detail_from = None::<u64>;
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
        let first = events.first().ok_or("an empty event block")?;
        detail_from = Some(detail_from.map_or(first.time_ns, |t| t.min(first.time_ns)));
        cuts.push(Some(first.seq));
    }
    Ok((cuts, detail_from.unwrap_or_else(|| index.end_ns())))
}

/// About the bytes the kept events below the cuts take: their share of
/// the events before the cut, times those events' bytes.
fn estimate_state_bytes(index: &TraceIndex, kept: &[Kept], cut_offset: u64) -> u64 {
    let before = cut_offset.min(index.file.metadata().map_or(0, |m| m.len()));
    let events = index.events.max(1);
    let kept_events: u64 = kept.iter().map(|k| k.below_cut.len() as u64).sum();
    (before as u128 * u128::from(kept_events) / u128::from(events)) as u64
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
    kept: &[Kept],
    cut_offset: u64,
    detail_from_ns: u64,
    staging: &Path,
) -> Result<TraceWriter<BufWriter<File>>, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(staging)
        .map_err(|e| e.to_string())?;
    // SAFETY: locking our own descriptor, as the trace it replaces was.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
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
            Record::Header(_) | Record::Fold(_) | Record::Footer(_) => {}
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
    use crate::analysis::test_events::{driver_event, tensor_event};
    use crate::analysis::{DeviceKey, Summary};
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
        };
        trace.process_start(&start).unwrap();
        for block in events.chunks(1000) {
            trace.events(0, block).unwrap();
        }
        trace
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
        let mut trace = fold(&mut trace, &folded, length / 4, length / 10).unwrap();
        // Folding a folded trace again keeps what the first fold kept.
        let mut trace = fold(&mut trace, &folded, length / 4, length / 10).unwrap();
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
}
