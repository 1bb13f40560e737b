//! The chart of where the driver's memory went: per process and device,
//! live allocations by owning library and the driver's own categories
//! (pools, graph memory, context, modules and kernels, streams and events,
//! executable graphs) stacked over time, with what the readings leave
//! unexplained on top: the whole stack is the footprint the report
//! estimates, and peaks where the report's "at peak" column is taken.
//!
//! It is tallied in the summary's pass ([`OwnerTally`]), before the
//! owners worth a series of their own, the context's size and what each
//! reading leaves unexplained are known; [`OwnerTally::into_chart`] then
//! makes the chart.

use super::chart::{Chart, TimeAxis, SERIES};
use super::chart_tally::{ChartTally, Part};
use crate::wording::category_chart_name;
use cudatrace_analysis::{owner_of, Category, Change, DeviceFootprint, ProcessIndex, TraceIndex};
use cudatrace_events::{Api, Event, Op};
use foldhash::HashMap;
use std::collections::BTreeMap;

// The categories, drawn above the owners in the order of Category::ALL,
// by their place in it.
const POOLS: usize = Category::Pools as usize;
const GRAPHS: usize = Category::Graphs as usize;
const CONTEXT: usize = Category::Context as usize;
const MODULES: usize = Category::Modules as usize;
const STREAMS: usize = Category::StreamsAndEvents as usize;
const EXECUTABLE_GRAPHS: usize = Category::GraphExecutables as usize;
const UNEXPLAINED_BAND: usize = Category::Unexplained as usize;

// The bands are drawn in the order of Category::ALL and found by each
// category's number: both must agree, and the unexplained band is last.
const _: () = {
    let mut at = 0;
    while at < Category::ALL.len() {
        assert!(Category::ALL[at] as usize == at);
        at += 1;
    }
    assert!(UNEXPLAINED_BAND == Category::ALL.len() - 1);
};

/// Which reading's figure the unexplained band shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unexplained {
    /// Nothing yet: the device has had no event and no reading.
    Nothing,
    /// From the device's first event until the first reading: the first
    /// reading's figure, as the report's estimate has it.
    BeforeFirstReading,
    /// At the instant of reading `k` (in time order): its own figure.
    AtReading(usize),
    /// After reading `k` until the next: the smaller of the two figures.
    UntilNext(usize),
}

/// What the chart shows that is known only once the pass is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OwnerLate {
    /// The context is drawn, from the device's first event on.
    context_drawn: bool,
    unexplained: Unexplained,
}

/// One device's owner chart, being tallied.
pub(super) struct OwnerTally {
    tally: ChartTally<OwnerLate>,
    /// The times of the readings not drawn yet, latest first.
    readings_left: Vec<u64>,
    /// Readings drawn so far.
    readings_drawn: usize,
    /// Each pool's bytes beyond its live allocations, by pool.
    pools: BTreeMap<u64, u64>,
    /// The measured categories' bytes now.
    categories: [u64; UNEXPLAINED_BAND],
}

impl OwnerTally {
    /// An empty tally over `axis`, for a device whose readings were taken
    /// at `reading_times`, in the footprint's order.
    pub(super) fn new(axis: TimeAxis, reading_times: &[u64]) -> OwnerTally {
        let late = OwnerLate {
            context_drawn: false,
            unexplained: Unexplained::Nothing,
        };
        OwnerTally {
            tally: ChartTally::new(axis, late),
            readings_left: reading_times.iter().rev().copied().collect(),
            readings_drawn: 0,
            pools: BTreeMap::new(),
            categories: [0; UNEXPLAINED_BAND],
        }
    }

    /// Draws the readings taken up to `time_ns`: each is a moment at its
    /// own figure, then the band holds until the next.
    pub(super) fn readings_until(&mut self, time_ns: u64) {
        while let Some(&at) = self.readings_left.last() {
            if at > time_ns {
                break;
            }
            self.readings_left.pop();
            let reading = self.readings_drawn;
            self.readings_drawn += 1;
            for unexplained in [Unexplained::AtReading(reading), Unexplained::UntilNext(reading)] {
                let late = OwnerLate {
                    unexplained,
                    ..self.tally.late()
                };
                self.tally.set_late(late);
                self.tally.record(at);
            }
        }
    }

    /// The context's size is known once the whole run is read. It is drawn
    /// from the device's first event, as is what the first reading leaves
    /// unexplained (the estimate's figure before it): an allocation may be
    /// recorded just before the record of the context it was made in, and
    /// the footprint is estimated with the context in it from the start.
    fn draw_context(&mut self) {
        let mut late = self.tally.late();
        if late.context_drawn {
            return;
        }
        late.context_drawn = true;
        // Nothing drawn yet means no reading was: any left are all there were.
        if late.unexplained == Unexplained::Nothing && !self.readings_left.is_empty() {
            late.unexplained = Unexplained::BeforeFirstReading;
        }
        self.tally.set_late(late);
    }

    /// Takes in an allocation change on this device.
    pub(super) fn change(&mut self, change: &Change, time_ns: u64) {
        let (allocation, grows) = match change {
            Change::Allocated(a) => (a, true),
            Change::Freed { allocation, .. } => (allocation, false),
            _ => return,
        };
        self.draw_context();
        let size = allocation.size as i64;
        let delta = if grows { size } else { -size };
        self.tally.change(Part::Stack(allocation.stack), delta, time_ns);
    }

    /// Takes in a measurement on this device.
    pub(super) fn measurement(&mut self, event: &Event) {
        self.draw_context();
        let (category, value) = match event.op {
            Op::PoolSample => {
                self.pools.insert(event.address, event.size.saturating_sub(event.arg1));
                let held = self.pools.values().fold(0u64, |sum, held| sum.saturating_add(*held));
                (POOLS, held)
            }
            Op::GraphSample => (GRAPHS, event.size),
            Op::Limit if event.api == Api::CuCtxSetLimit => (CONTEXT, self.grown(CONTEXT, event)),
            Op::ModuleLoad | Op::KernelLoad => (MODULES, self.grown(MODULES, event)),
            Op::StreamObjects => (STREAMS, self.grown(STREAMS, event)),
            Op::GraphExec => (EXECUTABLE_GRAPHS, self.grown(EXECUTABLE_GRAPHS, event)),
            _ => return,
        };
        let delta = value.wrapping_sub(self.categories[category]) as i64;
        self.categories[category] = value;
        self.tally.change(Part::Category(category), delta, event.time_ns);
    }

    /// The category's bytes once `event`'s load cost is added.
    fn grown(&self, category: usize, event: &Event) -> u64 {
        self.categories[category].saturating_add(event.load_cost().unwrap_or(0))
    }

    /// The chart, once the pass is over and `footprint` is known: the
    /// largest owners as series of their own, then the rest as one, then
    /// the categories.
    pub(super) fn into_chart(mut self, footprint: &DeviceFootprint, index: &TraceIndex, info: &ProcessIndex) -> Chart {
        self.readings_until(u64::MAX);
        let owners = footprint.owners_by_size();
        let mut names: Vec<String> = owners.iter().take(SERIES).map(|(n, _)| n.clone()).collect();
        let series_of_owner: HashMap<String, usize> = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        names.push("other owners".into());
        let first_category = names.len();
        names.extend(Category::ALL.map(|c| category_chart_name(c).to_string()));
        let mut series_of_stack = HashMap::default();
        let series_of = |part: Part| match part {
            Part::Category(category) => first_category + category,
            Part::Stack(stack) => *series_of_stack.entry(stack).or_insert_with(|| {
                let owner = owner_of(&index.frames(info, stack));
                series_of_owner.get(&owner).copied().unwrap_or(first_category - 1)
            }),
        };
        let late_values = |late: OwnerLate| {
            let context = if late.context_drawn { footprint.context_first } else { 0 };
            vec![
                (first_category + CONTEXT, context),
                (
                    first_category + UNEXPLAINED_BAND,
                    unexplained_bytes(footprint, late.unexplained),
                ),
            ]
        };
        self.tally.into_chart(names, series_of, late_values)
    }
}

/// The unexplained band's bytes: a reading's figure, or until the next
/// reading the smaller of the two (as the report's estimate has it).
fn unexplained_bytes(footprint: &DeviceFootprint, unexplained: Unexplained) -> u64 {
    let steps = &footprint.unexplained_steps;
    let figure = |k: usize| steps.get(k).map(|&(_, bytes)| bytes);
    let bytes = match unexplained {
        Unexplained::Nothing => None,
        Unexplained::BeforeFirstReading => figure(0),
        Unexplained::AtReading(k) => figure(k),
        Unexplained::UntilNext(k) => figure(k).map(|bytes| figure(k + 1).map_or(bytes, |next| bytes.min(next))),
    };
    bytes.map_or(0, |bytes| bytes.max(0) as u64)
}
