//! A chart being filled as the trace replays: live bytes per series,
//! sampled into time bins.

/// Call sites drawn as series of their own; the rest are one "other" series.
pub(super) const SERIES: usize = 8;
/// Time bins per chart.
pub(super) const BINS: usize = 600;

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

/// The bin of a chart over `span` ns from `t0` that `time_ns` falls in
/// (times outside the span in the end bins).
pub(super) fn bin_of(t0: u64, span: u64, time_ns: u64) -> usize {
    let offset = time_ns.saturating_sub(t0).min(span);
    if span == 0 {
        0
    } else {
        (offset as u128 * (BINS as u128 - 1) / span as u128) as usize
    }
}

/// A chart being filled: live bytes per series, sampled into time bins.
pub(super) struct Chart {
    pub(super) names: Vec<String>,
    pub(super) current: Vec<u64>,
    pub(super) bins: Vec<Option<Bin>>,
    pub(super) t0: u64,
    pub(super) span: u64,
    /// The series whose height picks a bin's state (its highest), where
    /// that is not the total: the one whose peak is marked.
    pub(super) ranked_by: Option<usize>,
}

impl Chart {
    /// An empty chart of the named series over `span` ns from `t0`, each
    /// bin's state taken at its highest total.
    pub(super) fn new(names: Vec<String>, t0: u64, span: u64) -> Chart {
        Chart {
            current: vec![0; names.len()],
            names,
            bins: vec![None; BINS],
            t0,
            span,
            ranked_by: None,
        }
    }

    /// The bin `time_ns` falls in (times outside the span in the end bins).
    pub(super) fn bin_of(&self, time_ns: u64) -> usize {
        bin_of(self.t0, self.span, time_ns)
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
        let mut out = Vec::with_capacity(BINS);
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
