//! A chart being filled as the trace replays: live bytes per series,
//! sampled into time bins.

/// Call sites drawn as series of their own; the rest are one "other" series.
pub(super) const SERIES: usize = 8;
/// Time bins per chart over a process's whole run.
pub(super) const BINS: usize = 600;
/// Bins a step of the steps' mean length gets, at least, over the steps a
/// chart opens on: a step that is a sliver of a long run (a demo's steps
/// after seconds of start-up) is drawn with a shape, not as one bin. The
/// fine bins are even over the steps (only the first step's start and the
/// last one's end are known before the replay), so a step much shorter
/// than the mean gets fewer.
pub(super) const BINS_A_STEP: u64 = 8;
/// Steps a chart opens on, at most: past that, the first so many, so that
/// a long run's page stays small (each bin is a figure per series).
pub(super) const STEPS_IN_VIEW: u64 = 600;

/// A chart's time axis: `span` ns from `t0`, cut into bins, each drawn at
/// its start, its place across the chart in proportion to its time. A
/// process without steps has [`BINS`] even bins over its run. One with
/// steps has those even bins outside its steps and finer ones over them,
/// at least [`BINS_A_STEP`] for a step of the mean length (and [`BINS`] in
/// all), and its charts open on them.
#[derive(Clone, Debug)]
pub(super) struct TimeAxis {
    pub(super) t0: u64,
    pub(super) span: u64,
    /// Each bin's start, ns after `t0`, ascending from 0 to `span`, where
    /// the bins are not even.
    starts: Option<Vec<u64>>,
    /// The span the charts open on (ns after `t0`): the steps, with half
    /// a step's mean length each side; and how many steps it holds.
    pub(super) steps_view: Option<((u64, u64), u64)>,
}

impl TimeAxis {
    /// [`BINS`] even bins over `span` ns from `t0`.
    pub(super) fn even(t0: u64, span: u64) -> TimeAxis {
        TimeAxis {
            t0,
            span,
            starts: None,
            steps_view: None,
        }
    }

    /// Even bins over `span` ns from `t0`, but finer over `steps` steps
    /// from `first_ns` to `end_ns` (the first one's start and the last
    /// one's end), which the charts open on: past [`STEPS_IN_VIEW`], the
    /// first so many, as far as steps of even length would reach.
    pub(super) fn over_steps(t0: u64, span: u64, first_ns: u64, end_ns: u64, steps: u64) -> TimeAxis {
        let first = first_ns.saturating_sub(t0).min(span);
        let end = end_ns.saturating_sub(t0).clamp(first, span);
        let in_view = steps.min(STEPS_IN_VIEW);
        if in_view == 0 || end == first {
            return TimeAxis::even(t0, span);
        }
        let end = first + ((end - first) as u128 * in_view as u128 / steps as u128) as u64;
        let margin = (end - first) / in_view / 2;
        let (from, to) = (first.saturating_sub(margin), end.saturating_add(margin).min(span));
        let fine = (BINS_A_STEP * in_view).max(BINS as u64);
        let even = (0..BINS as u64).map(|bin| (span as u128 * bin as u128 / (BINS as u128 - 1)) as u64);
        let over_steps = (0..fine).map(|bin| from + ((to - from) as u128 * bin as u128 / fine as u128) as u64);
        let mut starts: Vec<u64> = even
            .clone()
            .filter(|&start| start < from)
            .chain(over_steps)
            .chain(even.filter(|&start| start >= to))
            .collect();
        // Bins finer than a nanosecond would start together: one is kept.
        starts.dedup();
        if starts.last() != Some(&span) {
            starts.push(span);
        }
        TimeAxis {
            t0,
            span,
            starts: Some(starts),
            steps_view: Some(((from, to), in_view)),
        }
    }

    /// How many bins.
    pub(super) fn bins(&self) -> usize {
        self.starts.as_ref().map_or(BINS, Vec::len)
    }

    /// The bin `time_ns` falls in (times outside the span in the end bins).
    pub(super) fn bin_of(&self, time_ns: u64) -> usize {
        let offset = time_ns.saturating_sub(self.t0).min(self.span);
        match &self.starts {
            Some(starts) => starts.partition_point(|&start| start <= offset).saturating_sub(1),
            None if self.span == 0 => 0,
            None => (offset as u128 * (BINS as u128 - 1) / self.span as u128) as usize,
        }
    }

    /// Where `bin` starts, ns after `t0`.
    pub(super) fn offset_of(&self, bin: usize) -> u64 {
        match &self.starts {
            Some(starts) => starts[bin],
            None => (self.span as u128 * bin as u128 / (BINS as u128 - 1)) as u64,
        }
    }

    /// Where `bin` starts, in seconds after `t0`.
    pub(super) fn seconds_of(&self, bin: usize) -> f64 {
        match &self.starts {
            Some(starts) => starts[bin] as f64 / 1e9,
            None => self.span as f64 / 1e9 * bin as f64 / (BINS - 1) as f64,
        }
    }

    /// Where `bin` starts across the chart, from 0 (the start) to 1 (the end).
    pub(super) fn place_of(&self, bin: usize) -> f64 {
        match &self.starts {
            Some(starts) if self.span > 0 => starts[bin] as f64 / self.span as f64,
            Some(_) => 0.0,
            None => bin as f64 / (BINS - 1) as f64,
        }
    }

    /// Where `offset` ns after `t0` is across the chart, from 0 to 1.
    pub(super) fn place_at(&self, offset: u64) -> f64 {
        if self.span == 0 {
            0.0
        } else {
            offset.min(self.span) as f64 / self.span as f64
        }
    }
}

/// One bin: the state at its highest point, and its last state.
#[derive(Clone)]
pub(super) struct Bin {
    top_total: u64,
    top: Vec<u64>,
    last: Vec<u64>,
}

impl Bin {
    /// Takes into the bin `slot` a moment whose state was `top`, of
    /// `total` bytes, and the state `last` after it: `top` is the bin's
    /// highest if as high as any before (the latest of equals wins).
    pub(super) fn take(slot: &mut Option<Bin>, total: u64, top: &[u64], last: &[u64]) {
        match slot {
            Some(bin) => {
                if total >= bin.top_total {
                    bin.top_total = total;
                    bin.top.clone_from_slice(top);
                }
                bin.last.clone_from_slice(last);
            }
            None => {
                *slot = Some(Bin {
                    top_total: total,
                    top: top.to_vec(),
                    last: last.to_vec(),
                })
            }
        }
    }
}

/// A chart being filled: live bytes per series, sampled into time bins.
pub(super) struct Chart {
    pub(super) names: Vec<String>,
    pub(super) current: Vec<u64>,
    pub(super) bins: Vec<Option<Bin>>,
    pub(super) axis: TimeAxis,
    /// The series whose height picks a bin's state (its highest), where
    /// that is not the total: the one whose peak is marked.
    pub(super) ranked_by: Option<usize>,
}

impl Chart {
    /// An empty chart of the named series over `axis`, each bin's state
    /// taken at its highest total.
    pub(super) fn new(names: Vec<String>, axis: TimeAxis) -> Chart {
        Chart {
            current: vec![0; names.len()],
            names,
            bins: vec![None; axis.bins()],
            axis,
            ranked_by: None,
        }
    }

    /// The bin `time_ns` falls in (times outside the span in the end bins).
    pub(super) fn bin_of(&self, time_ns: u64) -> usize {
        self.axis.bin_of(time_ns)
    }

    /// Records the state now, [`Chart::current`], at `time_ns`.
    pub(super) fn record(&mut self, time_ns: u64) {
        let bin = self.bin_of(time_ns);
        let total: u64 = match self.ranked_by {
            Some(series) => self.current[series],
            None => self.current.iter().fold(0u64, |sum, v| sum.saturating_add(*v)),
        };
        Bin::take(&mut self.bins[bin], total, &self.current, &self.current);
    }

    /// Values per series per bin, carrying the last state over empty bins.
    pub(super) fn columns(&self) -> Vec<Vec<u64>> {
        let mut carried = vec![0; self.current.len()];
        let mut out = Vec::with_capacity(self.bins.len());
        for bin in &self.bins {
            match bin {
                Some(b) => {
                    out.push(b.top.clone());
                    carried.clone_from(&b.last);
                }
                None => out.push(carried.clone()),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_a_sliver_of_the_run_get_bins_of_their_own() {
        // A run of 300 ms whose 5 steps take 250 us from 271.2 ms: even
        // bins put them all in one.
        let (t0, span) = (1_000, 300_000_000);
        let (first, end) = (t0 + 271_200_000, t0 + 271_450_000);
        assert_eq!(
            TimeAxis::even(t0, span).bin_of(first),
            TimeAxis::even(t0, span).bin_of(end)
        );
        let axis = TimeAxis::over_steps(t0, span, first, end, 5);
        let ((from, to), steps) = axis.steps_view.unwrap();
        // Half a mean step (25 us) each side.
        assert_eq!((from, to, steps), (271_175_000, 271_475_000, 5));
        let inside = (0..axis.bins())
            .filter(|&bin| (from..to).contains(&axis.offset_of(bin)))
            .count();
        assert_eq!(inside, BINS);
        // Ascending, from the run's start to its end; a time falls in the
        // bin that starts at or before it.
        assert!((1..axis.bins()).all(|bin| axis.offset_of(bin - 1) < axis.offset_of(bin)));
        assert_eq!((axis.offset_of(0), axis.offset_of(axis.bins() - 1)), (0, span));
        for time in [t0, first, first + 7, end, t0 + span, t0 + span + 5] {
            let bin = axis.bin_of(time);
            let offset = (time - t0).min(span);
            assert!(axis.offset_of(bin) <= offset, "{time}");
            assert!(bin + 1 == axis.bins() || offset < axis.offset_of(bin + 1), "{time}");
        }
    }

    #[test]
    fn many_steps_get_eight_bins_each_and_a_long_run_its_first_steps() {
        let axis = TimeAxis::over_steps(0, 1_000_000, 0, 1_000_000, 358);
        assert_eq!(axis.steps_view, Some(((0, 1_000_000), 358)));
        assert_eq!(axis.bins(), 8 * 358 + 1);
        // 6,000 even steps: the first 600, over a tenth of the run.
        let axis = TimeAxis::over_steps(0, 6_000_000, 0, 6_000_000, 6000);
        assert_eq!(axis.steps_view, Some(((0, 600_500), 600)));
        assert_eq!(axis.bins(), 8 * 600 + 540);
    }
}
