//! Counter tracks of where the driver's memory went, per device of each
//! process: one per owning library (its live allocations), one per driver
//! category (pools beyond live allocations, graph memory, context, modules
//! and kernels, streams and events, executable graphs), the process's own readings of the device, and NVML's
//! per-process figure, the reference the report explains.

use super::counter_names::CounterNames;
use crate::wording::category_name;
use cudatrace_analysis::Category;
use cudatrace_analysis::{Change, DeviceFootprint, DeviceKey, FootprintTracker, ProcessIndex, TraceIndex, Window};
use cudatrace_events::{Event, Op};
use std::collections::HashMap;
use std::rc::Rc;

/// One counter value to write: track name, time (ns) and bytes.
pub struct Counter {
    /// Track name.
    pub name: Rc<str>,
    /// `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The owner and category tracks of one process.
pub struct OwnerTracks {
    /// Running totals of the measured driver costs, by device and category.
    driver_costs: HashMap<(u8, &'static str), u64>,
    pools: HashMap<(u8, u64), u64>,
    footprint: FootprintTracker,
    names: CounterNames,
}

fn device_name(device: u8) -> String {
    format!("GPU {device}")
}

impl OwnerTracks {
    /// Tracks for `info`.
    pub fn new(index: &TraceIndex, info: &ProcessIndex) -> OwnerTracks {
        OwnerTracks {
            driver_costs: HashMap::new(),
            pools: HashMap::new(),
            footprint: FootprintTracker::new(index, info),
            names: CounterNames::default(),
        }
    }

    /// Takes in one event and its changes; returns the counters they move.
    pub fn observe(
        &mut self,
        index: &TraceIndex,
        info: &ProcessIndex,
        event: &Event,
        changes: &[Change],
    ) -> Vec<Counter> {
        self.footprint.observe(index, info, event, changes);
        let mut counters = Vec::new();
        for change in changes {
            let (Change::Allocated(a) | Change::Freed { allocation: a, .. }) = change else {
                continue;
            };
            let Some(device) = a.device.filter(|_| a.is_device_memory()) else {
                continue;
            };
            if let Some((owner, bytes)) = self.footprint.owner_live(device, a.stack) {
                counters.push(Counter {
                    name: self.names.owner(device, &owner),
                    time_ns: event.time_ns,
                    bytes,
                });
            }
        }
        let Some(device) = event.device.filter(|_| event.op.is_measurement()) else {
            return counters;
        };
        let names = &mut self.names;
        let time_ns = event.time_ns;
        let mut named = |what: &'static str, bytes: u64| Counter {
            name: names.device(DeviceKey::Gpu(device), what),
            time_ns,
            bytes,
        };
        match event.op {
            Op::ModuleLoad | Op::KernelLoad | Op::StreamObjects | Op::GraphExec => {
                let what = category_name(match event.op {
                    Op::StreamObjects => Category::StreamsAndEvents,
                    Op::GraphExec => Category::GraphExecutables,
                    _ => Category::Modules,
                });
                let total = self.driver_costs.entry((device, what)).or_default();
                *total += event.load_cost().unwrap_or(0);
                counters.push(named(what, *total));
            }
            Op::PoolSample => {
                self.pools
                    .insert((device, event.address), event.size.saturating_sub(event.arg1));
                let beyond = self
                    .pools
                    .iter()
                    .filter(|((d, _), _)| *d == device)
                    .map(|(_, b)| b)
                    .sum();
                counters.push(named(category_name(Category::Pools), beyond));
            }
            Op::GraphSample => counters.push(named(category_name(Category::Graphs), event.size)),
            Op::Sample => counters.push(named(
                "device used (process reading)",
                event.arg2.saturating_sub(event.arg1),
            )),
            _ => {}
        }
        counters
    }

    /// The counters known only at the end: each context from its first
    /// moment, and NVML's readings of the process.
    pub fn finish(self, index: &TraceIndex, info: &ProcessIndex, window: &Window) -> Vec<Counter> {
        let footprints: Vec<DeviceFootprint> = self.footprint.finish(index, info);
        let mut counters = Vec::new();
        for footprint in &footprints {
            let device = footprint.device;
            let context = info
                .measurements
                .iter()
                .find(|e| e.op == Op::Context && e.device == Some(device));
            let bytes = footprint.at_exit.as_ref().map_or(0, |b| b.context);
            if let Some(context) = context.filter(|c| window.contains(c.time_ns)) {
                counters.push(Counter {
                    name: format!("{} context", device_name(device)).into(),
                    time_ns: context.time_ns,
                    bytes,
                });
            }
            let Some(uuid) = footprint.info.as_ref().map(|i| i.uuid_text()) else {
                continue;
            };
            counters.extend(
                index
                    .nvml
                    .iter()
                    .filter(|s| s.pid == info.start.pid && s.uuid == uuid && window.contains(s.time_ns))
                    .map(|s| Counter {
                        name: format!("{} driver-used (NVML)", device_name(device)).into(),
                        time_ns: s.time_ns,
                        bytes: s.used_bytes,
                    }),
            );
        }
        counters
    }
}
