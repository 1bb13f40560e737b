//! A process's steps, measured during the replay: each step's start and
//! length, and per device its allocated peak, allocated and reserved bytes
//! at its end; and, at the end of every complete step, each call stack's
//! live bytes, from which [`super::growth_within_run`] finds the call sites that keep
//! growing.
//!
//! The boundaries come from [`StepMarker`]: a step starts at an allocation
//! of the marker's stack and ends where the next starts. The last step has
//! no next one: after the loop's last allocation it keeps the frees of what
//! it allocated itself, and ends at the first event that allocates again or
//! frees older memory (the program's cleanup, or its exit). It is left out
//! of the growth series, whose points are all states between two steps, so
//! whatever the program frees after its loop never counts.
//!
//! Where PyTorch's tensors mark the steps, the figures are the tensors'
//! (allocated, reserved); otherwise they are the driver's device memory in
//! use, with no reserved figure.
//!
//! Records are kept bounded: when there are `2 ×` [`STEPS_KEPT`] of them,
//! neighbours are merged two by two into ranges of steps, each keeping its
//! peak and its end state, so a day of steps takes the same memory as an
//! hour (older ranges are the longer ones). The growth series keep at most
//! `2 ×` [`SERIES_POINTS`] step ends, thinned the same way to every other.

use super::allocation_kind::{allocation_kind, free_kind};
use super::device_stats::DeviceStats;
use super::keys::{ByStack, DeviceKey};
use super::step_finding::StepMarker;
use super::tensor_summary::TensorSummary;
use cudatrace_events::Event;
use cudatrace_trace::{StepDeviceRow, StepRow, StepSeries, StepsState};
use foldhash::{HashMap, HashSet};
use std::collections::BTreeMap;

/// Step records kept per process: between this and twice this.
pub const STEPS_KEPT: usize = 4096;
/// Step ends the growth series keep: between this and twice this, evenly
/// spaced (memory is this times the call stacks live at step ends).
pub const SERIES_POINTS: usize = 256;

/// One device's figures over a step (or a range of merged steps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepFigures {
    /// Most bytes allocated at once during the step.
    pub allocated_peak: u64,
    /// Bytes allocated at its end.
    pub allocated_end: u64,
    /// Bytes reserved at its end, where PyTorch's tensors are recorded.
    pub reserved_end: Option<u64>,
}

/// One step, or a range of steps merged to keep the records bounded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRecord {
    /// Its number, from 1; the first of the range.
    pub first: u64,
    /// The last step of the range (`first` for a single step).
    pub last: u64,
    /// When it started (`CLOCK_MONOTONIC` ns).
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
    /// Whether the next step's start ended it (false for the last step,
    /// which ends at the loop's last allocation).
    pub complete: bool,
    /// Per device.
    pub devices: BTreeMap<DeviceKey, StepFigures>,
}

/// The steps of one process, as the replay measures them.
#[derive(Clone, Debug)]
pub struct Steps {
    /// How they were found.
    pub marker: StepMarker,
    /// The steps (or ranges), in order.
    pub records: Vec<StepRecord>,
    /// The step under way.
    open: Option<StepRecord>,
    /// The numbers of the complete steps whose ends the series hold: every
    /// `stride`-th step.
    ends: Vec<u64>,
    stride: u64,
    /// Per device and call stack, live bytes at each of `ends`. Stacks not
    /// live at some ends have shorter vectors, padded with zeros when read.
    live_at_ends: HashMap<(DeviceKey, u32), Vec<u64>>,
    /// Steps started.
    started: u64,
    /// What the last step allocated: its own frees after the loop's last
    /// allocation still belong to it.
    last_step_made: HashSet<u64>,
}

/// A device key's ordinal, as the trace stores it.
fn ordinal(device: DeviceKey) -> Option<u8> {
    match device {
        DeviceKey::Gpu(ordinal) => Some(ordinal),
        DeviceKey::Unknown => None,
    }
}

/// A step as a fold stores it.
fn row_of(record: &StepRecord) -> StepRow {
    StepRow {
        first: record.first,
        last: record.last,
        start_ns: record.start_ns,
        end_ns: record.end_ns,
        complete: record.complete,
        devices: record
            .devices
            .iter()
            .map(|(&key, f)| StepDeviceRow {
                device: ordinal(key),
                allocated_peak: f.allocated_peak,
                allocated_end: f.allocated_end,
                reserved_end: f.reserved_end,
            })
            .collect(),
    }
}

/// The figures one device's state gives: allocated, reserved, live by stack.
fn device_state<'a>(
    tensors: bool,
    device: DeviceKey,
    tensor_summary: &'a TensorSummary,
    devices: &'a BTreeMap<DeviceKey, DeviceStats>,
) -> Option<(u64, Option<u64>, &'a ByStack)> {
    if tensors {
        tensor_summary
            .devices
            .get(&device)
            .map(|t| (t.now.allocated, Some(t.now.reserved), &t.live_by_stack))
    } else {
        devices.get(&device).map(|d| (d.current, None, &d.live_by_stack))
    }
}

impl Steps {
    /// No step yet.
    pub fn new(marker: StepMarker) -> Steps {
        Steps {
            marker,
            records: Vec::new(),
            open: None,
            ends: Vec::new(),
            stride: 1,
            live_at_ends: HashMap::default(),
            started: 0,
            last_step_made: HashSet::default(),
        }
    }

    /// Before `event` is counted: a step ends and another starts at a
    /// marker allocation; the last step ends past the loop's last
    /// allocation (see the module documentation).
    pub fn before(&mut self, event: &Event, tensors: &TensorSummary, devices: &BTreeMap<DeviceKey, DeviceStats>) {
        let in_last_step = self.open.is_some() && self.started >= self.marker.steps;
        if in_last_step && !self.marker.starts_step(event) {
            let kind = Some(self.marker.tensors);
            let allocates = allocation_kind(event) == kind;
            let past_loop = event.time_ns > self.marker.loop_end_ns;
            if past_loop && (allocates || (free_kind(event) == kind && !self.last_step_made.contains(&event.address))) {
                let end = self.marker.loop_end_ns.max(self.open.as_ref().map_or(0, |s| s.end_ns));
                self.close(end, false, tensors, devices);
                return;
            }
            if allocates {
                self.last_step_made.insert(event.address);
            }
            // Its own allocations and frees extend it; nothing else does
            // (the exit's readings, a fork).
            if allocates || free_kind(event) == kind {
                if let Some(step) = &mut self.open {
                    step.end_ns = event.time_ns;
                }
            }
            return;
        }
        if self.marker.starts_step(event) {
            self.close(event.time_ns, true, tensors, devices);
            self.started += 1;
            if self.started >= self.marker.steps {
                self.last_step_made.insert(event.address);
            }
            let mut step = StepRecord {
                first: self.started,
                last: self.started,
                start_ns: event.time_ns,
                end_ns: event.time_ns,
                complete: false,
                devices: BTreeMap::new(),
            };
            let keys: Vec<DeviceKey> = if self.marker.tensors {
                tensors.devices.keys().copied().collect()
            } else {
                devices.keys().copied().collect()
            };
            for key in keys {
                if let Some((allocated, _, _)) = device_state(self.marker.tensors, key, tensors, devices) {
                    step.devices.insert(
                        key,
                        StepFigures {
                            allocated_peak: allocated,
                            ..StepFigures::default()
                        },
                    );
                }
            }
            self.open = Some(step);
        }
    }

    /// After `event` is counted: the open step's peak on its device.
    pub fn after(&mut self, event: &Event, tensors: &TensorSummary, devices: &BTreeMap<DeviceKey, DeviceStats>) {
        let Some(step) = &mut self.open else {
            return;
        };
        let key = DeviceKey::of(event.device);
        if let Some((allocated, _, _)) = device_state(self.marker.tensors, key, tensors, devices) {
            let figures = step.devices.entry(key).or_default();
            figures.allocated_peak = figures.allocated_peak.max(allocated);
        }
    }

    /// Ends the replay: a step still open ends with its last event.
    pub fn finish(&mut self, tensors: &TensorSummary, devices: &BTreeMap<DeviceKey, DeviceStats>) {
        let end = self.open.as_ref().map_or(0, |step| step.end_ns);
        self.close(end, false, tensors, devices);
    }

    fn close(
        &mut self,
        end_ns: u64,
        complete: bool,
        tensors: &TensorSummary,
        devices: &BTreeMap<DeviceKey, DeviceStats>,
    ) {
        let Some(mut step) = self.open.take() else {
            return;
        };
        step.end_ns = end_ns.max(step.start_ns);
        step.complete = complete;
        let at = self.ends.len();
        let in_series = complete && step.last % self.stride == 0;
        if in_series {
            self.ends.push(step.last);
        }
        for (&key, figures) in step.devices.iter_mut() {
            let Some((allocated, reserved, live)) = device_state(self.marker.tensors, key, tensors, devices) else {
                continue;
            };
            figures.allocated_end = allocated;
            figures.reserved_end = reserved;
            if in_series {
                for (&stack, &(bytes, _)) in live {
                    let series = self.live_at_ends.entry((key, stack)).or_default();
                    series.resize(at, 0);
                    series.push(bytes);
                }
            }
        }
        self.records.push(step);
        if self.records.len() >= 2 * STEPS_KEPT && self.records.iter().all(|r| r.complete) {
            self.merge_pairs();
        }
        if self.ends.len() >= 2 * SERIES_POINTS {
            self.thin_series();
        }
    }

    /// Keeps every other step end of the growth series (the later of each
    /// two), and from now on takes every other one.
    fn thin_series(&mut self) {
        let count = self.ends.len();
        self.stride *= 2;
        let later = |values: &[u64]| values.chunks(2).map(|pair| *pair.last().expect("a pair")).collect();
        self.ends = later(&self.ends);
        for series in self.live_at_ends.values_mut() {
            series.resize(count, 0);
            *series = later(series);
        }
        self.live_at_ends
            .retain(|_, series| series.iter().any(|&bytes| bytes > 0));
    }

    /// Halves the records: each two neighbours become one range with the
    /// higher peak and the later end.
    fn merge_pairs(&mut self) {
        self.records = self
            .records
            .chunks(2)
            .map(|pair| match pair {
                [a, b] => StepRecord {
                    first: a.first,
                    last: b.last,
                    start_ns: a.start_ns,
                    end_ns: b.end_ns,
                    complete: b.complete,
                    devices: b
                        .devices
                        .iter()
                        .map(|(&key, later)| {
                            let earlier = a.devices.get(&key).map_or(0, |f| f.allocated_peak);
                            let peak = later.allocated_peak.max(earlier);
                            (
                                key,
                                StepFigures {
                                    allocated_peak: peak,
                                    ..*later
                                },
                            )
                        })
                        .collect(),
                },
                [single] => single.clone(),
                _ => unreachable!("chunks of two"),
            })
            .collect();
    }

    /// What a fold keeps of these steps at its cut (see
    /// `cudatrace_trace::StepsState`), for process `process`.
    /// Records are merged and the series thinned, as a long run does, until
    /// the state takes about `budget` bytes or less.
    pub fn state(&self, process: u32, budget: u64) -> StepsState {
        let mut kept = self.clone();
        let bytes = |steps: &Steps| {
            // About what they encode to: times and counts as varints.
            let rows: u64 = steps.records.iter().map(|r| 24 + 16 * r.devices.len() as u64).sum();
            rows + steps.live_at_ends.values().map(|v| 8 + 5 * v.len() as u64).sum::<u64>()
        };
        while bytes(&kept) > budget && kept.records.len() > 1 && kept.records.iter().all(|r| r.complete) {
            kept.merge_pairs();
        }
        while bytes(&kept) > budget && kept.ends.len() > 1 {
            kept.thin_series();
        }
        kept.state_as_it_is(process)
    }

    fn state_as_it_is(&self, process: u32) -> StepsState {
        let mut series: Vec<StepSeries> = self
            .live_at_ends
            .iter()
            .map(|(&(device, stack), bytes)| StepSeries {
                device: ordinal(device),
                stack,
                bytes: bytes.clone(),
            })
            .collect();
        series.sort_by_key(|s| (s.device, s.stack));
        StepsState {
            process,
            marker_stack: self.marker.stack,
            marker_device: self.marker.device,
            tensors: self.marker.tensors,
            started: self.started,
            stride: self.stride,
            records: self.records.iter().map(row_of).collect(),
            open: self.open.as_ref().map(row_of),
            ends: self.ends.clone(),
            series,
        }
    }

    /// Steps that go on from a fold's `state`, found by `marker` (its
    /// count and loop end the whole run's).
    pub fn resumed(state: &StepsState, marker: StepMarker) -> Steps {
        let record_of = |row: &StepRow| StepRecord {
            first: row.first,
            last: row.last,
            start_ns: row.start_ns,
            end_ns: row.end_ns,
            complete: row.complete,
            devices: row
                .devices
                .iter()
                .map(|d| {
                    let figures = StepFigures {
                        allocated_peak: d.allocated_peak,
                        allocated_end: d.allocated_end,
                        reserved_end: d.reserved_end,
                    };
                    (DeviceKey::of(d.device), figures)
                })
                .collect(),
        };
        Steps {
            marker,
            records: state.records.iter().map(record_of).collect(),
            open: state.open.as_ref().map(record_of),
            ends: state.ends.clone(),
            stride: state.stride.max(1),
            live_at_ends: state
                .series
                .iter()
                .map(|s| ((DeviceKey::of(s.device), s.stack), s.bytes.clone()))
                .collect(),
            started: state.started,
            last_step_made: HashSet::default(),
        }
    }

    /// The numbers of the complete steps whose ends the growth series hold.
    pub fn series_ends(&self) -> &[u64] {
        &self.ends
    }

    /// Each device's call stacks' live bytes at each of [`Steps::series_ends`].
    pub fn live_at_complete_ends(&self) -> impl Iterator<Item = (DeviceKey, u32, Vec<u64>)> + '_ {
        self.live_at_ends.iter().map(move |(&(device, stack), series)| {
            let mut padded = series.clone();
            padded.resize(self.ends.len(), 0);
            (device, stack, padded)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_events::tensor_event;
    use crate::analysis::trace_summary::ProcessSummary;
    use cudatrace_events::tensors::Action;

    const GPU0: DeviceKey = DeviceKey::Gpu(0);

    fn tensor(seq: u64, action: Action, address: u64, size: u64, stack: u32) -> Event {
        tensor_event(seq, seq * 1000, action, address, size, stack)
    }

    /// A loop of `steps` steps: each allocates an activation (stack 10, the
    /// marker, 1000 bytes) and an output (stack 11, 100 bytes), frees the
    /// activation, and keeps the output when `leak` (else frees it at the
    /// next step's start). After the loop everything is freed, as at exit.
    fn run(steps: u64, leak: bool) -> ProcessSummary {
        let marker = StepMarker {
            stack: 10,
            device: Some(0),
            tensors: true,
            steps,
            first_ns: 1000,
            loop_end_ns: 0,
        };
        let mut events = vec![tensor(0, Action::SegmentAlloc, 0x10_0000, 1 << 20, 1)];
        let mut seq = 1;
        let mut outputs = Vec::new();
        for step in 0..steps {
            let activation = 0x1_0000_0000 + step * 0x1000;
            let output = 0x2_0000_0000 + step * 0x1000;
            for (action, address, size, stack) in
                [(Action::Alloc, activation, 1000, 10), (Action::Alloc, output, 100, 11)]
            {
                events.push(tensor(seq, action, address, size, stack));
                seq += 1;
            }
            // The previous output goes once the new one is made, unless kept.
            if !leak {
                if let Some(previous) = outputs.pop() {
                    events.push(tensor(seq, Action::FreeCompleted, previous, 100, 0));
                    seq += 1;
                }
            }
            events.push(tensor(seq, Action::FreeCompleted, activation, 1000, 0));
            seq += 1;
            outputs.push(output);
        }
        // The last output is the loop's last allocation.
        let loop_end = if leak { seq - 2 } else { seq - 3 } * 1000;
        for output in outputs {
            events.push(tensor(seq, Action::FreeCompleted, output, 100, 0));
            seq += 1;
        }
        let mut process = ProcessSummary {
            steps: Some(Steps::new(StepMarker {
                loop_end_ns: loop_end,
                ..marker
            })),
            ..ProcessSummary::default()
        };
        let mut changes = Vec::new();
        for event in &events {
            process.apply(event, &mut changes);
        }
        process.finish();
        process
    }

    #[test]
    fn each_step_has_its_peak_and_end_state_and_the_last_ends_with_the_loop() {
        let process = run(4, true);
        let steps = process.steps.as_ref().unwrap();
        let figures: Vec<(u64, u64, u64, bool)> = steps
            .records
            .iter()
            .map(|r| {
                let f = r.devices[&GPU0];
                (r.first, f.allocated_peak, f.allocated_end, r.complete)
            })
            .collect();
        // Step n holds n - 1 outputs at its start, peaks with the activation
        // and the new output, and ends holding n outputs.
        assert_eq!(
            figures,
            vec![
                (1, 1100, 100, true),
                (2, 1200, 200, true),
                (3, 1300, 300, true),
                (4, 1400, 400, false)
            ]
        );
        assert_eq!(steps.records[0].devices[&GPU0].reserved_end, Some(1 << 20));
        // Step 1 starts at the first marker (event 1) and ends at the
        // second (event 4); the last ends with its own free after the loop's
        // last allocation (event 11), before the cleanup frees older outputs.
        assert_eq!((steps.records[0].start_ns, steps.records[0].end_ns), (1000, 4000));
        assert_eq!(steps.records[3].end_ns, 12_000);
        let mut series: Vec<(DeviceKey, u32, Vec<u64>)> = steps.live_at_complete_ends().collect();
        series.sort();
        assert_eq!(series, vec![(GPU0, 11, vec![100, 200, 300])]);
    }

    #[test]
    fn a_clean_loop_holds_the_same_at_every_step_end() {
        let process = run(5, false);
        let steps = process.steps.as_ref().unwrap();
        assert_eq!(steps.records.len(), 5);
        let series: Vec<(DeviceKey, u32, Vec<u64>)> = steps.live_at_complete_ends().collect();
        assert_eq!(series, vec![(GPU0, 11, vec![100, 100, 100, 100])]);
    }

    #[test]
    fn past_the_records_kept_neighbours_merge_into_ranges() {
        let steps_run = 2 * STEPS_KEPT as u64 + 1;
        let process = run(steps_run, true);
        let steps = process.steps.as_ref().unwrap();
        // 8192 complete records were halved into 4096 ranges of two; the
        // last step came after, on its own.
        assert_eq!(steps.records.len(), STEPS_KEPT + 1);
        let first = &steps.records[0];
        assert_eq!((first.first, first.last), (1, 2));
        assert_eq!(first.devices[&GPU0].allocated_peak, 1200);
        assert_eq!(first.devices[&GPU0].allocated_end, 200);
        let last = steps.records.last().unwrap();
        assert_eq!((last.first, last.last, last.complete), (steps_run, steps_run, false));
        // The growth series were thinned to every other end each time they
        // reached 512: 8192 ends leave 256 of them, every 32nd.
        let series: Vec<(DeviceKey, u32, Vec<u64>)> = steps.live_at_complete_ends().collect();
        assert_eq!(series.len(), 1);
        assert_eq!(steps.series_ends().len(), SERIES_POINTS);
        assert_eq!(steps.series_ends()[..2], [32, 64]);
        assert_eq!(series[0].2.len(), SERIES_POINTS);
        assert_eq!(series[0].2[..2], [3200, 6400]);
        assert_eq!(*series[0].2.last().unwrap(), 100 * 2 * STEPS_KEPT as u64);
    }
}
