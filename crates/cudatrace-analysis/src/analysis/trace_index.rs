//! The first pass over a trace: everything but the events themselves.

use super::unreadable::UnreadableTrace;
use cudatrace_events::measures::{DeviceInfo, DEVICE_BLOB};
use cudatrace_events::recording_switch::Switch;
use cudatrace_events::stacks::{BlobAssembler, BlobPiece, StackNode};
use cudatrace_events::{Event, Op};
use cudatrace_trace::{
    Damage, DamagedSpool, Fold, Header, LowPointsState, NvmlSample, NvmlStatus, ProcessEnd, ProcessStart, Record,
    Refusal, StepsState, SymbolFrame, TraceReader, UnrecordedProcess,
};
use foldhash::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Where one block of a process's events lies in the file.
#[derive(Clone, Copy, Debug)]
pub struct BlockRef {
    /// Byte offset of its frame.
    pub offset: u64,
    /// The time of its first event: the replay wants the blocks of all
    /// processes in about this order.
    pub first_time_ns: u64,
}

/// One process image of the trace.
#[derive(Debug)]
pub struct ProcessIndex {
    /// Its start record.
    pub start: ProcessStart,
    /// Its end record, if the trace has one.
    pub end: Option<ProcessEnd>,
    /// Its event blocks, in file (and sequence) order.
    pub blocks: Vec<BlockRef>,
    /// Memory events (not stack records) in its blocks.
    pub memory_events: u64,
    /// Its stack nodes, by id.
    pub stack_nodes: HashMap<u32, StackNode>,
    /// The source frames of its stack nodes, from the trace's symbols.
    pub stack_symbols: HashMap<u32, Vec<SymbolFrame>>,
    /// Time of its first and last memory events.
    pub first_time_ns: Option<u64>,
    /// See `first_time_ns`.
    pub last_time_ns: Option<u64>,
    /// Its measurement records (samples, contexts, loads, pools, graphs),
    /// in sequence order: few enough to keep.
    pub measurements: Vec<Event>,
    /// The devices it described, by ordinal.
    pub devices: HashMap<u32, DeviceInfo>,
    /// Tensor records (PyTorch's caching allocator's actions) in its blocks.
    pub tensor_actions: u64,
    /// Its tensor-status records, in sequence order.
    pub tensor_status: Vec<Event>,
    /// The children it forked while it had a spool: (time, child's pid).
    pub forks: Vec<(u64, u32)>,
    /// What folding left of its older events, if the trace was folded.
    pub fold: Option<Fold>,
    /// Its steps as they stood at the fold's cut, if it had steps then.
    pub steps_state: Option<StepsState>,
    /// The low points that folds took away, where the process is measured
    /// at low points (see [`LowPointsState`]).
    pub low_points_state: Option<LowPointsState>,
    blobs: BlobAssembler,
}

/// What a first read of a trace learned.
pub struct TraceIndex {
    /// The trace's path.
    pub path: PathBuf,
    /// The file, opened once for the second pass.
    pub file: File,
    /// Its header record.
    pub header: Option<Header>,
    /// Its process images, in the order they appear.
    pub processes: Vec<ProcessIndex>,
    /// Spools the collector refused.
    pub refused: Vec<Refusal>,
    /// Spools that could not be read at all.
    pub damaged_spools: Vec<DamagedSpool>,
    /// Processes that could not record (they have no events here).
    pub unrecorded: Vec<UnrecordedProcess>,
    /// Whether the trace ended with its footer.
    pub complete: bool,
    /// Where reading stopped early, if it did.
    pub damage: Option<Damage>,
    /// Damaged frames that were skipped, reading on after each.
    pub skipped: Vec<Damage>,
    /// Records read.
    pub records: u64,
    /// Interned texts of stack frames.
    pub strings: HashMap<u64, String>,
    /// Memory events in all blocks.
    pub memory_events: u64,
    /// Events of every sort (stack records too) in all blocks.
    pub events: u64,
    /// The collector's NVML readings, in time order.
    pub nvml: Vec<NvmlSample>,
    /// What the collector said about NVML.
    pub nvml_status: Vec<NvmlStatus>,
    /// The job's recording switches, in order (`cudatrace pause`, `resume`).
    pub switches: Vec<Switch>,
    /// The run's first instant, as (`CLOCK_MONOTONIC`, wall clock) ns.
    origin: (u64, u64),
    index_of: HashMap<u32, usize>,
}

/// Records read and decoded ahead of the one being indexed, at most: a
/// few megabytes of events.
const RECORDS_READ_AHEAD: usize = 16;

/// What [`TraceIndex::read_observing`] hands each block of events to: the
/// index so far, the process's place, the block's offset and its events.
pub type BlockObserver<'a> = dyn FnMut(&TraceIndex, usize, u64, &[Event]) + 'a;

impl TraceIndex {
    /// Reads the trace at `path`. Fails only when it cannot be opened or is
    /// not a trace; damage further on is kept in `damage` and `skipped`.
    pub fn read(path: &Path) -> Result<TraceIndex, UnreadableTrace> {
        Self::read_observing(path, &mut |_, _, _, _| {})
    }

    /// [`TraceIndex::read`], handing each block of events to `observe` as it
    /// is read: the index so far, the process's place in
    /// [`TraceIndex::processes`], the block's offset and its events. A pass
    /// that needs only the events in file order then needs no read of its
    /// own.
    pub fn read_observing(path: &Path, observe: &mut BlockObserver) -> Result<TraceIndex, UnreadableTrace> {
        crate::system::input_path::check_regular_file(path).map_err(|what| UnreadableTrace::NotRegular {
            path: path.to_path_buf(),
            what,
        })?;
        let cannot_open = |e: std::io::Error| UnreadableTrace::CannotOpen {
            path: path.to_path_buf(),
            error: e.to_string(),
        };
        let file = File::open(path).map_err(cannot_open)?;
        let reader = TraceReader::new(std::io::BufReader::with_capacity(
            1 << 20,
            file.try_clone().map_err(cannot_open)?,
        ))
        .map_err(|damage| UnreadableTrace::Damaged {
            path: path.to_path_buf(),
            damage,
        })?;
        let mut index = TraceIndex {
            path: path.to_path_buf(),
            file,
            header: None,
            processes: Vec::new(),
            refused: Vec::new(),
            damaged_spools: Vec::new(),
            unrecorded: Vec::new(),
            complete: false,
            damage: None,
            skipped: Vec::new(),
            records: 0,
            strings: HashMap::default(),
            memory_events: 0,
            events: 0,
            nvml: Vec::new(),
            nvml_status: Vec::new(),
            switches: Vec::new(),
            origin: (0, 0),
            index_of: HashMap::default(),
        };
        let mut take = |offset: u64, read: Result<Option<Record>, Damage>| -> bool {
            let record = match read {
                Ok(Some(record)) => record,
                Ok(None) => return false,
                Err(damage) if damage.skipped => {
                    index.skipped.push(damage);
                    return true;
                }
                Err(damage) => {
                    index.damage = Some(damage);
                    return false;
                }
            };
            index.records += 1;
            if let Record::Events { process, events } = &record {
                if let Some(&place) = index.index_of.get(process).filter(|_| !events.is_empty()) {
                    observe(&index, place, offset, events);
                }
            }
            index.take(record, offset);
            true
        };
        let mut reader = reader;
        if crate::system::cores::helpers() == 0 {
            loop {
                let offset = reader.offset();
                if !take(offset, reader.next_record()) {
                    break;
                }
            }
        } else {
            // Another core reads and decodes the records while this one
            // indexes them, in order; a few records wait between them.
            std::thread::scope(|scope| {
                let (sender, receiver) = std::sync::mpsc::sync_channel(RECORDS_READ_AHEAD);
                scope.spawn(move || loop {
                    let offset = reader.offset();
                    let read = reader.next_record();
                    let last = matches!(&read, Ok(None)) || matches!(&read, Err(damage) if !damage.skipped);
                    if sender.send((offset, read)).is_err() || last {
                        return;
                    }
                });
                for (offset, read) in receiver {
                    if !take(offset, read) {
                        break;
                    }
                }
            });
        }
        index.origin = index.first_instant();
        Ok(index)
    }

    fn take(&mut self, record: Record, offset: u64) {
        match record {
            Record::Header(header) => self.header = Some(header),
            Record::Process(start) => self.take_process_start(start),
            Record::Events { process, events } => self.take_events(process, &events, offset),
            Record::ProcessEnd(end) => {
                if let Some(process) = self.process_mut(end.process) {
                    // A rank the program set once running is known only at its end.
                    let place = &mut process.start.place;
                    let [rank, local_rank, world_size] = end.ranks_at_end;
                    place.rank = place.rank.or(rank);
                    place.local_rank = place.local_rank.or(local_rank);
                    place.world_size = place.world_size.or(world_size);
                    process.end = Some(end);
                }
            }
            Record::Refused(refusal) => self.refused.push(refusal),
            Record::DamagedSpool(spool) => self.damaged_spools.push(spool),
            Record::Unrecorded(process) => self.unrecorded.push(process),
            Record::Footer(_) => self.complete = true,
            Record::String { id, text } => {
                self.strings.insert(id, text);
            }
            Record::Symbols { process, nodes } => {
                if let Some(process) = self.process_mut(process) {
                    process
                        .stack_symbols
                        .extend(nodes.into_iter().map(|n| (n.node, n.frames)));
                }
            }
            Record::Nvml(sample) => self.nvml.push(sample),
            Record::NvmlStatus(status) => self.nvml_status.push(status),
            Record::RecordingSwitch(switch) => self.switches.push(switch),
            Record::Fold(fold) => {
                if let Some(process) = self.process_mut(fold.process) {
                    process.fold = Some(fold);
                }
            }
            Record::StepsState(state) => {
                if let Some(process) = self.process_mut(state.process) {
                    process.steps_state = Some(state);
                }
            }
            Record::LowPointsState(state) => {
                if let Some(process) = self.process_mut(state.process) {
                    process.low_points_state = Some(state);
                }
            }
            Record::Unknown { .. } => {}
        }
    }

    /// A process's start: its index, empty until its records come.
    fn take_process_start(&mut self, mut start: ProcessStart) {
        // Before format 12 a process's host was the trace's.
        if start.place.host.is_empty() {
            start.place.host = self.header.as_ref().map(|h| h.host.clone()).unwrap_or_default();
        }
        self.index_of.insert(start.process, self.processes.len());
        self.processes.push(ProcessIndex {
            start,
            end: None,
            blocks: Vec::new(),
            memory_events: 0,
            stack_nodes: HashMap::default(),
            stack_symbols: HashMap::default(),
            first_time_ns: None,
            last_time_ns: None,
            measurements: Vec::new(),
            devices: HashMap::default(),
            tensor_actions: 0,
            tensor_status: Vec::new(),
            forks: Vec::new(),
            fold: None,
            steps_state: None,
            low_points_state: None,
            blobs: BlobAssembler::default(),
        });
    }

    /// An events record of `process`: where its block lies, and what the
    /// index keeps of its events (stack nodes, measurements, devices,
    /// counts).
    fn take_events(&mut self, process: u32, events: &[Event], offset: u64) {
        self.events += events.len() as u64;
        let Some(process) = self.process_mut(process) else {
            return;
        };
        if events.is_empty() {
            return;
        }
        process.blocks.push(BlockRef {
            offset,
            first_time_ns: events[0].time_ns,
        });
        let mut memory_events = 0;
        for event in events {
            match StackNode::from_event(event) {
                Some(node) => {
                    process.stack_nodes.insert(node.id, node);
                }
                None if event.op.is_memory_event() => {
                    memory_events += 1;
                    process.first_time_ns.get_or_insert(event.time_ns);
                    process.last_time_ns = Some(event.time_ns);
                }
                None if event.op.is_measurement() => process.measurements.push(event.clone()),
                None if event.op == Op::Tensor => process.tensor_actions += 1,
                None if event.op == Op::TensorStatus => process.tensor_status.push(event.clone()),
                None if event.op == Op::Fork => process.forks.push((event.time_ns, event.arg1 as u32)),
                None => {
                    let whole = BlobPiece::from_event(event).and_then(|piece| process.blobs.add(&piece));
                    if let Some((DEVICE_BLOB, key, bytes)) = whole {
                        if let Some(device) = DeviceInfo::decode(key as u32, &bytes) {
                            process.devices.insert(device.ordinal, device);
                        }
                    }
                }
            }
        }
        process.memory_events += memory_events;
        self.memory_events += memory_events;
    }

    fn process_mut(&mut self, process: u32) -> Option<&mut ProcessIndex> {
        let index = *self.index_of.get(&process)?;
        self.processes.get_mut(index)
    }

    /// The pid of each process index, for decoding blocks again.
    pub fn pid_of(&self, process: u32) -> Option<u32> {
        self.index_of.get(&process).map(|&i| self.processes[i].start.pid)
    }

    /// Whether its processes ran on more than one host (a merged trace):
    /// a pid is then a host's, not the trace's.
    pub fn several_hosts(&self) -> bool {
        let mut hosts = self.processes.iter().map(|p| &p.start.place.host);
        hosts.next().is_some_and(|first| hosts.any(|host| host != first))
    }

    /// The run's first instant: the header's, or an earlier process start
    /// (a collector started by the library writes its header after the
    /// first process started). Computed once: outputs convert every event's
    /// time with it.
    fn first_instant(&self) -> (u64, u64) {
        self.header
            .iter()
            .map(|h| (h.start_monotonic_ns, h.start_realtime_ns))
            .chain(
                self.processes
                    .iter()
                    .map(|p| (p.start.start_monotonic_ns, p.start.start_realtime_ns)),
            )
            .min_by_key(|&(monotonic, _)| monotonic)
            .unwrap_or((0, 0))
    }

    /// `CLOCK_MONOTONIC` at the start of the run.
    pub fn start_ns(&self) -> u64 {
        self.origin.0
    }

    /// Wall clock at `start_ns`, ns since the Unix epoch.
    pub fn start_realtime_ns(&self) -> u64 {
        self.origin.1
    }

    /// Wall-clock microseconds since the epoch of monotonic time `time_ns`.
    pub fn epoch_us(&self, time_ns: u64) -> u64 {
        let since_start = time_ns as i128 - self.start_ns() as i128;
        ((self.start_realtime_ns() as i128 + since_start).max(0) / 1000) as u64
    }

    /// Where the trace was folded (see [`Fold`]): the moment from which
    /// every process is in full detail; before it, only the state kept at
    /// the fold, the peaks and the OOMs. `None` for a trace never folded.
    pub fn detail_from_ns(&self) -> Option<u64> {
        self.processes
            .iter()
            .filter_map(|p| p.fold.as_ref().map(|f| f.detail_from_ns))
            .max()
    }

    /// Memory events recorded but folded away (see [`Fold`]).
    pub fn folded_events(&self) -> u64 {
        self.processes
            .iter()
            .filter_map(|p| p.fold.as_ref().map(|f| f.folded_events))
            .sum()
    }

    /// The latest time of any memory event or process exit.
    pub fn end_ns(&self) -> u64 {
        self.processes
            .iter()
            .flat_map(|p| [p.last_time_ns, p.end.as_ref().and_then(|e| e.exit_time_ns)])
            .flatten()
            .max()
            .unwrap_or_else(|| self.start_ns())
    }
}
