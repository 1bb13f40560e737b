//! `cudatrace merge`'s output: the traces of several hosts (one
//! `cudatrace run` per node) as one trace.
//!
//! Each input's records are copied in their order, one input after the
//! other, with three changes (see `cudatrace_trace::relabel`):
//!
//! - times move onto one clock. Every host's events are stamped with its
//!   own `CLOCK_MONOTONIC`, which starts at its boot; each trace's header
//!   holds a reading of that clock and of the wall clock at one instant.
//!   An input's times move by the difference between its
//!   wall-minus-monotonic offset and the reference input's, so that two
//!   events that happened at the same wall-clock instant on two hosts have
//!   the same time in the merged trace. The reference is the input whose
//!   earliest time (of any record) is the earliest on the wall clock, not
//!   the earliest header: a trace collected by hand has its header stamped
//!   at collect time, after its events. Every time then moves onto the
//!   reference's clock at or after that earliest one, so none is negative
//!   (a time off the clock's ends would be clamped, and said);
//! - process images are numbered anew, in the order they come;
//! - the ids of symbol texts move past those of the inputs before.
//!
//! Each process keeps its host: processes of traces written before the
//! host was recorded per process get their trace's. The merged trace's
//! footer is written only when every input was whole, undamaged and placed
//! in full: a merged trace that lacks events says so.
//!
//! Each input is read twice: first for its earliest time and the process
//! images it holds, so that one run given twice (a copy, or a merged trace
//! that holds it already) is refused before anything is written; then to
//! copy it.

use cudatrace_analysis::{MergeSummary, ProcessImage};
use cudatrace_trace::relabel::{highest_string_id, monotonic_times_mut, process_of, renumber, shift_times};
use cudatrace_trace::{Damage, Footer, Header, Record, TraceReader, TraceWriter, FORMAT_VERSION};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Write};
use std::path::{Path, PathBuf};

/// One input trace: its path, its header and what a first reading found.
/// Inputs are read one after the other, each opened only while it is read,
/// so that a job of thousands of ranks' traces needs no more descriptors
/// or memory than one (and a list of its process images).
pub struct MergeInput {
    /// Its path.
    pub path: PathBuf,
    /// Its header.
    pub header: Header,
    /// Its earliest `CLOCK_MONOTONIC` time, of any record (its header's
    /// start included), on its own clock.
    earliest_ns: u64,
    /// Every process image it holds.
    processes: Vec<ProcessImage>,
}

/// Two inputs that hold one run: merged, every byte would count twice.
#[derive(Debug, PartialEq, Eq)]
pub struct SameRun {
    /// The earlier input.
    pub first: usize,
    /// The later one.
    pub again: usize,
    /// A process image both hold; `None` when their headers are the same
    /// (host and both start clocks: one collection of one run).
    pub process: Option<ProcessImage>,
}

/// The first input that holds a run an input before it holds: one with
/// the same header, or one holding a process image that an input before it
/// holds (a copy of a trace, the same spools collected twice, or a merged
/// trace that holds the other input already).
pub fn same_run(inputs: &[MergeInput]) -> Option<SameRun> {
    let mut headers: HashMap<(&str, u64, u64), usize> = HashMap::new();
    let mut processes: HashMap<&ProcessImage, usize> = HashMap::new();
    for (again, input) in inputs.iter().enumerate() {
        let header = &input.header;
        let key = (
            header.host.as_str(),
            header.start_realtime_ns,
            header.start_monotonic_ns,
        );
        if let Some(&first) = headers.get(&key) {
            return Some(SameRun {
                first,
                again,
                process: None,
            });
        }
        if let Some((&first, process)) = input
            .processes
            .iter()
            .find_map(|process| processes.get(process).map(|first| (first, process)))
        {
            return Some(SameRun {
                first,
                again,
                process: Some(process.clone()),
            });
        }
        headers.insert(key, again);
        for process in &input.processes {
            processes.entry(process).or_insert(again);
        }
    }
    None
}

/// Why an input cannot be merged at all.
pub enum InputFault {
    /// It could not be opened.
    CannotOpen(io::Error),
    /// It is not a trace, or its start is damaged.
    Damaged(Damage),
    /// It has no header record.
    NoHeader,
}

/// Opens `path` and reads past its header.
fn open(path: &Path) -> Result<(Header, TraceReader<BufReader<File>>), InputFault> {
    let file = File::open(path).map_err(InputFault::CannotOpen)?;
    let mut reader = TraceReader::new(BufReader::with_capacity(1 << 20, file)).map_err(InputFault::Damaged)?;
    match reader.next_record() {
        Ok(Some(Record::Header(header))) => Ok((header, reader)),
        Ok(_) => Err(InputFault::NoHeader),
        Err(damage) => Err(InputFault::Damaged(damage)),
    }
}

impl MergeInput {
    /// Reads `path` as far as it reads: its header, its earliest time and
    /// its process images (the file is closed again). Damage is said when
    /// the input is copied.
    pub fn open(path: &Path) -> Result<MergeInput, InputFault> {
        let (header, mut reader) = open(path)?;
        let mut earliest_ns = header.start_monotonic_ns;
        let mut processes = Vec::new();
        loop {
            let mut record = match reader.next_record() {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(damage) if damage.skipped => continue,
                Err(_) => break,
            };
            if let Record::Process(start) = &record {
                processes.push(ProcessImage::of(start, &header));
            }
            monotonic_times_mut(&mut record, |time| earliest_ns = earliest_ns.min(*time));
        }
        Ok(MergeInput {
            path: path.to_path_buf(),
            header,
            earliest_ns,
            processes,
        })
    }

    /// Its wall clock minus its monotonic clock, at its start.
    fn clock_offset(&self) -> i128 {
        i128::from(self.header.start_realtime_ns) - i128::from(self.header.start_monotonic_ns)
    }

    /// Its earliest time, on the wall clock.
    fn earliest_wall_ns(&self) -> i128 {
        i128::from(self.earliest_ns) + self.clock_offset()
    }
}

/// Why merging stopped.
pub enum MergeFailure {
    /// An input that could be read at first could not be opened again.
    Input(PathBuf, InputFault),
    /// The output could not be written.
    Output(io::Error),
}

impl From<io::Error> for MergeFailure {
    fn from(error: io::Error) -> Self {
        MergeFailure::Output(error)
    }
}

/// The merged trace's header: the reference input's clocks, every host
/// named once (an input that is itself merged names several), and that
/// input's command.
fn merged_header(inputs: &[MergeInput], reference: usize) -> Header {
    let mut hosts: Vec<&str> = Vec::new();
    for host in inputs.iter().flat_map(|input| input.header.host.split(", ")) {
        if !hosts.contains(&host) {
            hosts.push(host);
        }
    }
    let first = &inputs[reference].header;
    Header {
        format_version: FORMAT_VERSION,
        tracer_version: env!("CARGO_PKG_VERSION").to_string(),
        host: hosts.join(", "),
        start_realtime_ns: first.start_realtime_ns,
        start_monotonic_ns: first.start_monotonic_ns,
        command: first.command.clone(),
    }
}

/// The nanoseconds that move times of a clock with `offset` onto the
/// reference's, as an `i64` (hosts' clocks are centuries closer than that).
fn shift_between(offset: i128, reference: i128) -> i64 {
    i64::try_from(offset - reference).unwrap_or(if offset > reference { i64::MAX } else { i64::MIN })
}

/// Merges `inputs` (at least one) into `out`.
pub fn write<W: Write>(inputs: &[MergeInput], out: W) -> Result<MergeSummary, MergeFailure> {
    let reference = (0..inputs.len())
        .min_by_key(|&i| inputs[i].earliest_wall_ns())
        .expect("at least one input");
    let reference_offset = inputs[reference].clock_offset();
    let mut writer = TraceWriter::new(out, &merged_header(inputs, reference))?;
    let mut summary = MergeSummary::default();
    let mut footer = Footer::default();
    let (mut next_process, mut string_base) = (0u32, 0u64);
    for input in inputs {
        let (_, mut reader) = open(&input.path).map_err(|fault| MergeFailure::Input(input.path.clone(), fault))?;
        let shift = shift_between(input.clock_offset(), reference_offset);
        let mut numbers: HashMap<u32, u32> = HashMap::new();
        let (mut damage, mut complete, mut highest_string, mut left_out) = (Vec::new(), false, 0u64, 0u64);
        let mut clamped = 0;
        loop {
            let mut record = match reader.next_record() {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(found) => {
                    let stopped = !found.skipped;
                    damage.push(found);
                    if stopped {
                        break;
                    }
                    continue;
                }
            };
            if let Record::Process(start) = &mut record {
                numbers.entry(start.process).or_insert_with(|| {
                    next_process += 1;
                    next_process - 1
                });
                if start.place.host.is_empty() {
                    start.place.host.clone_from(&input.header.host);
                }
            }
            // A record of a process whose start record was damaged cannot be
            // placed; a text id 0 is "unknown", never a text.
            let orphan = process_of(&record).is_some_and(|p| !numbers.contains_key(&p));
            let empty_text = matches!(record, Record::String { id: 0, .. });
            highest_string = highest_string.max(highest_string_id(&record));
            if orphan || empty_text || renumber(&mut record, |p| numbers[&p], string_base).is_err() {
                left_out += 1;
                continue;
            }
            clamped += shift_times(&mut record, shift);
            match &record {
                Record::Header(_) | Record::Unknown { .. } => continue,
                Record::Footer(input_footer) => {
                    complete = true;
                    footer.dropped_events += input_footer.dropped_events;
                    footer.end_realtime_ns = footer.end_realtime_ns.max(input_footer.end_realtime_ns);
                    continue;
                }
                Record::Refused(_) => footer.refused_spools += 1,
                Record::DamagedSpool(_) => footer.damaged_spools += 1,
                _ => {}
            }
            match &record {
                Record::Events { process, events } => writer.events(*process, events)?,
                Record::ProcessEnd(end) => writer.process_end(end)?,
                other => writer.record(other)?,
            }
        }
        // The next input's texts come after every id this one defined or
        // referred to (an id whose text was lost stays this input's).
        string_base = string_base.saturating_add(highest_string);
        summary.shifts_ns.push(shift);
        summary.processes.push(numbers.len() as u64);
        summary.damage.push(damage);
        summary.left_out.push(left_out);
        summary.complete.push(complete);
        summary.clamped.push(clamped);
    }
    summary.footer_written = summary.complete.iter().all(|&c| c)
        && summary.damage.iter().all(Vec::is_empty)
        && summary.left_out.iter().all(|&n| n == 0);
    if summary.footer_written {
        footer.processes = u64::from(next_process);
        footer.events = writer.events_written();
        footer.lost_events = writer.lost_events();
        writer.footer(&footer)?;
    }
    writer.flush()?;
    Ok(summary)
}
