//! `collect` by hand: turns a folder of spools into a trace once their
//! processes are gone, merging in the trace a collector was writing when it
//! stopped, if the folder names one.
//!
//! A collector gives spool space back only for events durably in its trace,
//! so between that trace and the spools every event is somewhere. Both hold
//! each process's events in sequence order; they are merged process by
//! process, in one pass over the old trace, with any event found in both
//! written once. What neither holds shows as gaps in the sequence numbers
//! and is counted as lost.

use crate::collector::fold_schedule::FoldSchedule;
use crate::collector::liveness::Liveness;
use crate::collector::notice_file::NoticeTail;
use crate::collector::spool_tail::{check_spool_file, damaged_spool, SpoolTail};
use crate::collector::{header_for, CollectionSummary};
use crate::wording::{collect_lines, collector_lines, output_lines};
use cudatrace_events::{naming, Event, Pass, SpoolHeaderInfo};
use cudatrace_trace::{
    Damage, DamagedSpool, Footer, Header, ProcessEnd, ProcessStart, Record, Refusal, TraceReader, TraceWriter,
    UnrecordedProcess,
};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A process image, keyed by (pid, image) across the old trace and the spools.
type Key = (u32, u32);

/// One process image being merged.
struct Merge {
    /// Its index in the new trace, once its start is written.
    index: Option<u32>,
    spool: Option<(SpoolTail, SpoolHeaderInfo)>,
    /// Spool events read but not yet written.
    ahead: VecDeque<Event>,
    spool_exhausted: bool,
    /// The next sequence number to write: everything below is written or lost.
    next_seq: u64,
    /// How the old trace said it ended.
    old_end: Option<ProcessEnd>,
    /// The old trace's fold: spool events below it were folded there.
    folded_to: u64,
}

impl Merge {
    fn new(spool: Option<(SpoolTail, SpoolHeaderInfo)>) -> Merge {
        Merge {
            index: None,
            spool,
            ahead: VecDeque::new(),
            spool_exhausted: false,
            next_seq: 0,
            old_end: None,
            folded_to: 0,
        }
    }

    /// Spool events below sequence number `limit` not written yet, at most
    /// `most` of them (more wait for the next call).
    fn spool_events_below(&mut self, limit: u64, most: usize) -> Result<Vec<Event>, String> {
        let mut out = Vec::new();
        loop {
            while let Some(event) = self.ahead.front() {
                if event.seq >= limit || out.len() >= most {
                    return Ok(out);
                }
                let event = self.ahead.pop_front().expect("front exists");
                // Below the fold, the old trace kept what it meant to keep.
                if event.seq >= self.next_seq && event.seq >= self.folded_to {
                    self.next_seq = event.seq + 1;
                    out.push(event);
                }
            }
            let Some((tail, _)) = self.spool.as_mut().filter(|_| !self.spool_exhausted) else {
                return Ok(out);
            };
            let (events, at_end) = tail.read_batch(Pass::Final)?;
            self.ahead.extend(events);
            self.spool_exhausted = at_end;
        }
    }

    /// Old-trace events not written yet, after any spool events before them.
    fn merge_block(&mut self, events: Vec<Event>) -> Result<Vec<Event>, String> {
        let Some(first) = events.first().map(|e| e.seq) else {
            return Ok(Vec::new());
        };
        let mut out = self.spool_events_below(first, usize::MAX)?;
        for event in events {
            if event.seq >= self.next_seq {
                self.next_seq = event.seq + 1;
                out.push(event);
            }
        }
        Ok(out)
    }
}

/// Spool events written at a time once the old trace is merged, so that a
/// large spool is never held in memory whole, and the trace can be folded
/// between them.
const SPOOL_EVENTS_AT_A_TIME: usize = 65_536;

/// Where the merge writes.
struct Output<'a> {
    trace: &'a mut TraceWriter<BufWriter<std::fs::File>>,
    /// The file being written (a temporary one beside the destination),
    /// which a fold rewrites.
    writing: &'a Path,
    /// The trace's cap, and the folds done to keep it.
    schedule: FoldSchedule,
    destination: &'a Path,
    summary: CollectionSummary,
    next_index: u32,
    stacks: cudatrace_analysis::StackCatalog,
}

impl Output<'_> {
    fn io(&self, e: std::io::Error) -> String {
        collector_lines::cannot_do(collector_lines::WRITE, self.destination, &e)
    }

    fn start(&mut self, merge: &mut Merge, mut start: ProcessStart) -> Result<u32, String> {
        if let Some(index) = merge.index {
            return Ok(index);
        }
        start.process = self.next_index;
        self.next_index += 1;
        merge.index = Some(start.process);
        self.summary.processes += 1;
        self.trace.process_start(&start).map_err(|e| self.io(e))?;
        Ok(start.process)
    }

    fn events(&mut self, index: u32, events: &[Event]) -> Result<(), String> {
        if events.is_empty() {
            return Ok(());
        }
        self.stacks.observe(index, events);
        self.schedule
            .write_events(self.trace, self.writing, index, events)
            .map_err(|e| self.io(e))
    }
}

/// What `collect` found besides events.
pub struct Recovered {
    /// Counts for the summary line.
    pub summary: CollectionSummary,
    /// Damage found in the old trace.
    pub old_trace_damage: Vec<Damage>,
}

/// The trace a collector of `dir` was writing, if the folder names one that
/// exists: `Ok(None)` when it names none. Refused (`Err`, with the reason)
/// where following the name could hand another user's file to this one: a
/// pointer file or a trace not owned by the invoking user (in a shared
/// folder anyone can write the pointer), a link, or a file that is not a
/// cudatrace trace, which must never be replaced.
pub fn trace_named_in(dir: &Path) -> Result<Option<PathBuf>, String> {
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::MetadataExt;
    let pointer = dir.join(naming::TRACE_POINTER);
    let Ok(pointer_meta) = std::fs::symlink_metadata(&pointer) else {
        return Ok(None);
    };
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    if !pointer_meta.is_file() || pointer_meta.uid() != me {
        return Err(collector_lines::pointer_ignored(
            &pointer,
            collector_lines::not_this_users_file(me),
        ));
    }
    let named = std::fs::read(&pointer).map_err(|e| collector_lines::pointer_ignored(&pointer, e))?;
    let path = PathBuf::from(std::ffi::OsString::from_vec(named));
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return Ok(None);
    };
    if !meta.is_file() || meta.uid() != me {
        return Err(collector_lines::pointer_names_foreign_file(&pointer, &path, me));
    }
    // Empty: a trace its collector has claimed and not yet begun.
    let mut magic = [0u8; 8];
    let is_trace = meta.len() == 0
        || std::fs::File::open(&path)
            .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut magic))
            .is_ok_and(|()| magic == cudatrace_trace::MAGIC);
    if !is_trace {
        return Err(collector_lines::pointer_names_no_trace(&pointer, &path));
    }
    Ok(Some(path))
}

/// The header of the old trace, if it has a readable one.
fn old_header(old: Option<&Path>) -> Option<Header> {
    let file = std::fs::File::open(old?).ok()?;
    match TraceReader::new(BufReader::new(file)).ok()?.next_record() {
        Ok(Some(Record::Header(header))) => Some(header),
        _ => None,
    }
}

/// Spools of `dir` by (pid, image): opened, refused, or unreadable.
fn open_spools(
    dir: &Path,
    refusals: &mut Vec<Refusal>,
    damaged: &mut Vec<DamagedSpool>,
) -> Result<BTreeMap<Key, (SpoolTail, SpoolHeaderInfo)>, String> {
    let paths = naming::spool_files_in(dir).map_err(|e| collect_lines::cannot_read(dir, e))?;
    let mut spools = BTreeMap::new();
    for path in paths {
        let Some((pid, image)) = naming::parse_spool_file_name(&path) else {
            continue;
        };
        match check_spool_file(&path) {
            Ok(()) => {}
            Err(None) => continue,
            Err(Some(refusal)) => {
                refusals.push(refusal);
                continue;
            }
        }
        match SpoolTail::open(&path, 0, image, false) {
            Ok(opened) => {
                spools.insert((pid, image), opened);
            }
            Err(error) => damaged.push(damaged_spool(&path, pid, image, &error)),
        }
    }
    Ok(spools)
}

/// Ends every process image merged, in key order.
fn finish_processes(merges: &mut BTreeMap<Key, Merge>, out: &mut Output) -> Result<(), String> {
    let mut latest_image: HashMap<u32, u32> = HashMap::new();
    for &(pid, image) in merges.keys() {
        let latest = latest_image.entry(pid).or_insert(image);
        *latest = (*latest).max(image);
    }
    for (&(pid, image), merge) in merges.iter_mut() {
        // An image followed by another of the same pid ended at its exec.
        let superseded = latest_image[&pid] > image;
        finish_process(merge, superseded, out)?;
    }
    Ok(())
}

/// Writes what the trace says beside the events: refused spools, the
/// processes that could not record (once each), damaged spools and the
/// stacks' records.
fn write_notices(
    dir: &Path,
    merges: &BTreeMap<Key, Merge>,
    out: &mut Output,
    refusals: &[Refusal],
    mut unrecorded: Vec<UnrecordedProcess>,
    damaged: &[DamagedSpool],
) -> Result<(), String> {
    for refusal in refusals {
        out.summary.refused += 1;
        out.trace.refused(refusal).map_err(|e| out.io(e))?;
    }
    // The notice file holds every line, those the old trace has included;
    // so do the spool headers' child-failure slots.
    unrecorded.extend(NoticeTail::new(dir).read_new());
    for (tail, _) in merges.values().filter_map(|merge| merge.spool.as_ref()) {
        unrecorded.extend(crate::collector::spool_tail::child_failures(&tail.header(), dir));
    }
    let mut noted = HashSet::new();
    for process in unrecorded.into_iter().filter(|p| noted.insert(p.clone())) {
        out.trace
            .record(&Record::Unrecorded(process.clone()))
            .map_err(|e| out.io(e))?;
        out.summary.unrecorded.push(process);
    }
    for damage in damaged {
        out.summary.damaged_spools += 1;
        out.trace.damaged_spool(damage).map_err(|e| out.io(e))?;
    }
    // The symbols, the switch records and the footer must fit under the cap too.
    let mut last = std::mem::take(&mut out.stacks).into_records();
    last.extend(crate::collector::switch_log::records(dir));
    out.schedule.fold_before_the_end(out.trace, out.writing, &last);
    for record in &last {
        out.trace.record(record).map_err(|e| out.io(e))?;
    }
    Ok(())
}

/// Writes the trace of `dir` (merging `old`, the trace its collector was
/// writing, if any) to `file`, open at `writing`, which becomes
/// `destination`; folded, like a live collection's, to stay under `cap`.
pub fn recover(
    dir: &Path,
    old: Option<&Path>,
    (file, writing): (std::fs::File, &Path),
    destination: &Path,
    cap: Option<u64>,
) -> Result<(Recovered, std::fs::File), String> {
    let io = |e: std::io::Error| collector_lines::cannot_do(collector_lines::WRITE, destination, &e);
    let mut refusals = Vec::new();
    let mut damaged = Vec::new();
    let spools = open_spools(dir, &mut refusals, &mut damaged)?;
    let header = old_header(old).unwrap_or_else(|| {
        let first = spools.values().min_by_key(|(_, h)| h.process.start_monotonic_ns);
        header_for(first.map(|(_, h)| h.process.argv.clone()).unwrap_or_default())
    });
    let header = Header {
        tracer_version: env!("CARGO_PKG_VERSION").to_string(),
        ..header
    };
    let mut trace = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), &header).map_err(io)?;
    let mut merges: BTreeMap<Key, Merge> = spools
        .into_iter()
        .map(|(key, spool)| (key, Merge::new(Some(spool))))
        .collect();
    let mut out = Output {
        trace: &mut trace,
        writing,
        schedule: FoldSchedule::new(cap),
        destination,
        summary: CollectionSummary::default(),
        next_index: 0,
        stacks: Default::default(),
    };
    let mut old_trace_damage = Vec::new();
    let mut refused_paths: HashSet<String> = refusals.iter().map(|r| r.path.clone()).collect();
    let mut damaged_keys: HashSet<Key> = damaged.iter().map(|d| (d.pid, d.image)).collect();
    let mut unrecorded = Vec::new();
    if let Some(old) = old {
        merge_old_trace(
            old,
            &mut merges,
            &mut out,
            &mut old_trace_damage,
            &mut refusals,
            &mut refused_paths,
            &mut damaged,
            &mut damaged_keys,
            &mut unrecorded,
        )?;
    }
    finish_processes(&mut merges, &mut out)?;
    write_notices(dir, &merges, &mut out, &refusals, unrecorded, &damaged)?;
    let mut summary = out.summary;
    summary.folds = out.schedule.folds;
    summary.events = trace.events_written();
    summary.lost_events = trace.lost_events();
    summary.folded_events = trace.folded_events();
    let footer = Footer {
        processes: summary.processes,
        events: summary.events,
        dropped_events: summary.dropped_events,
        refused_spools: summary.refused,
        end_realtime_ns: crate::collector::realtime_ns(),
        lost_events: summary.lost_events,
        damaged_spools: summary.damaged_spools,
    };
    trace.footer(&footer).map_err(io)?;
    summary.bytes = trace.bytes_written();
    let mut buffered = trace.into_inner();
    buffered.flush().map_err(io)?;
    let file = buffered.into_inner().map_err(|e| io(e.into_error()))?;
    Ok((
        Recovered {
            summary,
            old_trace_damage,
        },
        file,
    ))
}

#[allow(clippy::too_many_arguments)]
fn merge_old_trace(
    old: &Path,
    merges: &mut BTreeMap<Key, Merge>,
    out: &mut Output,
    damage: &mut Vec<Damage>,
    refusals: &mut Vec<Refusal>,
    refused_paths: &mut HashSet<String>,
    damaged: &mut Vec<DamagedSpool>,
    damaged_keys: &mut HashSet<Key>,
    unrecorded: &mut Vec<UnrecordedProcess>,
) -> Result<(), String> {
    let file = std::fs::File::open(old).map_err(|e| output_lines::cannot_open(old, e))?;
    let reader = match TraceReader::new(BufReader::with_capacity(1 << 20, file)) {
        Ok(reader) => reader,
        Err(error) => {
            damage.push(error);
            return Ok(());
        }
    };
    let mut keys: HashMap<u32, Key> = HashMap::new();
    for record in reader {
        let record = match record {
            Ok(record) => record,
            Err(error) => {
                damage.push(error);
                continue;
            }
        };
        match record {
            Record::Process(start) => {
                let key = (start.pid, start.image);
                keys.insert(start.process, key);
                let merge = merges.entry(key).or_insert_with(|| Merge::new(None));
                out.start(merge, start)?;
            }
            Record::Events { process, events } => {
                let Some(merge) = keys.get(&process).and_then(|key| merges.get_mut(key)) else {
                    continue;
                };
                let index = merge.index.expect("started when its process record was read");
                let merged = merge.merge_block(events)?;
                out.events(index, &merged)?;
            }
            Record::ProcessEnd(end) => {
                if let Some(merge) = keys.get(&end.process).and_then(|key| merges.get_mut(key)) {
                    merge.old_end = Some(end);
                }
            }
            Record::Refused(refusal) => {
                if refused_paths.insert(refusal.path.clone()) {
                    refusals.push(refusal);
                }
            }
            Record::DamagedSpool(spool) => {
                if damaged_keys.insert((spool.pid, spool.image)) && !merges.contains_key(&(spool.pid, spool.image)) {
                    damaged.push(spool);
                }
            }
            Record::Unrecorded(process) => unrecorded.push(process),
            Record::Fold(mut fold) => {
                let Some(merge) = keys.get(&fold.process).and_then(|key| merges.get_mut(key)) else {
                    continue;
                };
                merge.folded_to = fold.folded_to;
                fold.process = merge.index.expect("started when its process record was read");
                out.trace.record(&Record::Fold(fold)).map_err(|e| out.io(e))?;
            }
            Record::StepsState(mut state) => {
                let Some(merge) = keys.get(&state.process).and_then(|key| merges.get(key)) else {
                    continue;
                };
                state.process = merge.index.expect("started when its process record was read");
                out.trace.record(&Record::StepsState(state)).map_err(|e| out.io(e))?;
            }
            Record::LowPointsState(mut state) => {
                let Some(merge) = keys.get(&state.process).and_then(|key| merges.get(key)) else {
                    continue;
                };
                state.process = merge.index.expect("started when its process record was read");
                out.trace
                    .record(&Record::LowPointsState(state))
                    .map_err(|e| out.io(e))?;
            }
            record @ (Record::Nvml(_) | Record::NvmlStatus(_)) => {
                out.schedule.make_room_for(out.trace, out.writing, &record);
                out.trace.record(&record).map_err(|e| out.io(e))?;
            }
            // Written again from the spool folder's switch file at the end.
            Record::Header(_)
            | Record::RecordingSwitch(_)
            | Record::Footer(_)
            | Record::String { .. }
            | Record::Symbols { .. }
            | Record::Unknown { .. } => {}
        }
    }
    Ok(())
}

/// Writes what the spool holds after everything already written, and how
/// the process ended.
fn finish_process(merge: &mut Merge, superseded: bool, out: &mut Output) -> Result<(), String> {
    let index = match (&merge.spool, merge.index) {
        (_, Some(index)) => index,
        (Some((tail, header)), None) => {
            let start = tail.start_record(header);
            out.start(merge, start)?
        }
        (None, None) => return Ok(()),
    };
    loop {
        let rest = merge.spool_events_below(u64::MAX, SPOOL_EVENTS_AT_A_TIME)?;
        if rest.is_empty() {
            break;
        }
        out.events(index, &rest)?;
    }
    let end = match merge.spool.as_mut() {
        Some((tail, _)) => {
            let header = tail.header();
            tail.finish(&header);
            let gone = superseded || Liveness::watch(tail.pid).is_dead();
            if gone && tail.cursor.damaged == 0 {
                out.summary.collected.push(tail.path.clone());
            }
            let (status, time) = match (header.process.exit, &merge.old_end) {
                (_, Some(old)) if old.exit_status.is_some() => (old.exit_status, old.exit_time_ns),
                (Some((status, time)), _) => (Some(status), Some(time)),
                (None, Some(old)) => (old.exit_status, old.exit_time_ns),
                (None, None) => (None, None),
            };
            let mut end = tail.end_record(&header, status, time, !gone);
            end.process = index;
            end
        }
        None => match merge.old_end.clone() {
            Some(mut end) => {
                end.process = index;
                end
            }
            None => return Ok(()),
        },
    };
    out.summary.dropped_events += end.dropped_records;
    out.summary.still_running += u64::from(end.still_running);
    if let Some(errno) = end.drop_errno {
        out.summary.drop_errno.get_or_insert(errno);
    }
    out.trace.process_end(&end).map_err(|e| out.io(e))
}
