//! Leaks found by their growth: the call sites whose live bytes keep rising
//! from one step's end to the next, or, in a process without steps, from
//! one low point of its memory curve to the next ([`LowPoints`]).
//!
//! The points are the states between two steps ([`Steps`]) or the curve's
//! lows before the last allocation, never the state at exit: what Python's
//! shutdown, an `empty_cache()` or a final cleanup frees does not hide a
//! leak. A call site keeps growing when, over its points, its live bytes
//! rose at least [`FEWEST_RISES`] times, still rose in the last quarter of
//! the run, and kept at least four fifths of all they gained (what they
//! gave back in falls is at most a fifth). So gradients that appear once
//! and then stay (a one-time rise), a warm-up that settles, activations
//! whose size varies with the batch, or a list emptied every so many steps
//! are not growth.

use super::call_site::{site_key, site_name};
use super::keys::DeviceKey;
use super::low_points::LowPoints;
use super::step_measures::Steps;
use super::trace_index::{ProcessIndex, TraceIndex};
use super::trace_summary::ProcessSummary;
use std::collections::BTreeMap;

/// Fewest rises between step ends that make growth.
pub const FEWEST_RISES: usize = 3;

/// What the points of a growth are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measured {
    /// The ends of complete steps.
    Steps,
    /// The low points of the memory curve, one a part of `part_ns`.
    LowPoints {
        /// The length of a part.
        part_ns: u64,
    },
}

/// One call site whose live bytes keep rising.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrowingSite {
    /// What its points are; for low points, "step" below means a part.
    pub measured: Measured,
    /// Its device.
    pub device: DeviceKey,
    /// The call site's name (its headline frame).
    pub call_site: String,
    /// Its largest stack at the last step's end (shown as the example).
    pub stack: u32,
    /// Bytes it gained a step, on average from the first step end to the last.
    pub bytes_per_step: u64,
    /// Steps from the first step end measured to the last: the span the
    /// rate is over.
    pub steps: u64,
    /// The step whose end is the first point.
    pub first_step: u64,
    /// The step whose end is the last point.
    pub last_step: u64,
    /// Its live bytes at the first point.
    pub live_bytes_first_step: u64,
    /// Its live bytes at the last point.
    pub live_bytes_last_step: u64,
}

/// Whether `series` (live bytes at consecutive step ends) keeps growing.
pub fn keeps_growing(series: &[u64]) -> bool {
    let pairs = series.len().saturating_sub(1);
    if pairs < FEWEST_RISES {
        return false;
    }
    let rises = series.windows(2).filter(|w| w[1] > w[0]).count();
    let gained: u128 = series.windows(2).map(|w| u128::from(w[1].saturating_sub(w[0]))).sum();
    let last = series[pairs];
    let kept = u128::from(last.saturating_sub(series[0]));
    let last_quarter = series[pairs * 3 / 4];
    rises >= FEWEST_RISES && last > last_quarter && kept * 5 >= gained * 4
}

/// One call site's live bytes at each complete step's end, on one device.
#[derive(Clone, Debug)]
pub struct SiteSeries {
    /// Its device.
    pub device: DeviceKey,
    /// What the call site is known by ([`site_key`]).
    pub key: String,
    /// Its largest stack at the last step's end.
    pub stack: u32,
    /// Live bytes at each end, summed over the site's stacks.
    pub series: Vec<u64>,
}

impl SiteSeries {
    /// Bytes gained (or lost) a step from the first end to the last, where
    /// the ends are those of steps `ends` (their numbers).
    pub fn rate(&self, ends: &[u64]) -> i64 {
        let (Some(first), Some(last)) = (self.series.first(), self.series.last()) else {
            return 0;
        };
        let steps = ends.last().zip(ends.first()).map_or(1, |(l, f)| (l - f).max(1));
        (*last as i64 - *first as i64) / steps as i64
    }
}

/// Every call site's series of one process's steps, by device.
pub fn site_series(index: &TraceIndex, info: &ProcessIndex, steps: &Steps) -> Vec<SiteSeries> {
    sum_by_site(index, info, steps.series_ends().len(), steps.live_at_complete_ends())
}

/// Stacks' series (`ends` points each) summed by device and call site.
fn sum_by_site(
    index: &TraceIndex,
    info: &ProcessIndex,
    ends: usize,
    stacks: impl Iterator<Item = (DeviceKey, u32, Vec<u64>)>,
) -> Vec<SiteSeries> {
    // Each (device, call site): the sum of its stacks' series, and its
    // stack with the most bytes at the last end.
    let mut by_site: BTreeMap<(DeviceKey, String), (Vec<u64>, u32, u64)> = BTreeMap::new();
    for (device, stack, series) in stacks {
        let entry = by_site
            .entry((device, site_key(index, info, stack)))
            .or_insert_with(|| (vec![0; ends], stack, 0));
        for (sum, bytes) in entry.0.iter_mut().zip(&series) {
            *sum += bytes;
        }
        let last = series.last().copied().unwrap_or(0);
        if last > entry.2 || (last == entry.2 && stack < entry.1) {
            entry.1 = stack;
            entry.2 = last;
        }
    }
    by_site
        .into_iter()
        .map(|((device, key), (series, stack, _))| SiteSeries {
            device,
            key,
            stack,
            series,
        })
        .collect()
}

/// The call sites of one process that keep growing, fastest first: at its
/// steps' ends, or at its low points where it has no steps.
pub fn growing_sites(index: &TraceIndex, info: &ProcessIndex, process: &ProcessSummary) -> Vec<GrowingSite> {
    if let Some(steps) = &process.steps {
        let ends = steps.series_ends();
        let series = site_series(index, info, steps);
        growing_of(index, info, ends, series, Measured::Steps)
    } else if let Some(low_points) = &process.low_points {
        growing_at_low_points(index, info, low_points)
    } else {
        Vec::new()
    }
}

/// Units of time the span of a folded process's low points is cut into,
/// to measure its growth by time.
const TIME_UNITS: u64 = 1024;

fn growing_at_low_points(index: &TraceIndex, info: &ProcessIndex, low_points: &LowPoints) -> Vec<GrowingSite> {
    // The points are evenly spaced, one a part, unless folds kept older
    // ones: then each is placed by its time, in units of a 1,024th of the
    // span they cover.
    let (ends, part_ns): (Vec<u64>, u64) = if low_points.older_points() > 0 {
        let times = low_points.point_times();
        let first = times.first().copied().unwrap_or(0);
        let unit = (times.last().copied().unwrap_or(0).saturating_sub(first) / TIME_UNITS).max(1);
        (times.iter().map(|t| (t - first) / unit + 1).collect(), unit)
    } else {
        ((1..=low_points.points() as u64).collect(), low_points.part_ns())
    };
    let series = sum_by_site(index, info, ends.len(), low_points.live_at_points().into_iter());
    let measured = Measured::LowPoints { part_ns };
    growing_of(index, info, &ends, series, measured)
}

/// The series that keep growing, as [`GrowingSite`]s, fastest first.
fn growing_of(
    index: &TraceIndex,
    info: &ProcessIndex,
    ends: &[u64],
    series: Vec<SiteSeries>,
    measured: Measured,
) -> Vec<GrowingSite> {
    if ends.len() <= FEWEST_RISES {
        return Vec::new();
    }
    let mut sites: Vec<GrowingSite> = series
        .into_iter()
        .filter(|site| keeps_growing(&site.series))
        .map(|site| {
            let (first_step, last_step) = (ends[0], ends[ends.len() - 1]);
            GrowingSite {
                measured,
                device: site.device,
                call_site: site_name(&index.frames(info, site.stack)),
                stack: site.stack,
                bytes_per_step: site.rate(ends).max(0) as u64,
                steps: last_step - first_step,
                first_step,
                last_step,
                live_bytes_first_step: site.series[0],
                live_bytes_last_step: site.series[site.series.len() - 1],
            }
        })
        .collect();
    sites.sort_by(|a, b| {
        (a.device, std::cmp::Reverse(a.bytes_per_step), &a.call_site).cmp(&(
            b.device,
            std::cmp::Reverse(b.bytes_per_step),
            &b.call_site,
        ))
    });
    sites
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_growth_is_growth() {
        assert!(keeps_growing(&[16, 32, 48, 64, 80, 96, 112]));
        // A leak every other step, over many steps.
        assert!(keeps_growing(&[1, 1, 2, 2, 3, 3, 4, 4, 5]));
        // A leak among temporaries that vary a little.
        assert!(keeps_growing(&[10, 21, 30, 41, 50, 61, 70, 81]));
    }

    #[test]
    fn a_one_time_rise_a_settling_warm_up_or_noise_is_not_growth() {
        // Gradients appear at the first step and stay.
        assert!(!keeps_growing(&[0, 100, 100, 100, 100]));
        // A warm-up over three steps, then flat.
        assert!(!keeps_growing(&[1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]));
        // Sizes that vary with each batch.
        assert!(!keeps_growing(&[5, 7, 6, 8, 7, 9, 8, 10]));
        // Too few step ends to tell.
        assert!(!keeps_growing(&[1, 2, 3]));
        // Freed at the end.
        assert!(!keeps_growing(&[1, 2, 3, 4, 5, 0]));
        // A list of losses emptied every 5 steps.
        assert!(!keeps_growing(&[1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3]));
    }
}
