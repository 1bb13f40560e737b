//! The page's chart pass: a consumer of the replay that fills, per process
//! and device, the chart of live bytes by top call site and the chart of
//! where the driver's memory went, and notes each process's first memory
//! event, where its charts open.

use super::chart::{Chart, SERIES};
use super::owner_chart::OwnerChart;
use crate::analysis::{
    call_sites, site_key, Change, Consumer, DeviceKey, ProcessIndex, Replay, Step, Summary, TraceIndex,
};
use crate::system::progress::Progress;
use std::collections::{BTreeMap, HashMap};

/// Every chart of the page, per process (in the order of
/// [`TraceIndex::processes`]).
pub(super) struct PageCharts {
    /// By call site, per device.
    pub(super) sites: Vec<BTreeMap<DeviceKey, Chart>>,
    /// By owner and the driver's categories, per device ordinal.
    pub(super) owners: Vec<BTreeMap<u8, OwnerChart>>,
    /// When the process's first memory event happened: its charts open
    /// there, not at the interpreter's start-up.
    pub(super) first_memory_ns: Vec<Option<u64>>,
}

/// Every chart's time axis: from the trace's start (the origin of every
/// time on the page) to the process's last event or exit.
pub(super) fn time_axis(index: &TraceIndex, info: &ProcessIndex) -> (u64, u64) {
    let t0 = index.start_ns();
    let end = [info.last_time_ns, info.end.as_ref().and_then(|e| e.exit_time_ns)]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(t0);
    (t0, end.saturating_sub(t0))
}

/// The charts being filled, and which series each call site's bytes go to.
struct Filling<'a> {
    index: &'a TraceIndex,
    charts: PageCharts,
    /// Per process and device: the series of each charted call site, by key.
    site_series: Vec<BTreeMap<DeviceKey, HashMap<String, usize>>>,
}

/// The second pass: live bytes per top call site (the sites at the peak
/// that `summary` found), and per owner and category, per process and
/// device.
pub(super) fn fill_charts(index: &TraceIndex, summary: &Summary, progress: &Progress) -> PageCharts {
    let mut site_series = vec![BTreeMap::new(); index.processes.len()];
    let sites = index
        .processes
        .iter()
        .zip(&summary.processes)
        .zip(&mut site_series)
        .map(|((info, process), series)| {
            let (t0, span) = time_axis(index, info);
            process
                .devices
                .iter()
                .map(|(&device, stats)| {
                    let (chart, of_site) = site_chart(index, info, &stats.peak_by_stack, t0, span);
                    series.insert(device, of_site);
                    (device, chart)
                })
                .collect()
        })
        .collect();
    let owners = index
        .processes
        .iter()
        .zip(&summary.footprints)
        .map(|(info, footprints)| {
            let (t0, span) = time_axis(index, info);
            footprints
                .iter()
                .map(|f| (f.device, OwnerChart::new(f, t0, span)))
                .collect()
        })
        .collect();
    let mut filling = Filling {
        index,
        charts: PageCharts {
            sites,
            owners,
            first_memory_ns: vec![None; index.processes.len()],
        },
        site_series,
    };
    // The summary's replay already named any block that could not be read.
    let Ok(_) = Replay::new(index, progress).run(&mut filling);
    let mut charts = filling.charts;
    for chart in charts.owners.iter_mut().flat_map(|charts| charts.values_mut()) {
        chart.readings_until(u64::MAX);
    }
    charts
}

/// An empty chart whose series are the largest call sites of `at_peak`,
/// then "other call sites"; and the series of each site, by key.
fn site_chart(
    index: &TraceIndex,
    info: &ProcessIndex,
    at_peak: &crate::analysis::ByStack,
    t0: u64,
    span: u64,
) -> (Chart, HashMap<String, usize>) {
    let mut names = Vec::new();
    let mut of_site = HashMap::new();
    for site in call_sites(index, info, at_peak).iter().take(SERIES) {
        of_site.insert(site.key.clone(), names.len());
        names.push(site.name.clone());
    }
    names.push("other call sites".to_string());
    let chart = Chart::new(names, t0, span);
    (chart, of_site)
}

impl Filling<'_> {
    /// The owner chart of the event's device takes its readings and what
    /// it changed in device memory.
    fn owner_charts(&mut self, step: &Step) {
        let (event, owners) = (step.event, &mut self.charts.owners[step.process]);
        for chart in owners.values_mut() {
            chart.readings_until(event.time_ns.saturating_sub(1));
        }
        if event.op.is_measurement() {
            if let Some(chart) = event.device.and_then(|d| owners.get_mut(&d)) {
                chart.measurement(event);
            }
        }
        for change in step.changes {
            if let Change::Allocated(a) | Change::Freed { allocation: a, .. } = change {
                if let Some(chart) = a
                    .device
                    .filter(|_| a.is_device_memory())
                    .and_then(|d| owners.get_mut(&d))
                {
                    chart.change(self.index, step.info, change, event.time_ns);
                }
            }
        }
    }

    /// The call-site chart of each allocation's device adds or takes away
    /// its bytes in its site's series.
    fn site_charts(&mut self, step: &Step) {
        let (index, info, process) = (self.index, step.info, step.process);
        for change in step.changes {
            let (grows, a) = match change {
                Change::Allocated(a) => (true, a),
                Change::Freed { allocation, .. } => (false, allocation),
                _ => continue,
            };
            if !a.is_device_memory() {
                continue;
            }
            let device = DeviceKey::of(a.device);
            let Some(chart) = self.charts.sites[process].get_mut(&device) else {
                continue;
            };
            let other = chart.names.len() - 1;
            let site_series = &self.site_series[process];
            let series = *chart.series_of.entry(a.stack).or_insert_with(|| {
                site_series
                    .get(&device)
                    .and_then(|sites| sites.get(&site_key(index, info, a.stack)))
                    .copied()
                    .unwrap_or(other)
            });
            let value = &mut chart.current[series];
            *value = if grows {
                value.saturating_add(a.size)
            } else {
                value.saturating_sub(a.size)
            };
            chart.record(step.event.time_ns);
        }
    }
}

impl Consumer for Filling<'_> {
    type Error = std::convert::Infallible;

    fn step(&mut self, step: &Step) -> Result<(), Self::Error> {
        if step.event.op.is_memory_event() {
            let first = &mut self.charts.first_memory_ns[step.process];
            *first = Some(first.map_or(step.event.time_ns, |t| t.min(step.event.time_ns)));
        }
        self.owner_charts(step);
        self.site_charts(step);
        Ok(())
    }
}
