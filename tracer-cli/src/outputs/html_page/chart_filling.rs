//! The page's charts: a consumer of the summary's replay that tallies, per
//! process and device, the chart of live bytes by top call site and the
//! chart of where the driver's memory went, and notes each process's first
//! memory event, where its charts open.

use super::chart::{Chart, TimeAxis, SERIES};
use super::chart_tally::{ChartTally, Part};
use super::owner_chart::OwnerTally;
use cudatrace_analysis::{
    call_sites, footprint_reading_times, site_key, Boundaries, ByStack, Change, Consumer, DeviceKey, PerProcess,
    ProcessIndex, Step, Summary, TraceIndex,
};
use foldhash::HashMap;
use std::collections::BTreeMap;

/// Every chart of the page, per process (in the order of
/// [`TraceIndex::processes`]).
pub(super) struct PageCharts {
    /// By call site, per device.
    pub(super) sites: Vec<BTreeMap<DeviceKey, Chart>>,
    /// By owner and the driver's categories, per device ordinal.
    pub(super) owners: Vec<BTreeMap<u8, Chart>>,
    /// When the process's first memory event happened: its charts open
    /// there, not at the interpreter's start-up.
    pub(super) first_memory_ns: Vec<Option<u64>>,
}

/// Every chart's time axis: from the trace's start (the origin of every
/// time on the page) to the process's last event or exit; finer over its
/// steps, where `boundaries` has them (the charts open on them).
fn time_axis(index: &TraceIndex, info: &ProcessIndex, boundaries: Option<&Boundaries>) -> TimeAxis {
    let t0 = index.start_ns();
    let end = [info.last_time_ns, info.end.as_ref().and_then(|e| e.exit_time_ns)]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(t0);
    let span = end.saturating_sub(t0);
    match boundaries {
        Some(Boundaries::Steps(marker)) => {
            TimeAxis::over_steps(t0, span, marker.first_ns, marker.loop_end_ns, marker.steps)
        }
        _ => TimeAxis::even(t0, span),
    }
}

/// The charts being tallied, as a consumer of the summary's own pass (see
/// [`super::chart_tally`]): the page reads the trace once.
pub(super) struct ChartsFilling<'a> {
    index: &'a TraceIndex,
    /// Per process, its charts' time axis.
    axes: Vec<TimeAxis>,
    /// Per process, the call-site charts' tallies, per device.
    sites: Vec<BTreeMap<DeviceKey, ChartTally<()>>>,
    /// Per process, the owner charts' tallies, per device ordinal.
    owners: Vec<BTreeMap<u8, OwnerTally>>,
    first_memory_ns: Vec<Option<u64>>,
}

impl<'a> ChartsFilling<'a> {
    /// Nothing tallied yet: an owner chart for each device whose footprint
    /// will be estimated, with the times of its readings. `boundaries` are
    /// each process's steps (or low points) as the summary will find them.
    /// Only the processes `selected` (all where `None`) get their owner
    /// charts' tallies: a replay of a group of processes takes no memory
    /// for the others'.
    pub(super) fn new(
        index: &'a TraceIndex,
        boundaries: &[Option<Boundaries>],
        selected: Option<&[bool]>,
    ) -> ChartsFilling<'a> {
        let axes: Vec<TimeAxis> = index
            .processes
            .iter()
            .enumerate()
            .map(|(process, info)| time_axis(index, info, boundaries.get(process).and_then(Option::as_ref)))
            .collect();
        let owners = index
            .processes
            .iter()
            .zip(&axes)
            .enumerate()
            .map(|(number, (info, axis))| {
                if selected.is_some_and(|selected| !selected[number]) {
                    return BTreeMap::new();
                }
                footprint_reading_times(index, info)
                    .into_iter()
                    .map(|(device, times)| (device, OwnerTally::new(axis.clone(), &times)))
                    .collect()
            })
            .collect();
        ChartsFilling {
            index,
            axes,
            sites: index.processes.iter().map(|_| BTreeMap::new()).collect(),
            owners,
            first_memory_ns: vec![None; index.processes.len()],
        }
    }

    /// The charts, once `summary` is built from the same pass: the series
    /// of each call-site chart are the largest call sites at its device's
    /// peak, and those of each owner chart the largest owners.
    pub(super) fn finish(self, summary: &Summary) -> PageCharts {
        let index = self.index;
        let axes = &self.axes;
        let sites = (self.sites.into_iter().zip(&index.processes).zip(axes))
            .zip(&summary.processes)
            .map(|(((mut tallies, info), axis), process)| {
                process
                    .devices
                    .iter()
                    .map(|(&device, stats)| {
                        let tally = tallies
                            .remove(&device)
                            .unwrap_or_else(|| ChartTally::new(axis.clone(), ()));
                        (device, site_chart(index, info, &stats.peak_by_stack, tally))
                    })
                    .collect()
            })
            .collect();
        let owners = (self.owners.into_iter().zip(&index.processes).zip(axes))
            .zip(&summary.footprints)
            .map(|(((mut tallies, info), axis), footprints)| {
                footprints
                    .iter()
                    .map(|f| {
                        let tally = tallies
                            .remove(&f.device)
                            .unwrap_or_else(|| OwnerTally::new(axis.clone(), &[]));
                        (f.device, tally.into_chart(f, index, info))
                    })
                    .collect()
            })
            .collect();
        PageCharts {
            sites,
            owners,
            first_memory_ns: self.first_memory_ns,
        }
    }
}

/// The call-site chart of `tally`: its series are the largest call sites
/// of `at_peak`, then "other call sites".
fn site_chart(index: &TraceIndex, info: &ProcessIndex, at_peak: &ByStack, tally: ChartTally<()>) -> Chart {
    let mut names = Vec::new();
    let mut of_site = HashMap::default();
    for site in call_sites(index, info, at_peak).iter().take(SERIES) {
        of_site.insert(site.key.clone(), names.len());
        names.push(site.name.clone());
    }
    names.push("other call sites".to_string());
    let other = names.len() - 1;
    let mut series_of_stack = HashMap::default();
    let series_of = |part: Part| match part {
        Part::Stack(stack) => *series_of_stack
            .entry(stack)
            .or_insert_with(|| of_site.get(&site_key(index, info, stack)).copied().unwrap_or(other)),
        Part::Category(_) => other,
    };
    tally.into_chart(names, series_of, |_| Vec::new())
}

impl ChartsFilling<'_> {
    /// The owner charts of the event's process take their readings, and
    /// the one of its device what it changed in device memory.
    fn owner_charts(&mut self, step: &Step) {
        let (event, owners) = (step.event, &mut self.owners[step.process]);
        for tally in owners.values_mut() {
            tally.readings_until(event.time_ns.saturating_sub(1));
        }
        if event.op.is_measurement() {
            if let Some(tally) = event.device.and_then(|d| owners.get_mut(&d)) {
                tally.measurement(event);
            }
        }
        for change in step.changes {
            if let Change::Allocated(a) | Change::Freed { allocation: a, .. } = change {
                if let Some(tally) = a
                    .device
                    .filter(|_| a.is_device_memory())
                    .and_then(|d| owners.get_mut(&d))
                {
                    tally.change(change, event.time_ns);
                }
            }
        }
    }

    /// The call-site chart of each allocation's device counts its bytes
    /// against its call stack.
    fn site_charts(&mut self, step: &Step) {
        for change in step.changes {
            let (grows, a) = match change {
                Change::Allocated(a) => (true, a),
                Change::Freed { allocation, .. } => (false, allocation),
                _ => continue,
            };
            if !a.is_device_memory() {
                continue;
            }
            let axis = &self.axes[step.process];
            let tally = self.sites[step.process]
                .entry(DeviceKey::of(a.device))
                .or_insert_with(|| ChartTally::new(axis.clone(), ()));
            let size = a.size as i64;
            tally.change(
                Part::Stack(a.stack),
                if grows { size } else { -size },
                step.event.time_ns,
            );
        }
    }
}

impl Consumer for ChartsFilling<'_> {
    type Error = std::convert::Infallible;

    fn step(&mut self, step: &Step) -> Result<(), Self::Error> {
        if step.event.op.is_memory_event() {
            let first = &mut self.first_memory_ns[step.process];
            *first = Some(first.map_or(step.event.time_ns, |t| t.min(step.event.time_ns)));
        }
        self.owner_charts(step);
        self.site_charts(step);
        Ok(())
    }
}

/// Each process's tallies come from its own events alone: the page's
/// replay can run per group of processes.
impl PerProcess for ChartsFilling<'_> {
    fn take_process(&mut self, other: &mut Self, process: usize) {
        std::mem::swap(&mut self.axes[process], &mut other.axes[process]);
        std::mem::swap(&mut self.sites[process], &mut other.sites[process]);
        std::mem::swap(&mut self.owners[process], &mut other.owners[process]);
        self.first_memory_ns[process] = other.first_memory_ns[process];
    }
}
