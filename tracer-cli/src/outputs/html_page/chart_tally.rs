//! A chart tallied in the same pass as the summary, before its series are
//! known.
//!
//! The page's charts stack live bytes by the top call sites, or by the top
//! owners, and which those are is known only once the whole trace is read.
//! Rather than read the trace a second time, the pass counts each change
//! against what it belongs to (a call stack, or one of the driver's
//! categories) and [`ChartTally::into_chart`] groups them into series
//! afterwards.
//!
//! A chart keeps, per time bin, the state at the bin's highest total and its
//! last state (see [`Chart::record`]). The highest total is the sum over
//! every part, so it does not depend on how parts are grouped, except for
//! values known only after the pass (the context's size, what readings
//! leave unexplained). Those change at a few moments; between them the
//! tally keeps a stretch: its highest measured total, the changes up to
//! that moment and the changes after it. Within a stretch the late values
//! are the same at every moment, so its highest moment is the same one the
//! finished chart would pick; across the stretches of a bin, the choice is
//! made once the late values are known. The result is exactly the chart
//! that recording each moment into known series would give.

use super::chart::{Bin, Chart, TimeAxis};
use foldhash::HashMap;

/// What a change in bytes belongs to.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(super) enum Part {
    /// The allocations made with one call stack.
    Stack(u32),
    /// One of a chart's fixed categories, by its number.
    Category(usize),
}

/// A run of recorded moments in one bin with the same late values.
struct Stretch<Late> {
    bin: usize,
    late: Late,
    /// The highest measured total recorded in the stretch.
    top: u64,
    /// Changes from the end of the previous stretch to the highest moment.
    to_top: HashMap<Part, i64>,
    /// Changes after the highest moment.
    since_top: HashMap<Part, i64>,
}

/// A chart being tallied: see the module documentation. `Late` is the
/// state of the values known only after the pass (`()` where there are none).
pub(super) struct ChartTally<Late> {
    axis: TimeAxis,
    /// The sum of every part now.
    measured: u64,
    /// The late values' state now.
    late: Late,
    stretches: Vec<Stretch<Late>>,
}

impl<Late: Copy + PartialEq> ChartTally<Late> {
    /// An empty tally over `axis`, its late values at `late`.
    pub(super) fn new(axis: TimeAxis, late: Late) -> ChartTally<Late> {
        ChartTally {
            axis,
            measured: 0,
            late,
            stretches: Vec::new(),
        }
    }

    /// The late values' state now.
    pub(super) fn late(&self) -> Late {
        self.late
    }

    /// Changes the late values' state from the next recorded moment on.
    pub(super) fn set_late(&mut self, late: Late) {
        self.late = late;
    }

    /// `part` grew (or shrank) by `delta` bytes at `time_ns`; the moment is
    /// recorded.
    pub(super) fn change(&mut self, part: Part, delta: i64, time_ns: u64) {
        self.measured = self.measured.wrapping_add_signed(delta);
        let measured = self.measured;
        let stretch = self.stretch_at(time_ns);
        *stretch.since_top.entry(part).or_default() += delta;
        Self::consider(stretch, measured);
    }

    /// Records the moment `time_ns` with nothing measured changed (a late
    /// value changed).
    pub(super) fn record(&mut self, time_ns: u64) {
        let measured = self.measured;
        let stretch = self.stretch_at(time_ns);
        Self::consider(stretch, measured);
    }

    fn stretch_at(&mut self, time_ns: u64) -> &mut Stretch<Late> {
        let bin = self.axis.bin_of(time_ns);
        let continues = self
            .stretches
            .last()
            .is_some_and(|s| s.bin == bin && s.late == self.late);
        if !continues {
            self.stretches.push(Stretch {
                bin,
                late: self.late,
                // The first moment recorded is the highest so far.
                top: self.measured,
                to_top: HashMap::default(),
                since_top: HashMap::default(),
            });
        }
        self.stretches.last_mut().expect("one is there now")
    }

    /// A moment of `measured` bytes: the stretch's highest if it is at
    /// least as high as the highest so far (the latest of equals wins, as
    /// in [`Chart::record`]).
    fn consider(stretch: &mut Stretch<Late>, measured: u64) {
        if measured >= stretch.top {
            stretch.top = measured;
            for (part, delta) in stretch.since_top.drain() {
                *stretch.to_top.entry(part).or_default() += delta;
            }
        }
    }

    /// The chart of series `names`: `series_of` says which series each
    /// part's bytes go to, and `late_values` what a late state adds to
    /// which series.
    pub(super) fn into_chart(
        self,
        names: Vec<String>,
        mut series_of: impl FnMut(Part) -> usize,
        late_values: impl Fn(Late) -> Vec<(usize, u64)>,
    ) -> Chart {
        let mut chart = Chart::new(names, self.axis);
        let mut running = vec![0u64; chart.names.len()];
        let mut apply = |running: &mut Vec<u64>, changes: &HashMap<Part, i64>| {
            for (&part, &delta) in changes {
                let value = &mut running[series_of(part)];
                *value = value.wrapping_add_signed(delta);
            }
        };
        let with_late = |running: &[u64], late: Late| {
            let mut state = running.to_vec();
            for (series, value) in late_values(late) {
                state[series] = state[series].saturating_add(value);
            }
            state
        };
        let mut bins: Vec<Option<Bin>> = vec![None; chart.bins.len()];
        for stretch in &self.stretches {
            apply(&mut running, &stretch.to_top);
            let top = with_late(&running, stretch.late);
            apply(&mut running, &stretch.since_top);
            let last = with_late(&running, stretch.late);
            let total = top.iter().fold(0u64, |sum, v| sum.saturating_add(*v));
            Bin::take(&mut bins[stretch.bin], total, &top, &last);
        }
        chart.bins = bins;
        chart.current = with_late(&running, self.late);
        chart
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Series 0 and 1 take stacks 1 and 2; stack 3 and category 0 go to
    /// series 2; the late state adds 100 bytes to series 3 when true.
    fn series_of(part: Part) -> usize {
        match part {
            Part::Stack(1) => 0,
            Part::Stack(2) => 1,
            _ => 2,
        }
    }

    fn late_values(late: bool) -> Vec<(usize, u64)> {
        vec![(3, if late { 100 } else { 0 })]
    }

    fn names() -> Vec<String> {
        ["a", "b", "c", "late"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_bin_keeps_its_highest_state_with_late_values_counted() {
        // Span 599 ns: one bin a nanosecond.
        let mut tally = ChartTally::new(TimeAxis::even(0, 599), false);
        tally.change(Part::Stack(1), 50, 0);
        tally.change(Part::Stack(2), 30, 0);
        tally.change(Part::Stack(1), -50, 0);
        // Bin 1: 120 bytes before the late value, 70 + 100 after it: the
        // later moment is higher once the late value is known.
        tally.change(Part::Stack(3), 90, 1);
        tally.set_late(true);
        tally.change(Part::Stack(3), -50, 1);
        let chart = tally.into_chart(names(), series_of, late_values);
        let columns = chart.columns();
        assert_eq!(columns[0], vec![50, 30, 0, 0]);
        assert_eq!(columns[1], vec![0, 30, 40, 100]);
        assert_eq!(columns[2], vec![0, 30, 40, 100]);
        assert_eq!(chart.current, vec![0, 30, 40, 100]);
    }

    /// The tally gives exactly the chart that recording every moment into
    /// known series gives, on a long pseudo-random run, with even bins and
    /// with bins finer over steps.
    #[test]
    fn the_tally_equals_recording_each_moment() {
        let (t0, span) = (1_000, 50_000);
        tally_equals_recording(TimeAxis::even(t0, span));
        tally_equals_recording(TimeAxis::over_steps(t0, span, t0 + 20_000, t0 + 23_000, 10));
    }

    fn tally_equals_recording(axis: TimeAxis) {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        let mut tally = ChartTally::new(axis.clone(), false);
        let mut chart = Chart::new(names(), axis.clone());
        let mut live: Vec<(Part, u64)> = Vec::new();
        let mut late = false;
        let mut time = axis.t0;
        for _ in 0..20_000 {
            time += next(6);
            match next(10) {
                0 => {
                    late = !late;
                    tally.set_late(late);
                    chart.current[3] = if late { 100 } else { 0 };
                    tally.record(time);
                    chart.record(time);
                }
                1..=3 if !live.is_empty() => {
                    let (part, size) = live.swap_remove(next(live.len() as u64) as usize);
                    tally.change(part, -(size as i64), time);
                    chart.current[series_of(part)] -= size;
                    chart.record(time);
                }
                _ => {
                    let part = match next(5) {
                        4 => Part::Category(0),
                        stack => Part::Stack(stack as u32),
                    };
                    let size = 1 + next(64);
                    live.push((part, size));
                    tally.change(part, size as i64, time);
                    chart.current[series_of(part)] += size;
                    chart.record(time);
                }
            }
        }
        let tallied = tally.into_chart(names(), series_of, late_values);
        assert_eq!(tallied.columns(), chart.columns());
        assert_eq!(tallied.current, chart.current);
    }
}
