//! The readings a footprint stands on: NVML's per-process figures (or the
//! process's own readings of the device), the context's first record, and
//! the device's free memory before the process started.

use super::figures::{Reference, ReferenceSource};
use crate::analysis::trace_index::{ProcessIndex, TraceIndex};
use cudatrace_events::measures::{sample_reason, DeviceInfo};
use cudatrace_events::{Event, Op};

pub(super) fn nvml_uuid(info: Option<&DeviceInfo>) -> Option<String> {
    info.map(DeviceInfo::uuid_text)
}

/// The process's first context record on `device` that carries a reading.
pub(super) fn context_record(process: &ProcessIndex, device: u8) -> Option<&Event> {
    process
        .measurements
        .iter()
        .find(|e| e.op == Op::Context && e.device == Some(device) && e.arg2 != 0)
}

/// NVML's first per-process reading of device `device` of `process` once
/// its context was there.
pub(super) fn first_nvml_with_context(index: &TraceIndex, process: &ProcessIndex, device: u8) -> Option<Reference> {
    let since = context_record(process, device)?.time_ns;
    nvml_readings(index, process, device)
        .into_iter()
        .find(|r| r.time_ns >= since)
}

/// NVML's per-process readings of device `device` of `process`, in time order.
pub(super) fn nvml_readings(index: &TraceIndex, process: &ProcessIndex, device: u8) -> Vec<Reference> {
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
pub(super) fn readings(index: &TraceIndex, process: &ProcessIndex, device: u8) -> (Vec<Reference>, Option<Reference>) {
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

/// The device's free bytes before the process started: the collector's
/// last NVML reading of the whole device before `time_ns`, or its first if
/// none came before (then with `false`).
pub(super) fn context_baseline(index: &TraceIndex, info: Option<&DeviceInfo>, time_ns: u64) -> Option<(u64, bool)> {
    let uuid = nvml_uuid(info)?;
    let readings: Vec<_> = index.nvml.iter().filter(|s| s.pid == 0 && s.uuid == uuid).collect();
    match readings.iter().rev().find(|s| s.time_ns <= time_ns) {
        Some(before) => Some((before.free_bytes, true)),
        None => readings.first().map(|first| (first.free_bytes, false)),
    }
}

/// Devices the process measured or allocated on, in order.
pub(super) fn devices_of(process: &ProcessIndex) -> impl Iterator<Item = u8> {
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

/// For each device whose footprint is estimated, the times of its reference
/// readings, in the order the estimate takes them: where what is
/// unexplained steps (see [`super::DeviceFootprint::unexplained_steps`]).
pub fn footprint_reading_times(index: &TraceIndex, process: &ProcessIndex) -> Vec<(u8, Vec<u64>)> {
    devices_of(process)
        .map(|device| {
            let (readings, _) = readings(index, process, device);
            (device, readings.iter().map(|r| r.time_ns).collect())
        })
        .collect()
}
