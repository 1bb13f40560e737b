//! One device's footprint once the replay is over: the context's figure,
//! the split at the process's exit and at the footprint's peak, and the
//! caveats on them.

use super::figures::{Breakdown, DeviceFootprint, FootprintNote, Reference, ReferenceSource};
use super::readings::{context_baseline, context_record, first_nvml_with_context};
use super::tracker::FootprintTracker;
use crate::analysis::trace_index::{ProcessIndex, TraceIndex};
use cudatrace_events::{Api, Event, Op};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the process measured on one device, to split its figure at any
/// moment.
struct DeviceMeasures<'a> {
    /// The process's measurements on the device, in time order.
    on_device: Vec<&'a Event>,
    /// The context's bytes when it became current.
    context_bytes: u64,
}

impl DeviceMeasures<'_> {
    /// The split at `moment`: `bytes` estimated from `reading`, with the
    /// owners live then.
    fn breakdown(&self, moment: u64, bytes: i64, reading: Reference, owners: Vec<(String, u64)>) -> Breakdown {
        let until = || self.on_device.iter().filter(move |e| e.time_ns <= moment);
        let cost_of = |ops: &[Op]| -> u64 {
            until()
                .filter(|e| ops.contains(&e.op))
                .filter_map(|e| e.load_cost())
                .sum()
        };
        let limit_growth: u64 = until()
            .filter(|e| e.op == Op::Limit && e.api == Api::CuCtxSetLimit)
            .filter_map(|e| e.load_cost())
            .sum();
        let mut pools: BTreeMap<u64, u64> = BTreeMap::new();
        let mut graphs = 0;
        for e in until() {
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
            context: self.context_bytes + limit_growth,
            modules: cost_of(&[Op::ModuleLoad, Op::KernelLoad]),
            streams_and_events: cost_of(&[Op::StreamObjects]),
            graph_executables: cost_of(&[Op::GraphExec]),
        }
    }
}

fn owned(owners: &[(Arc<str>, u64)]) -> Vec<(String, u64)> {
    owners
        .iter()
        .map(|(owner, bytes)| (owner.to_string(), *bytes))
        .collect()
}

impl FootprintTracker {
    /// The context's bytes on `device` when it became current, and the
    /// caveats on that figure. Before the process started it held nothing
    /// on the device: the context's runtime may make it current through
    /// calls we cannot see, so the reading before the process is the
    /// baseline, not the one before the context's first record.
    fn context_figure(
        &self,
        index: &TraceIndex,
        process: &ProcessIndex,
        device: u8,
        notes: &mut Vec<FootprintNote>,
    ) -> u64 {
        let info = process.devices.get(&u32::from(device));
        let context_record = context_record(process, device);
        let baseline = context_record.and_then(|_| context_baseline(index, info, process.start.start_monotonic_ns));
        if baseline.is_some_and(|(_, before_start)| !before_start) {
            notes.push(FootprintNote::LateBaseline);
        }
        let live = self.live_at_context.get(&device).copied().unwrap_or(0);
        match (context_record, baseline.map(|(free, _)| free)) {
            (Some(context), Some(baseline_free)) => baseline_free.saturating_sub(context.arg1).saturating_sub(live),
            (Some(context), None) => {
                notes.push(FootprintNote::NoBaseline);
                context.arg2.saturating_sub(context.arg1).saturating_sub(live)
            }
            (None, _) => {
                notes.push(FootprintNote::NoContext);
                0
            }
        }
    }

    /// The split at the process's exit, from the reading that stands for it.
    fn split_at_exit(&self, process: &ProcessIndex, device: u8, measures: &DeviceMeasures) -> Option<Breakdown> {
        let estimate = self.devices.get(&device)?;
        let reading = estimate.exit_reading?;
        let offset = estimate
            .offsets
            .iter()
            .rev()
            .find(|(r, _)| *r == reading)
            .map_or(0, |(_, offset)| *offset);
        Some(measures.breakdown(
            self.exit_moment(process),
            offset + estimate.measured.total(),
            reading,
            owned(&self.owners_on(device)),
        ))
    }

    /// The context as NVML's first per-process reading after it puts it:
    /// that reading less everything else measured by then.
    fn context_by_nvml(
        &self,
        index: &TraceIndex,
        process: &ProcessIndex,
        device: u8,
        measures: &DeviceMeasures,
    ) -> Option<u64> {
        let first = first_nvml_with_context(index, process, device)?;
        let owners = self
            .snapshots
            .get(&(first.time_ns, device))
            .cloned()
            .unwrap_or_default();
        let then = measures.breakdown(first.time_ns, first.bytes as i64, first, owners);
        let others = then.explained() - then.context;
        Some(first.bytes.saturating_sub(others))
    }

    /// One device's footprint, once the replay is over.
    pub(super) fn device_footprint(&self, index: &TraceIndex, process: &ProcessIndex, device: u8) -> DeviceFootprint {
        let mut notes = Vec::new();
        let estimate = self.devices.get(&device);
        let on_device: Vec<&Event> = process
            .measurements
            .iter()
            .filter(|e| e.device == Some(device))
            .collect();
        let context_bytes = self.context_figure(index, process, device, &mut notes);
        let exit_reading = estimate.and_then(|e| e.exit_reading);
        if exit_reading.is_some_and(|r| r.source == ReferenceSource::DeviceBound) {
            let nvml_reason = index
                .nvml_status
                .iter()
                .rev()
                .find(|status| !status.reason.is_empty())
                .map(|status| status.reason.clone());
            notes.push(FootprintNote::NoPerProcessFigure { nvml_reason });
        }
        let limits = on_device
            .iter()
            .filter(|e| e.op == Op::Limit)
            .map(|e| (e.address, e.size))
            .collect();
        let measures = DeviceMeasures {
            on_device,
            context_bytes,
        };
        let at_exit = self.split_at_exit(process, device, &measures);
        let at_peak = estimate
            .and_then(|e| e.peak.as_ref())
            .map(|peak| measures.breakdown(peak.time_ns, peak.estimate, peak.reading, owned(&peak.owners)));
        if at_exit.is_none() {
            notes.push(FootprintNote::NoReading);
        }
        notes.extend(sampling_notes(process, device, &measures.on_device));
        let context_by_nvml = self.context_by_nvml(index, process, device, &measures);
        if let (Some(by_nvml), Some(context)) = (context_by_nvml, at_exit.as_ref().map(|b| b.context)) {
            if by_nvml.abs_diff(context) > (context / 20).max(16 << 20) {
                notes.push(FootprintNote::ContextDisagrees {
                    by_nvml,
                    measured: context,
                });
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
            info: process.devices.get(&u32::from(device)).cloned(),
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

/// Caveats from how the process measured: stream and event creations
/// sampled, and threads whose device changed unseen.
fn sampling_notes(process: &ProcessIndex, device: u8, on_device: &[&Event]) -> Vec<FootprintNote> {
    let mut notes = Vec::new();
    let creations = on_device.iter().filter(|e| {
        e.op == Op::StreamObjects
            && matches!(
                e.api,
                Api::CuStreamCreate | Api::CuStreamCreateWithPriority | Api::CuEventCreate
            )
    });
    let (measured, represented) = creations.fold((0u64, 0u64), |(m, r), e| (m + 1, r + e.size.max(1)));
    if represented > measured {
        notes.push(FootprintNote::StreamsEstimated { measured, represented });
    }
    let mismatches = process
        .measurements
        .iter()
        .filter(|e| e.op == Op::DeviceMismatch && e.device == Some(device))
        .count();
    if mismatches > 0 {
        notes.push(FootprintNote::DeviceMismatches(mismatches));
    }
    notes
}
