//! Which of a trace's older events a fold keeps (see `docs/trace-format.md`,
//! "Folded traces").
//!
//! Below each process's cut, a fold keeps a *subset* of the events: every
//! stack record, measurement and process record, every OOM, and, of the
//! allocations (driver memory, PyTorch's tensors and its segments), the
//! events of those that were live at one of the moments that must stay
//! exact:
//!
//! - the cut itself, so that the detailed part starts from the right state;
//! - each device's peak, per measure (device memory, tensors' allocated
//!   bytes, PyTorch's reserved bytes, pinned host memory);
//! - each OOM, up to [`OOM_STATES_KEPT`] a device;
//! - of driver memory on a device, the moment its first context record
//!   came and each reading of its memory that the footprint stands on
//!   (NVML's, or the process's own): the footprint takes the context as
//!   what the context's reading leaves beyond the memory live then, and
//!   what each reading leaves unexplained as the reading less the memory
//!   live then, so those live sets must be whole for a folded trace to
//!   explain every byte as the whole one does.
//!
//! A kept allocation keeps its allocation event and the events that end it.
//! Replaying a subset of allocations never shows more memory in use than
//! the whole did, at any moment; at a moment whose live allocations are all
//! kept it shows exactly as much. So the replayed peak of a folded trace is
//! the true peak, at the true time, with the true live set, and folding a
//! folded trace again keeps it (the peak moment is found again).

use super::device_stats::OOM_STATES_KEPT;
use super::engine::{Consumer, Step};
use super::footprint::footprint_reading_times;
use super::replay::{Allocation, Change};
use super::trace_index::TraceIndex;
use cudatrace_events::tensors::{action_of, Action};
use cudatrace_events::{Event, Kind, Op};
use cudatrace_trace::FoldedSite;
use foldhash::{HashMap, HashSet};
use std::convert::Infallible;

/// What a fold keeps of one process image's events below its cut.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Sequence numbers below the cut that stay in the trace.
    pub below_cut: HashSet<u64>,
    /// The process's cut: every event from here on stays in full detail.
    pub folded_to: u64,
    /// Events lost below the cut (gaps there, and those an older fold
    /// counted).
    pub lost_below: u64,
    /// Memory events and tensor records folded away, including an older
    /// fold's.
    pub folded_events: u64,
    /// Memory allocated and freed below the cut, per device and call
    /// stack, including an older fold's counts.
    pub sites: Vec<FoldedSite>,
    /// The time of the latest event below the cut: after it, the process
    /// is in full detail.
    pub last_time_below_cut: Option<u64>,
}

/// What an allocation's bytes count towards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Measure {
    DeviceMemory,
    HostMemory,
    Tensors,
    Reserved,
}

/// Something that holds memory from one event to another.
#[derive(Debug)]
struct Held {
    /// The events that made it and, for a tensor, that asked for its free.
    seqs: [u64; 2],
    size: u64,
    device: Option<u8>,
    stack: u32,
    measure: Measure,
    /// Live at a moment that must stay exact (an OOM's, a context's or a
    /// reading's).
    keep: bool,
    /// It replaced, at its address, one whose end was never seen: its
    /// allocation event ends that one, so where that one is kept, its own
    /// end must be too (else the replay would hold it for ever).
    by_reuse: bool,
}

/// How one device's measure went: its peak, and what was live then.
#[derive(Debug, Default)]
struct PeakTracker {
    now: u64,
    peak: u64,
    peak_seq: u64,
    /// Allocations live at the peak that ended after it.
    ended_since_peak: Vec<[u64; 3]>,
}

impl PeakTracker {
    /// `size` more bytes from event `seq`: a new peak forgets what ended
    /// since the last (none of it was live at the new one).
    fn add(&mut self, size: u64, seq: u64) {
        self.now += size;
        if self.now > self.peak {
            self.peak = self.now;
            self.peak_seq = seq;
            self.ended_since_peak.clear();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum HeldKey {
    /// A driver allocation, by its address and creation time.
    Driver(u64, u64),
    /// A tensor's block, by address.
    Tensor(u64),
    /// A segment of PyTorch's, by address.
    Segment(u64),
}

/// One process's pass.
#[derive(Default)]
struct ProcessRetention {
    cut: u64,
    /// Events from here on are all written as they were, so the kept sets
    /// need not hold them: the cut, or the older fold's end if later.
    whole_from: u64,
    held: HashMap<HeldKey, Held>,
    peaks: HashMap<(Option<u8>, Measure), PeakTracker>,
    ooms_kept: HashMap<Option<u8>, usize>,
    /// Kept memory events (driver allocations, frees, maps, OOMs).
    kept: HashSet<u64>,
    /// Kept tensor records.
    kept_tensors: HashSet<u64>,
    /// Kept records of other sorts (stacks, measurements).
    kept_other: HashSet<u64>,
    next_seq: u64,
    lost_below: u64,
    memory_events_below: u64,
    /// Where the older fold stopped: below it, counts are in `sites` already.
    counted_from: u64,
    sites: HashMap<(bool, bool, Option<u8>, u32), FoldedSite>,
    /// Allocations that began by reuse and have ended: their allocation
    /// event → what they count towards, and the events that ended them.
    reuse_ends: HashMap<u64, (Measure, [u64; 2])>,
    last_time_below_cut: Option<u64>,
    /// The readings of each device's memory the footprint stands on, as
    /// (time, device), latest first: the driver memory live at each is kept.
    readings_left: Vec<(u64, u8)>,
    /// Devices whose first context record has been seen.
    contexts_seen: HashSet<u8>,
    /// Driver allocations begun on each device since its live set was last
    /// kept: keeping the live set again needs to look at these only.
    not_yet_kept: HashMap<u8, Vec<HeldKey>>,
}

impl ProcessRetention {
    fn begin(
        &mut self,
        key: HeldKey,
        seq: u64,
        size: u64,
        (device, stack): (Option<u8>, u32),
        measure: Measure,
        mut by_reuse: bool,
    ) {
        if let Some(old) = self.held.remove(&key) {
            // Its end was never seen: it ends here.
            self.end(old, seq);
            by_reuse = true;
        }
        self.peaks.entry((device, measure)).or_default().add(size, seq);
        if let (Measure::DeviceMemory, Some(device)) = (measure, device) {
            self.not_yet_kept.entry(device).or_default().push(key);
        }
        self.held.insert(
            key,
            Held {
                seqs: [seq, u64::MAX],
                size,
                device,
                stack,
                measure,
                keep: false,
                by_reuse,
            },
        );
    }

    fn end_key(&mut self, key: HeldKey, seq: u64) {
        if let Some(held) = self.held.remove(&key) {
            self.end(held, seq);
        }
    }

    fn end(&mut self, held: Held, seq: u64) {
        let peak = self.peaks.entry((held.device, held.measure)).or_default();
        peak.now = peak.now.saturating_sub(held.size);
        let seqs = [held.seqs[0], held.seqs[1], seq];
        if held.seqs[0] <= peak.peak_seq {
            peak.ended_since_peak.push(seqs);
        }
        if held.keep || seq >= self.cut {
            self.keep(held.measure, &seqs);
        }
        if held.by_reuse {
            self.reuse_ends
                .insert(held.seqs[0], (held.measure, [held.seqs[1], seq]));
        }
    }

    /// Keeps an allocation's events; tensor and segment records are not
    /// memory events, and are counted apart.
    fn keep(&mut self, measure: Measure, seqs: &[u64]) {
        let whole_from = self.whole_from;
        let set = match measure {
            Measure::DeviceMemory | Measure::HostMemory => &mut self.kept,
            Measure::Tensors | Measure::Reserved => &mut self.kept_tensors,
        };
        set.extend(seqs.iter().filter(|&&seq| seq < whole_from));
    }

    /// Keeps one event of `measure`'s kind.
    fn keep_one(&mut self, measure: Measure, seq: u64) {
        self.keep(measure, &[seq]);
    }

    fn out_of_memory(&mut self, device: Option<u8>) {
        let states = self.ooms_kept.entry(device).or_default();
        if *states >= OOM_STATES_KEPT {
            return;
        }
        *states += 1;
        let mut kept = Vec::new();
        for held in self.held.values_mut().filter(|h| h.device == device) {
            held.keep = true;
            kept.push((held.measure, held.seqs));
        }
        for (measure, seqs) in kept {
            self.keep(measure, &seqs);
        }
    }

    /// Keeps every driver allocation live on `device` now, as the
    /// footprint counts it at a context record or a reading.
    fn keep_device_memory(&mut self, device: u8) {
        let mut kept = Vec::new();
        for key in self.not_yet_kept.remove(&device).unwrap_or_default() {
            if let Some(held) = self.held.get_mut(&key).filter(|h| !h.keep) {
                held.keep = true;
                kept.push(held.seqs);
            }
        }
        for seqs in kept {
            self.keep(Measure::DeviceMemory, &seqs);
        }
    }

    /// The footprint takes in the readings before an event's time as it
    /// comes (`FootprintTracker::observe`): the live sets at the readings
    /// taken before `time_ns` are kept here at the same point.
    fn pass_readings_until(&mut self, time_ns: u64) {
        while let Some(&(at, device)) = self.readings_left.last() {
            if at >= time_ns {
                break;
            }
            self.readings_left.pop();
            self.keep_device_memory(device);
        }
    }

    fn take(&mut self, event: &Event, changes: &[Change]) {
        let seq = event.seq;
        self.pass_readings_until(event.time_ns);
        if let Some(device) = event.device.filter(|_| event.op == Op::Context) {
            if self.contexts_seen.insert(device) {
                self.keep_device_memory(device);
            }
        }
        if seq < self.cut {
            self.last_time_below_cut = self.last_time_below_cut.max(Some(event.time_ns));
            self.lost_below += seq.saturating_sub(self.next_seq);
            self.next_seq = self.next_seq.max(seq + 1);
            if event.op.is_memory_event() || event.op == Op::Tensor {
                self.memory_events_below += 1;
            }
        }
        if (self.counted_from..self.cut).contains(&seq) {
            self.count(changes);
            self.count_tensor(event);
        }
        match event.op {
            Op::Alloc | Op::Free | Op::Map | Op::Unmap => {
                let by_reuse = changes.iter().any(|c| matches!(c, Change::Freed { reused: true, .. }));
                // Releasing VMM memory still mapped changes nothing until it
                // is unmapped, which then frees it only as released: keep it.
                if event.op == Op::Free && event.kind == Kind::VmmPhysical {
                    self.keep_one(Measure::DeviceMemory, seq);
                }
                for change in changes {
                    match change {
                        Change::Allocated(a) => {
                            self.begin(driver_key(a), seq, a.size, (a.device, a.stack), measure_of(a), by_reuse)
                        }
                        Change::Freed { allocation: a, .. } => self.end_key(driver_key(a), seq),
                        _ => {}
                    }
                }
                if matches!(event.op, Op::Map | Op::Unmap) {
                    self.keep_one(Measure::DeviceMemory, seq);
                }
            }
            Op::Oom => {
                self.keep_one(Measure::DeviceMemory, seq);
                self.out_of_memory(event.device);
            }
            Op::Failed => {}
            Op::Tensor => self.tensor(event),
            op if op.is_memory_event() => {
                self.keep_one(Measure::DeviceMemory, seq);
            }
            _ => {
                if seq < self.whole_from {
                    self.kept_other.insert(seq);
                }
            }
        }
    }

    /// Counts memory allocated and freed, as the summary does.
    fn count(&mut self, changes: &[Change]) {
        for change in changes {
            let (a, freed) = match change {
                Change::Allocated(a) => (a, false),
                Change::Freed { allocation: a, .. } => (a, true),
                _ => continue,
            };
            let host = !a.is_device_memory();
            self.count_site((false, host), a.device, a.stack, (!freed).then_some(a.size));
        }
    }

    /// Counts a tensor allocated (with its call stack) or freed (a free
    /// record has none: it counts where its block was allocated).
    fn count_tensor(&mut self, event: &Event) {
        match action_of(event) {
            Some(Action::Alloc) => self.count_site((true, false), event.device, event.stack, Some(event.size)),
            Some(Action::FreeCompleted) => {
                if let Some(held) = self.held.get(&HeldKey::Tensor(event.address)) {
                    let (device, stack) = (held.device, held.stack);
                    self.count_site((true, false), device, stack, None);
                }
            }
            _ => {}
        }
    }

    /// One allocation of `size` bytes (`Some`), or one free (`None`).
    fn count_site(&mut self, (tensors, host): (bool, bool), device: Option<u8>, stack: u32, size: Option<u64>) {
        let site = self
            .sites
            .entry((tensors, host, device, stack))
            .or_insert_with(|| FoldedSite {
                tensors,
                host,
                device,
                stack,
                ..Default::default()
            });
        match size {
            Some(size) => {
                site.allocations += 1;
                site.bytes += size;
            }
            None => site.frees += 1,
        }
    }

    fn tensor(&mut self, event: &Event) {
        let seq = event.seq;
        match action_of(event) {
            Some(Action::Alloc) => self.begin(
                HeldKey::Tensor(event.address),
                seq,
                event.size,
                (event.device, event.stack),
                Measure::Tensors,
                false,
            ),
            Some(Action::FreeRequested) => {
                if let Some(held) = self.held.get_mut(&HeldKey::Tensor(event.address)) {
                    held.seqs[1] = seq;
                }
            }
            Some(Action::FreeCompleted) => self.end_key(HeldKey::Tensor(event.address), seq),
            Some(Action::SegmentAlloc) => self.begin(
                HeldKey::Segment(event.address),
                seq,
                event.size,
                (event.device, event.stack),
                Measure::Reserved,
                false,
            ),
            Some(Action::SegmentFree) => self.end_key(HeldKey::Segment(event.address), seq),
            Some(Action::SegmentMap) => {
                self.keep_one(Measure::Tensors, seq);
                self.peaks
                    .entry((event.device, Measure::Reserved))
                    .or_default()
                    .add(event.size, seq);
            }
            Some(Action::SegmentUnmap) => {
                self.keep_one(Measure::Tensors, seq);
                let peak = self.peaks.entry((event.device, Measure::Reserved)).or_default();
                peak.now = peak.now.saturating_sub(event.size);
            }
            // The driver's failure under it keeps what was live (and counts
            // against the states kept, as the summary counts them).
            Some(Action::Oom) => {
                self.keep_one(Measure::Tensors, seq);
            }
            Some(Action::Snapshot) | None => {
                self.keep_one(Measure::Tensors, seq);
            }
        }
    }

    /// What is kept once every event has been seen.
    fn finish(mut self, folded_to: u64, older_folded_events: u64) -> Kept {
        // Live at the end, so live at the cut (or made after it): this
        // covers what was live at each peak and is not ended yet.
        let live: Vec<(Measure, [u64; 2])> = self.held.values().map(|h| (h.measure, h.seqs)).collect();
        for (measure, seqs) in live {
            self.keep(measure, &seqs);
        }
        let peaks = std::mem::take(&mut self.peaks);
        for ((_, measure), peak) in peaks {
            for seqs in &peak.ended_since_peak {
                self.keep(measure, seqs);
            }
        }
        // A kept allocation ended by a reuse keeps the reusing one's end,
        // and so on down the chain.
        let mut to_follow: Vec<u64> = self.kept.iter().chain(&self.kept_tensors).copied().collect();
        while let Some(seq) = to_follow.pop() {
            if let Some((measure, ends)) = self.reuse_ends.remove(&seq) {
                self.keep(measure, &ends);
                to_follow.extend(ends.iter().filter(|&&end| end != u64::MAX));
            }
        }
        self.lost_below += folded_to.saturating_sub(self.next_seq);
        let mut below_cut = self.kept;
        below_cut.extend(self.kept_tensors);
        let kept_memory_events = below_cut.iter().filter(|&&seq| seq < folded_to).count() as u64;
        below_cut.extend(self.kept_other);
        below_cut.retain(|&seq| seq < folded_to);
        let mut sites: Vec<FoldedSite> = self.sites.into_values().collect();
        sites.sort_by_key(|s| (s.tensors, s.host, s.device, s.stack));
        Kept {
            folded_events: older_folded_events + self.memory_events_below.saturating_sub(kept_memory_events),
            below_cut,
            folded_to,
            lost_below: self.lost_below,
            sites,
            last_time_below_cut: self.last_time_below_cut,
        }
    }
}

fn driver_key(a: &Allocation) -> HeldKey {
    HeldKey::Driver(a.address, a.time_ns)
}

fn measure_of(a: &Allocation) -> Measure {
    if a.is_device_memory() {
        Measure::DeviceMemory
    } else {
        Measure::HostMemory
    }
}

/// The pass that finds what a fold at `cuts` keeps: `cuts[i]` is process
/// `i`'s first sequence number kept in full detail, or `None` to fold all
/// its events so far. A consumer of a replay of the whole trace.
pub struct RetentionPass {
    processes: Vec<ProcessRetention>,
}

impl RetentionPass {
    /// Nothing seen yet.
    pub fn new(index: &TraceIndex, cuts: &[Option<u64>]) -> RetentionPass {
        let processes = index
            .processes
            .iter()
            .zip(cuts)
            .map(|(info, cut)| {
                let old = info.fold.as_ref();
                let mut readings_left: Vec<(u64, u8)> = footprint_reading_times(index, info)
                    .into_iter()
                    .flat_map(|(device, times)| times.into_iter().map(move |time| (time, device)))
                    .collect();
                readings_left.sort_unstable_by(|a, b| b.cmp(a));
                ProcessRetention {
                    readings_left,
                    cut: cut.unwrap_or(u64::MAX),
                    whole_from: cut.map_or(u64::MAX, |cut| cut.max(old.map_or(0, |f| f.folded_to))),
                    next_seq: old.map_or(0, |f| f.folded_to),
                    lost_below: old.map_or(0, |f| f.lost_below),
                    counted_from: old.map_or(0, |f| f.folded_to),
                    sites: old
                        .iter()
                        .flat_map(|f| &f.sites)
                        .map(|s| ((s.tensors, s.host, s.device, s.stack), s.clone()))
                        .collect(),
                    ..Default::default()
                }
            })
            .collect();
        RetentionPass { processes }
    }

    /// What is kept, once the replay has seen every event.
    pub fn finish(self, index: &TraceIndex, cuts: &[Option<u64>]) -> Vec<Kept> {
        self.processes
            .into_iter()
            .zip(&index.processes)
            .zip(cuts)
            .map(|((process, info), cut)| {
                let old = info.fold.as_ref();
                let folded_to = cut.unwrap_or(process.next_seq).max(old.map_or(0, |f| f.folded_to));
                process.finish(folded_to, old.map_or(0, |f| f.folded_events))
            })
            .collect()
    }
}

impl Consumer for RetentionPass {
    type Error = Infallible;

    fn step(&mut self, step: &Step) -> Result<(), Infallible> {
        self.processes[step.process].take(step.event, step.changes);
        Ok(())
    }
}
