//! The chart of where the driver's memory went: per process and device,
//! live allocations by owning library and the driver's own categories
//! (pools, graph memory, context, modules and kernels, streams and events,
//! executable graphs) stacked over time, with what the readings leave
//! unexplained on top: the whole stack is the footprint the report
//! estimates, and peaks where the report's "at peak" column is taken.

use super::chart::{Chart, SERIES};
use crate::analysis::{owner_of, Change, DeviceFootprint, ProcessIndex, TraceIndex};
use cudatrace_events::{Api, Event, Op};
use std::collections::{BTreeMap, HashMap};

/// The categories, drawn above the owners, in this order.
const CATEGORIES: [&str; 7] = [
    "pools beyond live allocations",
    "graph memory",
    "context",
    "modules and kernels",
    "streams and events",
    "executable graphs",
    UNEXPLAINED,
];

/// The band of what no measurement covers.
pub const UNEXPLAINED: &str = "unexplained (driver-used less all measured)";

/// One device's chart and what fills it.
pub struct OwnerChart {
    pub chart: Chart,
    series_of_owner: HashMap<String, usize>,
    first_category: usize,
    pools: BTreeMap<u64, u64>,
    context: u64,
    context_drawn: bool,
    /// What the readings leave unexplained, as (from, bytes), latest first:
    /// each reading's own figure at its instant, then until the next
    /// reading the smaller of the two (as the report's estimate has it).
    unexplained: Vec<(u64, u64)>,
    /// Before the first reading, from the device's first event: the first
    /// reading's figure, until a reading has been drawn.
    before_first_reading: Option<u64>,
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
        let steps = &footprint.unexplained_steps;
        let mut unexplained = Vec::new();
        for (k, &(at, bytes)) in steps.iter().enumerate() {
            let until_next = steps.get(k + 1).map_or(bytes, |&(_, next)| bytes.min(next));
            unexplained.push((at, bytes.max(0) as u64));
            unexplained.push((at, until_next.max(0) as u64));
        }
        unexplained.reverse();
        OwnerChart {
            chart: Chart::new(names, t0, span),
            series_of_owner,
            first_category,
            pools: BTreeMap::new(),
            context: footprint.context_first,
            context_drawn: false,
            before_first_reading: steps.first().map(|&(_, first)| first.max(0) as u64),
            unexplained,
        }
    }

    /// Draws what the readings leave unexplained up to `time_ns`.
    pub fn readings_until(&mut self, time_ns: u64) {
        let series = self.first_category + CATEGORIES.len() - 1;
        while let Some(&(at, bytes)) = self.unexplained.last() {
            if at > time_ns {
                break;
            }
            self.unexplained.pop();
            self.chart.current[series] = bytes;
            self.before_first_reading = None;
            self.chart.record(at);
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
        self.draw_context();
        let series = self.series_of_stack(index, info, allocation.stack);
        let value = &mut self.chart.current[series];
        *value = if grows {
            value.saturating_add(allocation.size)
        } else {
            value.saturating_sub(allocation.size)
        };
        self.chart.record(time_ns);
    }

    /// The context's size is known once the whole run is read. It is drawn
    /// from the device's first event, as is what the first reading leaves
    /// unexplained (the estimate's figure before it): an allocation may be recorded just
    /// before the record of the context it was made in, and the footprint
    /// is estimated with the context in it from the start.
    fn draw_context(&mut self) {
        if !self.context_drawn {
            self.context_drawn = true;
            let series = self.first_category + CATEGORIES.iter().position(|c| *c == "context").unwrap_or(0);
            self.chart.current[series] += self.context;
            if let Some(first) = self.before_first_reading.take() {
                self.chart.current[self.first_category + CATEGORIES.len() - 1] = first;
            }
        }
    }

    /// Takes in a measurement on this device.
    pub fn measurement(&mut self, event: &Event) {
        self.draw_context();
        let category = |name: &str| CATEGORIES.iter().position(|c| *c == name).unwrap_or(0);
        let (series, value) = match event.op {
            Op::PoolSample => {
                self.pools.insert(event.address, event.size.saturating_sub(event.arg1));
                (
                    category("pools beyond live allocations"),
                    self.pools.values().fold(0u64, |sum, held| sum.saturating_add(*held)),
                )
            }
            Op::GraphSample => (category("graph memory"), event.size),
            Op::Limit if event.api == Api::CuCtxSetLimit => {
                let series = category("context");
                let total =
                    self.chart.current[self.first_category + series].saturating_add(event.load_cost().unwrap_or(0));
                (series, total)
            }
            Op::ModuleLoad | Op::KernelLoad | Op::StreamObjects | Op::GraphExec => {
                let series = category(match event.op {
                    Op::StreamObjects => "streams and events",
                    Op::GraphExec => "executable graphs",
                    _ => "modules and kernels",
                });
                let total =
                    self.chart.current[self.first_category + series].saturating_add(event.load_cost().unwrap_or(0));
                (series, total)
            }
            _ => return,
        };
        self.chart.current[self.first_category + series] = value;
        self.chart.record(event.time_ns);
    }
}
