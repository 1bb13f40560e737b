//! The chart of where the driver's memory went: per process and device,
//! live allocations by owning library and the driver's own categories
//! (pools, graph memory, context, modules and kernels, streams and events,
//! executable graphs) stacked over time.

use super::chart::{Chart, BINS, SERIES};
use crate::analysis::{owner_of, Change, DeviceFootprint, ProcessIndex, TraceIndex};
use cudatrace_events::{Event, Op};
use std::collections::{BTreeMap, HashMap};

/// The categories, drawn above the owners, in this order.
const CATEGORIES: [&str; 6] = [
    "pools beyond live allocations",
    "graph memory",
    "context",
    "modules and kernels",
    "streams and events",
    "executable graphs",
];

/// One device's chart and what fills it.
pub struct OwnerChart {
    pub chart: Chart,
    series_of_owner: HashMap<String, usize>,
    first_category: usize,
    pools: BTreeMap<u64, u64>,
    context: u64,
}

impl OwnerChart {
    /// A chart for `footprint`'s device, with its largest owners as series.
    pub fn new(footprint: &DeviceFootprint, t0: u64, span: u64) -> OwnerChart {
        let owners = footprint.owners_by_size();
        let mut names: Vec<String> = owners.iter().take(SERIES).map(|(n, _)| n.clone()).collect();
        let series_of_owner = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        names.push("other owners".into());
        let first_category = names.len();
        names.extend(CATEGORIES.iter().map(|c| c.to_string()));
        let context = footprint
            .at_exit
            .as_ref()
            .or(footprint.at_peak.as_ref())
            .map_or(0, |b| b.context);
        OwnerChart {
            chart: Chart {
                series_of: HashMap::new(),
                current: vec![0; names.len()],
                names,
                bins: vec![None; BINS],
                t0,
                span,
            },
            series_of_owner,
            first_category,
            pools: BTreeMap::new(),
            context,
        }
    }

    fn series_of_stack(&mut self, index: &TraceIndex, info: &ProcessIndex, stack: u32) -> usize {
        if let Some(&series) = self.chart.series_of.get(&stack) {
            return series;
        }
        let owner = owner_of(&index.frames(info, stack));
        let series = self
            .series_of_owner
            .get(&owner)
            .copied()
            .unwrap_or(self.first_category - 1);
        self.chart.series_of.insert(stack, series);
        series
    }

    /// Takes in an allocation change on this device.
    pub fn change(&mut self, index: &TraceIndex, info: &ProcessIndex, change: &Change, time_ns: u64) {
        let (allocation, grows) = match change {
            Change::Allocated(a) => (a, true),
            Change::Freed { allocation, .. } => (allocation, false),
            _ => return,
        };
        let series = self.series_of_stack(index, info, allocation.stack);
        let value = &mut self.chart.current[series];
        *value = if grows {
            *value + allocation.size
        } else {
            value.saturating_sub(allocation.size)
        };
        self.chart.record(time_ns);
    }

    /// Takes in a measurement on this device.
    pub fn measurement(&mut self, event: &Event) {
        let category = |name: &str| CATEGORIES.iter().position(|c| *c == name).unwrap_or(0);
        let (series, value) = match event.op {
            Op::PoolSample => {
                self.pools.insert(event.address, event.size.saturating_sub(event.arg1));
                (category("pools beyond live allocations"), self.pools.values().sum())
            }
            Op::GraphSample => (category("graph memory"), event.size),
            // The context's size is known once the whole run is read: it
            // is drawn from its first moment, limits included.
            Op::Context => (category("context"), self.context),
            Op::ModuleLoad | Op::KernelLoad | Op::StreamObjects | Op::GraphExec => {
                let series = category(match event.op {
                    Op::StreamObjects => "streams and events",
                    Op::GraphExec => "executable graphs",
                    _ => "modules and kernels",
                });
                let total = self.chart.current[self.first_category + series] + event.load_cost().unwrap_or(0);
                (series, total)
            }
            _ => return,
        };
        self.chart.current[self.first_category + series] = value;
        self.chart.record(event.time_ns);
    }
}
