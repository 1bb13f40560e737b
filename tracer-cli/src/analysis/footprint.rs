//! Where every byte the driver holds for a process went: its driver-used
//! bytes on each device (the reference figure) split into allocations by
//! owning library, pools and graph memory beyond live allocations, the
//! context, modules and kernels, and what no measurement covers.
//!
//! Each category is measured when it appears, by the process's own
//! readings of the device around that moment (see
//! `cudatrace_events::measures`); "unexplained" is what is left of the
//! reference figure. The reference is NVML's per-process usage as the
//! collector last read it; without NVML it is the device's used memory as
//! the process last read it, which is only a bound.

use super::owner::owner_of;
use super::replay::Change;
use super::trace_index::{ProcessIndex, TraceIndex};
use cudatrace_events::measures::{limit, sample_reason, DeviceInfo};
use cudatrace_events::{Api, Event, Op};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// Where a reference figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReferenceSource {
    /// NVML's per-process usage, read by the collector.
    Nvml,
    /// The device's used memory, read by the process: other processes'
    /// memory is in it too, so the figure is an upper bound.
    DeviceBound,
}

impl ReferenceSource {
    /// The name JSON and reports use.
    pub fn name(self) -> &'static str {
        match self {
            ReferenceSource::Nvml => "nvml-process",
            ReferenceSource::DeviceBound => "device-used-bound",
        }
    }
}

/// A reference figure: what the driver holds for the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reference {
    /// Bytes.
    pub bytes: u64,
    /// When it was read (`CLOCK_MONOTONIC` ns).
    pub time_ns: u64,
    /// Where it comes from.
    pub source: ReferenceSource,
}

/// The split of the driver-used bytes at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breakdown {
    /// The figure being explained, at the moment of the split: the reading
    /// it stands on plus what the measured categories changed by since
    /// (`time_ns` is the moment).
    pub reference: Reference,
    /// The reading `reference` stands on: the one before the moment, or
    /// the one after it where that leaves less unexplained (or none came
    /// before).
    pub reading: Reference,
    /// Live allocations by owning library, largest first.
    pub owners: Vec<(String, u64)>,
    /// What stream-ordered pools hold beyond their live allocations.
    pub pools: u64,
    /// What the device's graph memory pool holds.
    pub graphs: u64,
    /// The context, with what its limits grew by since.
    pub context: u64,
    /// Modules and libraries loaded, and kernels loaded at their first launch.
    pub modules: u64,
    /// Streams and events created (an estimate once creations were sampled).
    pub streams_and_events: u64,
    /// Executable graphs: instantiated, updated, uploaded, first launched.
    pub graph_executables: u64,
}

impl Breakdown {
    /// Bytes some measurement covers.
    pub fn explained(&self) -> u64 {
        self.owners.iter().map(|(_, bytes)| bytes).sum::<u64>()
            + self.pools
            + self.graphs
            + self.context
            + self.modules
            + self.streams_and_events
            + self.graph_executables
    }

    /// The reference less what is explained; negative when the
    /// measurements add up to more than the reference.
    pub fn unexplained(&self) -> i64 {
        self.reference.bytes as i64 - self.explained() as i64
    }

    /// The explained share of the reference, in percent.
    pub fn explained_percent(&self) -> f64 {
        if self.reference.bytes == 0 {
            return 0.0;
        }
        self.explained() as f64 * 100.0 / self.reference.bytes as f64
    }
}

/// One process's footprint on one device.
#[derive(Clone, Debug)]
pub struct DeviceFootprint {
    /// Ordinal in the process.
    pub device: u8,
    /// What the process said the device is.
    pub info: Option<DeviceInfo>,
    /// The split at the process's exit (or its last event): what was live
    /// then.
    pub at_exit: Option<Breakdown>,
    /// The split at the footprint's peak: the moment the driver-used bytes,
    /// estimated between readings from what was measured, were highest.
    pub at_peak: Option<Breakdown>,
    /// The context's limits when it was first current, then as set: (limit, bytes).
    pub limits: Vec<(u64, u64)>,
    /// The context as NVML's first per-process reading after it puts it: that
    /// reading less everything else measured by then. A check on the
    /// context figure.
    pub context_by_nvml: Option<u64>,
    /// The context's bytes when it became current, before any limit grew it.
    pub context_first: u64,
    /// From each reading on, until the next: what the reading leaves
    /// unexplained, as (reading time, bytes). Between readings the
    /// footprint is estimated as everything measured plus this.
    pub unexplained_steps: Vec<(u64, i64)>,
    /// Caveats, one line each.
    pub notes: Vec<String>,
}

impl DeviceFootprint {
    /// Every owner at exit or at the peak, with the larger of its two
    /// figures, largest first.
    pub fn owners_by_size(&self) -> Vec<(String, u64)> {
        let mut owners: Vec<(String, u64)> = Vec::new();
        for breakdown in self.at_exit.iter().chain(self.at_peak.iter()) {
            for (name, bytes) in &breakdown.owners {
                match owners.iter_mut().find(|(n, _)| n == name) {
                    Some(entry) => entry.1 = entry.1.max(*bytes),
                    None => owners.push((name.clone(), *bytes)),
                }
            }
        }
        owners.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        owners
    }
}

/// What the measured categories add up to on one device as the replay
/// goes: live allocations, pools beyond them, graph memory, and the costs of
/// limits, modules, kernels, streams, events and executable graphs. The
/// context is left out: it is fixed once there, so it cancels out of every
/// estimate made from a reading taken after it.
#[derive(Default)]
struct Measured {
    live: u64,
    pools: BTreeMap<u64, u64>,
    pools_total: u64,
    graphs: u64,
    costs: u64,
}

impl Measured {
    fn total(&self) -> i64 {
        (self.live + self.pools_total + self.graphs + self.costs) as i64
    }
}

/// The owners' live bytes at a moment.
type OwnersThen = Vec<(Rc<str>, u64)>;

/// A moment and the owners' live bytes then.
struct Moment {
    estimate: i64,
    measured: i64,
    time_ns: u64,
    reading: Reference,
    owners: Vec<(Rc<str>, u64)>,
}

/// One device's readings and the footprint estimated from them. Between
/// two readings the footprint is everything measured plus the smaller of
/// what the two readings leave unexplained: memory the driver held that no
/// measurement covers counts only as far as both readings saw it (a kernel
/// loaded before its first launch is measured, for instance, is seen by a
/// reading before it is measured). Before the first reading the first one's
/// figure is used, after the last the last one's.
#[derive(Default)]
struct DeviceEstimate {
    /// Every reading, in time order.
    readings: Vec<Reference>,
    /// The reading that stands for the process's exit.
    exit_reading: Option<Reference>,
    /// Each reading passed so far, with its bytes less the measured bytes
    /// then.
    offsets: Vec<(Reference, i64)>,
    /// Since the last reading passed (or from the start): the highest
    /// measured bytes, when, and the owners then.
    interval_top: Option<(i64, u64, OwnersThen)>,
    peak: Option<Moment>,
    measured: Measured,
}

impl DeviceEstimate {
    /// A moment of `estimate` bytes, `measured` of them measured: the peak
    /// if higher than it, or as high and better explained.
    fn consider(
        &mut self,
        (estimate, measured): (i64, i64),
        time_ns: u64,
        reading: Reference,
        owners: impl FnOnce() -> Vec<(Rc<str>, u64)>,
    ) {
        if self
            .peak
            .as_ref()
            .is_none_or(|peak| (estimate, measured) > (peak.estimate, peak.measured))
        {
            self.peak = Some(Moment {
                estimate,
                measured,
                time_ns,
                reading,
                owners: owners(),
            });
        }
    }

    /// Closes the interval before `next` (a reading and its offset; none
    /// after the last reading): its top is a moment of the footprint.
    fn close_interval(&mut self, next: Option<(Reference, i64)>) {
        let Some((measured, at, owners)) = self.interval_top.take() else {
            return;
        };
        // The reading whose figure the estimate takes: the one leaving
        // less unexplained.
        let (reading, offset) = match (self.offsets.last().copied(), next) {
            (Some(before), Some(after)) => {
                if after.1 < before.1 {
                    after
                } else {
                    before
                }
            }
            (Some(last), None) => last,
            (None, Some(first)) => first,
            (None, None) => return,
        };
        self.consider((measured + offset, measured), at, reading, || owners);
    }
}

/// What the stream tells the footprint of one process.
#[derive(Default)]
pub struct FootprintTracker {
    owners: HashMap<u32, Rc<str>>,
    live_by_owner: HashMap<(u8, Rc<str>), u64>,
    live_at_context: HashMap<u8, u64>,
    /// (time, device) instants to snapshot the owners at, latest first.
    pending: Vec<(u64, u8)>,
    snapshots: HashMap<(u64, u8), Vec<(String, u64)>>,
    devices: BTreeMap<u8, DeviceEstimate>,
    /// The time of the last event seen.
    last_time_ns: u64,
}

fn nvml_uuid(info: Option<&DeviceInfo>) -> Option<String> {
    info.map(DeviceInfo::uuid_text)
}

/// The process's first context record on `device` that carries a reading.
fn context_record(process: &ProcessIndex, device: u8) -> Option<&Event> {
    process
        .measurements
        .iter()
        .find(|e| e.op == Op::Context && e.device == Some(device) && e.arg2 != 0)
}

/// NVML's first per-process reading of device `device` of `process` once
/// its context was there.
fn first_nvml_with_context(index: &TraceIndex, process: &ProcessIndex, device: u8) -> Option<Reference> {
    let since = context_record(process, device)?.time_ns;
    nvml_readings(index, process, device)
        .into_iter()
        .find(|r| r.time_ns >= since)
}

/// NVML's per-process readings of device `device` of `process`, in time order.
fn nvml_readings(index: &TraceIndex, process: &ProcessIndex, device: u8) -> Vec<Reference> {
    let uuid = nvml_uuid(process.devices.get(&u32::from(device)));
    // A pid is shared by the images of an `exec`, and may be reused: only
    // readings within this image's life are its own.
    let start = process.start.start_monotonic_ns;
    let end = process.end.as_ref().and_then(|e| e.exit_time_ns).unwrap_or(u64::MAX);
    index
        .nvml
        .iter()
        .filter(|s| s.pid == process.start.pid && Some(&s.uuid) == uuid.as_ref())
        .filter(|s| (start..=end).contains(&s.time_ns))
        .map(|s| Reference {
            bytes: s.used_bytes,
            time_ns: s.time_ns,
            source: ReferenceSource::Nvml,
        })
        .collect()
}

/// The reference readings of device `device` of `process`, in time order,
/// and the one that stands for its exit: NVML's, or else the process's own
/// readings of the device's used memory (its exit reading, or its last).
fn readings(index: &TraceIndex, process: &ProcessIndex, device: u8) -> (Vec<Reference>, Option<Reference>) {
    let mut nvml = nvml_readings(index, process, device);
    if !nvml.is_empty() {
        nvml.sort_by_key(|r| r.time_ns);
        let last = nvml.last().copied();
        return (nvml, last);
    }
    let as_reference = |e: &Event| Reference {
        bytes: e.arg2.saturating_sub(e.arg1),
        time_ns: e.time_ns,
        source: ReferenceSource::DeviceBound,
    };
    let mut own: Vec<Reference> = process
        .measurements
        .iter()
        .filter(|e| e.op == Op::Sample && e.device == Some(device))
        .map(as_reference)
        .collect();
    own.sort_by_key(|r| r.time_ns);
    let at_exit = process
        .measurements
        .iter()
        .rev()
        .find(|e| e.op == Op::Sample && e.device == Some(device) && e.stream == sample_reason::EXIT)
        .map(as_reference)
        .or_else(|| own.last().copied());
    (own, at_exit)
}

impl FootprintTracker {
    /// A tracker that will estimate `process`'s footprint from its readings.
    pub fn new(index: &TraceIndex, process: &ProcessIndex) -> FootprintTracker {
        let mut pending = Vec::new();
        let mut devices = BTreeMap::new();
        for device in devices_of(process) {
            let (readings, exit_reading) = readings(index, process, device);
            devices.insert(
                device,
                DeviceEstimate {
                    readings,
                    exit_reading,
                    ..DeviceEstimate::default()
                },
            );
            pending.extend(first_nvml_with_context(index, process, device).map(|r| (r.time_ns, device)));
        }
        pending.sort_unstable_by(|a, b| b.cmp(a));
        pending.dedup();
        FootprintTracker {
            pending,
            devices,
            ..FootprintTracker::default()
        }
    }

    fn owners_on(&self, device: u8) -> Vec<(Rc<str>, u64)> {
        let mut owners: Vec<(Rc<str>, u64)> = self
            .live_by_owner
            .iter()
            .filter(|((d, _), bytes)| *d == device && **bytes > 0)
            .map(|((_, owner), bytes)| (owner.clone(), *bytes))
            .collect();
        owners.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        owners
    }

    fn snapshot_until(&mut self, time_ns: u64) {
        while let Some(&(at, device)) = self.pending.last() {
            if at >= time_ns {
                break;
            }
            self.pending.pop();
            let owners = self
                .owners_on(device)
                .into_iter()
                .map(|(owner, bytes)| (owner.to_string(), bytes))
                .collect();
            self.snapshots.insert((at, device), owners);
        }
    }

    /// Takes in the readings taken before `time_ns`: each is a moment of
    /// the footprint, and closes the interval before it.
    fn pass_readings_until(&mut self, time_ns: u64) {
        let devices: Vec<u8> = self.devices.keys().copied().collect();
        for device in devices {
            loop {
                let estimate = &self.devices[&device];
                let Some(&reading) = estimate
                    .readings
                    .get(estimate.offsets.len())
                    .filter(|r| r.time_ns < time_ns)
                else {
                    break;
                };
                let owners = self.owners_on(device);
                let estimate = self.devices.get_mut(&device).expect("listed above");
                let measured = estimate.measured.total();
                let offset = reading.bytes as i64 - measured;
                estimate.close_interval(Some((reading, offset)));
                estimate.offsets.push((reading, offset));
                estimate.consider((reading.bytes as i64, measured), reading.time_ns, reading, || owners);
            }
        }
    }

    /// After an event changed what is measured on `device` at `time_ns`:
    /// the interval's top, where it could make a new peak.
    fn measured_changed(&mut self, device: u8, time_ns: u64) {
        // Without readings there is nothing to estimate from.
        let Some(estimate) = self.devices.get(&device).filter(|e| !e.readings.is_empty()) else {
            return;
        };
        let measured = estimate.measured.total();
        if estimate
            .interval_top
            .as_ref()
            .is_some_and(|(top, _, _)| measured <= *top)
        {
            return;
        }
        // The interval's estimate is at most the offset of the reading
        // before it.
        if let (Some((_, offset)), Some(peak)) = (estimate.offsets.last(), &estimate.peak) {
            if measured + offset < peak.estimate {
                return;
            }
        }
        let owners = self.owners_on(device);
        let estimate = self.devices.get_mut(&device).expect("looked up above");
        estimate.interval_top = Some((measured, time_ns, owners));
    }

    /// Takes in one event and what it changed.
    pub fn observe(&mut self, index: &TraceIndex, process: &ProcessIndex, event: &Event, changes: &[Change]) {
        self.snapshot_until(event.time_ns);
        self.pass_readings_until(event.time_ns);
        self.last_time_ns = self.last_time_ns.max(event.time_ns);
        let mut touched: Option<u8> = None;
        if let Some(device) = event.device {
            if event.op == Op::Context {
                let live = self.devices.get(&device).map_or(0, |d| d.measured.live);
                self.live_at_context.entry(device).or_insert(live);
            }
            if let Some(estimate) = self.devices.get_mut(&device) {
                let measured = &mut estimate.measured;
                let changed = match event.op {
                    Op::PoolSample => {
                        let held = event.size.saturating_sub(event.arg1);
                        let before = measured.pools.insert(event.address, held).unwrap_or(0);
                        measured.pools_total = measured.pools_total - before + held;
                        true
                    }
                    Op::GraphSample => {
                        measured.graphs = event.size;
                        true
                    }
                    Op::Limit if event.api == Api::CuCtxSetLimit => {
                        measured.costs = measured.costs.saturating_add(event.load_cost().unwrap_or(0));
                        true
                    }
                    Op::ModuleLoad | Op::KernelLoad | Op::StreamObjects | Op::GraphExec => {
                        measured.costs = measured.costs.saturating_add(event.load_cost().unwrap_or(0));
                        true
                    }
                    _ => false,
                };
                if changed {
                    touched = Some(device);
                }
            }
        }
        for change in changes {
            let (allocation, sign) = match change {
                Change::Allocated(a) => (a, 1i64),
                Change::Freed { allocation, .. } => (allocation, -1),
                _ => continue,
            };
            let Some(device) = allocation.device.filter(|_| allocation.is_device_memory()) else {
                continue;
            };
            let owner = self
                .owners
                .entry(allocation.stack)
                .or_insert_with(|| owner_of(&index.frames(process, allocation.stack)).into())
                .clone();
            let apply = |bytes: &mut u64| {
                *bytes = if sign > 0 {
                    bytes.saturating_add(allocation.size)
                } else {
                    bytes.saturating_sub(allocation.size)
                }
            };
            apply(self.live_by_owner.entry((device, owner)).or_default());
            if let Some(estimate) = self.devices.get_mut(&device) {
                apply(&mut estimate.measured.live);
            }
            if let Some(previous) = touched.filter(|&d| d != device) {
                self.measured_changed(previous, event.time_ns);
            }
            touched = Some(device);
        }
        if let Some(device) = touched {
            self.measured_changed(device, event.time_ns);
        }
    }

    /// The owner of the allocations made with `stack`, and the bytes that
    /// owner has live on `device` now; `None` for a stack not observed yet.
    pub fn owner_live(&self, device: u8, stack: u32) -> Option<(Rc<str>, u64)> {
        let owner = self.owners.get(&stack)?.clone();
        let live = self.live_by_owner.get(&(device, owner.clone())).copied().unwrap_or(0);
        Some((owner, live))
    }

    /// The footprint, once the stream is over.
    pub fn finish(mut self, index: &TraceIndex, process: &ProcessIndex) -> Vec<DeviceFootprint> {
        self.snapshot_until(u64::MAX);
        self.pass_readings_until(u64::MAX);
        for estimate in self.devices.values_mut() {
            estimate.close_interval(None);
        }
        devices_of(process)
            .map(|device| self.device_footprint(index, process, device))
            .collect()
    }

    /// The moment of the process's exit: its end, else its last event.
    fn exit_moment(&self, process: &ProcessIndex) -> u64 {
        process
            .end
            .as_ref()
            .and_then(|e| e.exit_time_ns)
            .unwrap_or(0)
            .max(self.last_time_ns)
    }

    fn device_footprint(&self, index: &TraceIndex, process: &ProcessIndex, device: u8) -> DeviceFootprint {
        let info = process.devices.get(&u32::from(device)).cloned();
        let mut notes = Vec::new();
        let estimate = self.devices.get(&device);
        let exit_reading = estimate.and_then(|e| e.exit_reading);
        let on_device: Vec<&Event> = process
            .measurements
            .iter()
            .filter(|e| e.device == Some(device))
            .collect();
        let context_record = context_record(process, device);
        // Before the process started it held nothing on the device: the
        // context's runtime may make it current through calls we cannot see,
        // so the reading before the process is the baseline, not the one
        // before the context's first record.
        let baseline =
            context_record.and_then(|_| context_baseline(index, info.as_ref(), process.start.start_monotonic_ns));
        if baseline.is_some_and(|(_, before_start)| !before_start) {
            notes.push(
                "NVML's first reading of the device came after the process started: the context figure may be low"
                    .into(),
            );
        }
        let baseline = baseline.map(|(free, _)| free);
        let context_bytes = match (context_record, baseline) {
            (Some(context), Some(baseline_free)) => {
                let live = self.live_at_context.get(&device).copied().unwrap_or(0);
                baseline_free.saturating_sub(context.arg1).saturating_sub(live)
            }
            (Some(context), None) => {
                notes.push(
                    "no reading of the device before the process (NVML missing): the context figure includes every other process's memory"
                        .into(),
                );
                let live = self.live_at_context.get(&device).copied().unwrap_or(0);
                context.arg2.saturating_sub(context.arg1).saturating_sub(live)
            }
            (None, _) => {
                notes.push("no context was seen becoming current on this device".into());
                0
            }
        };
        if exit_reading.is_some_and(|r| r.source == ReferenceSource::DeviceBound) {
            let why = index
                .nvml_status
                .iter()
                .rev()
                .find(|status| !status.reason.is_empty())
                .map_or_else(String::new, |status| format!(" ({})", status.reason));
            notes.push(format!(
                "NVML gave no per-process figure{why}: the reference is the device's used memory, an upper bound"
            ));
        }
        let limits = on_device
            .iter()
            .filter(|e| e.op == Op::Limit)
            .map(|e| (e.address, e.size))
            .collect();
        // The split at `moment`: `bytes` estimated from `reading`, with the
        // owners live then.
        let breakdown = |moment: u64, bytes: i64, reading: Reference, owners: Vec<(String, u64)>| {
            let until = |e: &&&Event| e.time_ns <= moment;
            let limit_growth: u64 = on_device
                .iter()
                .filter(until)
                .filter(|e| e.op == Op::Limit && e.api == Api::CuCtxSetLimit)
                .filter_map(|e| e.load_cost())
                .sum();
            let cost_of = |ops: &[Op]| -> u64 {
                on_device
                    .iter()
                    .filter(until)
                    .filter(|e| ops.contains(&e.op))
                    .filter_map(|e| e.load_cost())
                    .sum()
            };
            let mut pools: BTreeMap<u64, u64> = BTreeMap::new();
            let mut graphs = 0;
            for e in on_device.iter().filter(until) {
                match e.op {
                    Op::PoolSample => {
                        pools.insert(e.address, e.size.saturating_sub(e.arg1));
                    }
                    Op::GraphSample => graphs = e.size,
                    _ => {}
                }
            }
            Breakdown {
                reference: Reference {
                    bytes: bytes.max(0) as u64,
                    time_ns: moment,
                    source: reading.source,
                },
                reading,
                owners,
                pools: pools.values().sum(),
                graphs,
                context: context_bytes + limit_growth,
                modules: cost_of(&[Op::ModuleLoad, Op::KernelLoad]),
                streams_and_events: cost_of(&[Op::StreamObjects]),
                graph_executables: cost_of(&[Op::GraphExec]),
            }
        };
        let owned = |owners: &[(Rc<str>, u64)]| -> Vec<(String, u64)> {
            owners
                .iter()
                .map(|(owner, bytes)| (owner.to_string(), *bytes))
                .collect()
        };
        let at_exit = exit_reading.and_then(|reading| {
            let estimate = estimate?;
            let offset = estimate
                .offsets
                .iter()
                .rev()
                .find(|(r, _)| *r == reading)
                .map_or(0, |(_, offset)| *offset);
            let moment = self.exit_moment(process);
            Some(breakdown(
                moment,
                offset + estimate.measured.total(),
                reading,
                owned(&self.owners_on(device)),
            ))
        });
        let at_peak = estimate
            .and_then(|e| e.peak.as_ref())
            .map(|peak| breakdown(peak.time_ns, peak.estimate, peak.reading, owned(&peak.owners)));
        if at_exit.is_none() {
            notes.push("no reading of the device's memory: nothing to explain".into());
        }
        let creations = on_device.iter().filter(|e| {
            e.op == Op::StreamObjects
                && matches!(
                    e.api,
                    Api::CuStreamCreate | Api::CuStreamCreateWithPriority | Api::CuEventCreate
                )
        });
        let (measured, represented) = creations.fold((0u64, 0u64), |(m, r), e| (m + 1, r + e.size.max(1)));
        if represented > measured {
            notes.push(format!(
                "streams and events: an estimate, {measured} of {represented} creations measured, each standing for those after it"
            ));
        }
        let mismatches = process
            .measurements
            .iter()
            .filter(|e| e.op == Op::DeviceMismatch && e.device == Some(device))
            .count();
        if mismatches > 0 {
            notes.push(format!(
                "{mismatches} time(s) a thread's current device changed through a call cudatrace does not see: events on that thread until the next check may name the previous device"
            ));
        }
        let context_by_nvml = first_nvml_with_context(index, process, device).map(|first| {
            let owners = self
                .snapshots
                .get(&(first.time_ns, device))
                .cloned()
                .unwrap_or_default();
            let then = breakdown(first.time_ns, first.bytes as i64, first, owners);
            let others = then.explained() - then.context;
            first.bytes.saturating_sub(others)
        });
        if let (Some(by_nvml), Some(context)) = (context_by_nvml, at_exit.as_ref().map(|b| b.context)) {
            if by_nvml.abs_diff(context) > (context / 20).max(16 << 20) {
                notes.push(format!(
                    "NVML's first reading after the context, less what was measured by then, leaves {}; the context as measured is {} (the rest is memory measured later, or not at all)",
                    crate::system::wording::bytes(by_nvml),
                    crate::system::wording::bytes(context)
                ));
            }
        }
        let unexplained_steps = estimate.map_or_else(Vec::new, |estimate| {
            estimate
                .offsets
                .iter()
                .map(|(reading, offset)| (reading.time_ns, offset - context_bytes as i64))
                .collect()
        });
        DeviceFootprint {
            device,
            info,
            at_exit,
            at_peak,
            limits,
            context_by_nvml,
            context_first: context_bytes,
            unexplained_steps,
            notes,
        }
    }
}

/// The device's free bytes before the process started: the collector's
/// last NVML reading of the whole device before `time_ns`, or its first if
/// none came before (then with `false`).
fn context_baseline(index: &TraceIndex, info: Option<&DeviceInfo>, time_ns: u64) -> Option<(u64, bool)> {
    let uuid = nvml_uuid(info)?;
    let readings: Vec<_> = index.nvml.iter().filter(|s| s.pid == 0 && s.uuid == uuid).collect();
    match readings.iter().rev().find(|s| s.time_ns <= time_ns) {
        Some(before) => Some((before.free_bytes, true)),
        None => readings.first().map(|first| (first.free_bytes, false)),
    }
}

/// Devices the process measured or allocated on, in order.
fn devices_of(process: &ProcessIndex) -> impl Iterator<Item = u8> {
    let mut devices: Vec<u8> = process
        .measurements
        .iter()
        .filter(|e| matches!(e.op, Op::Context | Op::Sample))
        .filter_map(|e| e.device)
        .chain(process.devices.keys().filter_map(|&d| u8::try_from(d).ok()))
        .collect();
    devices.sort_unstable();
    devices.dedup();
    devices.into_iter()
}

/// The name a report gives a limit, with its value.
pub fn limit_text(which: u64, bytes: u64) -> String {
    format!("{} {}", limit::name(which), crate::system::wording::bytes(bytes))
}
