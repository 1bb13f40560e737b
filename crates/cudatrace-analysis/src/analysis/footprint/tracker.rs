//! Following one process's replay: what each category measures on each
//! device as events come, the readings passed, and the footprint's peak,
//! estimated between readings.

use super::figures::{DeviceFootprint, Reference};
use super::readings::{devices_of, first_nvml_with_context, readings};
use crate::analysis::owner::owner_of;
use crate::analysis::replay::Change;
use crate::analysis::trace_index::{ProcessIndex, TraceIndex};
use cudatrace_events::{Api, Event, Op};
use foldhash::HashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the measured categories add up to on one device as the replay
/// goes: live allocations, pools beyond them, graph memory, and the costs of
/// limits, modules, kernels, streams, events and executable graphs. The
/// context is left out: it is fixed once there, so it cancels out of every
/// estimate made from a reading taken after it.
#[derive(Default)]
pub(super) struct Measured {
    pub(super) live: u64,
    pub(super) pools: BTreeMap<u64, u64>,
    pub(super) pools_total: u64,
    pub(super) graphs: u64,
    pub(super) costs: u64,
}

impl Measured {
    pub(super) fn total(&self) -> i64 {
        (self.live + self.pools_total + self.graphs + self.costs) as i64
    }
}

/// The owners' live bytes at a moment.
pub(super) type OwnersThen = Vec<(Arc<str>, u64)>;

/// A moment and the owners' live bytes then.
pub(super) struct Moment {
    pub(super) estimate: i64,
    pub(super) measured: i64,
    pub(super) time_ns: u64,
    pub(super) reading: Reference,
    pub(super) owners: Vec<(Arc<str>, u64)>,
}

/// One device's readings and the footprint estimated from them. Between
/// two readings the footprint is everything measured plus the smaller of
/// what the two readings leave unexplained: memory the driver held that no
/// measurement covers counts only as far as both readings saw it (a kernel
/// loaded before its first launch is measured, for instance, is seen by a
/// reading before it is measured). Before the first reading the first one's
/// figure is used, after the last the last one's.
#[derive(Default)]
pub(super) struct DeviceEstimate {
    /// Every reading, in time order.
    pub(super) readings: Vec<Reference>,
    /// The reading that stands for the process's exit.
    pub(super) exit_reading: Option<Reference>,
    /// Each reading passed so far, with its bytes less the measured bytes
    /// then.
    pub(super) offsets: Vec<(Reference, i64)>,
    /// Since the last reading passed (or from the start): the highest
    /// measured bytes, when, and the owners then.
    pub(super) interval_top: Option<(i64, u64, OwnersThen)>,
    pub(super) peak: Option<Moment>,
    pub(super) measured: Measured,
}

impl DeviceEstimate {
    /// A moment of `estimate` bytes, `measured` of them measured: the peak
    /// if higher than it, or as high and better explained.
    fn consider(
        &mut self,
        (estimate, measured): (i64, i64),
        time_ns: u64,
        reading: Reference,
        owners: impl FnOnce() -> Vec<(Arc<str>, u64)>,
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
    /// Each stack's owner, as a number in `owner_names`.
    pub(super) owners: HashMap<u32, u32>,
    /// The owners' names, and their numbers: an event then looks up its
    /// owner's bytes by number, without hashing the name.
    pub(super) owner_names: Vec<Arc<str>>,
    pub(super) owner_numbers: HashMap<Arc<str>, u32>,
    pub(super) live_by_owner: HashMap<(u8, u32), u64>,
    pub(super) live_at_context: HashMap<u8, u64>,
    /// (time, device) instants to snapshot the owners at, latest first.
    pub(super) pending: Vec<(u64, u8)>,
    pub(super) snapshots: HashMap<(u64, u8), Vec<(String, u64)>>,
    pub(super) devices: BTreeMap<u8, DeviceEstimate>,
    /// The time of the last event seen.
    pub(super) last_time_ns: u64,
    /// The earliest reading not taken in yet, of any device (0 until the
    /// first event, `u64::MAX` once none is left): most events come before
    /// it and pass no reading.
    pub(super) next_reading_ns: u64,
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

    pub(super) fn owners_on(&self, device: u8) -> Vec<(Arc<str>, u64)> {
        let mut owners: Vec<(Arc<str>, u64)> = self
            .live_by_owner
            .iter()
            .filter(|((d, _), bytes)| *d == device && **bytes > 0)
            .map(|(&(_, owner), bytes)| (self.owner_names[owner as usize].clone(), *bytes))
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
        if self.next_reading_ns >= time_ns {
            return;
        }
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
        self.next_reading_ns = self
            .devices
            .values()
            .filter_map(|estimate| estimate.readings.get(estimate.offsets.len()))
            .map(|reading| reading.time_ns)
            .min()
            .unwrap_or(u64::MAX);
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
            let owner = match self.owners.get(&allocation.stack) {
                Some(&owner) => owner,
                None => {
                    let name: Arc<str> = owner_of(&index.frames(process, allocation.stack)).into();
                    let next = self.owner_names.len() as u32;
                    let owner = *self.owner_numbers.entry(name.clone()).or_insert(next);
                    if owner == next {
                        self.owner_names.push(name);
                    }
                    self.owners.insert(allocation.stack, owner);
                    owner
                }
            };
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
    pub fn owner_live(&self, device: u8, stack: u32) -> Option<(Arc<str>, u64)> {
        let owner = *self.owners.get(&stack)?;
        let live = self.live_by_owner.get(&(device, owner)).copied().unwrap_or(0);
        Some((self.owner_names[owner as usize].clone(), live))
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
    pub(super) fn exit_moment(&self, process: &ProcessIndex) -> u64 {
        process
            .end
            .as_ref()
            .and_then(|e| e.exit_time_ns)
            .unwrap_or(0)
            .max(self.last_time_ns)
    }
}
