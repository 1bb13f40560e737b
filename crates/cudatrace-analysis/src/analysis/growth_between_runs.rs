//! What grew between two runs: each run's bytes at the peak and at exit,
//! by call site and by owner, matched between the runs by name. A call
//! site is named by its headline frame, symbolized (file, line and
//! function, or module and symbol), never by an address, since addresses
//! differ from run to run.

use super::call_site::{call_sites, site_name};
use super::footprint::{Breakdown, Category};
use super::growth_within_run::{site_series, FEWEST_RISES};
use super::keys::ByStack;
use super::trace_index::TraceIndex;
use super::trace_summary::Summary;
use std::collections::BTreeMap;

/// One run's bytes under one name: at the peak and at exit, and how they
/// changed a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtPeakAndExit {
    /// At the peak (of each process and device, summed).
    pub peak: u64,
    /// Live at exit.
    pub exit: u64,
    /// Bytes gained a step, from the first complete step's end to the
    /// last (summed over processes and devices); `None` where the run has
    /// no steps or the site held nothing at any step's end.
    pub per_step: Option<i64>,
}

/// A run's figures, by name, for each kind of grouping.
#[derive(Debug, Default)]
pub struct RunFigures {
    /// Device memory by call site (long name → figures), and the short name shown.
    pub call_sites: BTreeMap<String, (String, AtPeakAndExit)>,
    /// PyTorch's tensors by call site, where they were recorded.
    pub tensor_call_sites: BTreeMap<String, (String, AtPeakAndExit)>,
    /// The driver-used footprint by owner and category.
    pub owners: BTreeMap<String, (String, AtPeakAndExit)>,
    /// Device memory in all, at the peak and live at exit.
    pub total: AtPeakAndExit,
}

fn add(into: &mut BTreeMap<String, (String, AtPeakAndExit)>, key: String, name: String, peak: u64, exit: u64) {
    let entry = into.entry(key).or_insert_with(|| (name, AtPeakAndExit::default()));
    entry.1.peak += peak;
    entry.1.exit += exit;
}

/// The owners of `breakdown`, then its categories under the names
/// `category_name` gives them.
fn breakdown_rows(breakdown: &Breakdown, category_name: &dyn Fn(Category) -> String) -> Vec<(String, u64)> {
    let mut rows: Vec<(String, u64)> = breakdown.owners.clone();
    rows.extend(
        Category::ALL
            .into_iter()
            .map(|category| (category_name(category), breakdown.category(category).max(0) as u64)),
    );
    rows
}

impl RunFigures {
    /// The figures of a trace, replayed into `summary`; the footprint's
    /// categories are matched under the names `category_name` gives them.
    pub fn of(index: &TraceIndex, summary: &Summary, category_name: &dyn Fn(Category) -> String) -> RunFigures {
        let mut figures = RunFigures::default();
        for (info, process) in index.processes.iter().zip(&summary.processes) {
            let sites = |into: &mut BTreeMap<String, (String, AtPeakAndExit)>, peak: &ByStack, exit: &ByStack| {
                for (by_stack, at_peak) in [(peak, true), (exit, false)] {
                    for site in call_sites(index, info, by_stack) {
                        let name = site_name(&index.frames(info, site.stack));
                        let (peak, exit) = if at_peak { (site.bytes, 0) } else { (0, site.bytes) };
                        add(into, site.key, name, peak, exit);
                    }
                }
            };
            for stats in process.devices.values() {
                sites(&mut figures.call_sites, &stats.peak_by_stack, &stats.live_by_stack);
                figures.total.peak += stats.peak;
                figures.total.exit += stats.current;
            }
            for stats in process.tensors.devices.values() {
                sites(
                    &mut figures.tensor_call_sites,
                    &stats.peak_by_stack,
                    &stats.live_by_stack,
                );
            }
            // Where the process's growth could be judged (as the report's
            // heading says), every site of the measured kind gets its change
            // a step, 0 where it held nothing at the step ends.
            let measured = process.steps.as_ref().filter(|s| s.series_ends().len() > FEWEST_RISES);
            if let Some(steps) = measured {
                let ends = steps.series_ends();
                let (into, held): (_, Vec<&ByStack>) = if steps.marker.tensors {
                    let held = process.tensors.devices.values();
                    (
                        &mut figures.tensor_call_sites,
                        held.flat_map(|t| [&t.peak_by_stack, &t.live_by_stack]).collect(),
                    )
                } else {
                    let held = process.devices.values();
                    (
                        &mut figures.call_sites,
                        held.flat_map(|d| [&d.peak_by_stack, &d.live_by_stack]).collect(),
                    )
                };
                for by_stack in held {
                    for site in call_sites(index, info, by_stack) {
                        if let Some(entry) = into.get_mut(&site.key) {
                            entry.1.per_step.get_or_insert(0);
                        }
                    }
                }
                for site in site_series(index, info, steps) {
                    let name = site_name(&index.frames(info, site.stack));
                    let entry = into
                        .entry(site.key.clone())
                        .or_insert_with(|| (name, AtPeakAndExit::default()));
                    entry.1.per_step = Some(entry.1.per_step.unwrap_or(0) + site.rate(ends));
                }
            }
        }
        for footprint in summary.footprints.iter().flatten() {
            for (breakdown, at_peak) in [(&footprint.at_peak, true), (&footprint.at_exit, false)] {
                let Some(breakdown) = breakdown else { continue };
                for (name, bytes) in breakdown_rows(breakdown, category_name) {
                    let (peak, exit) = if at_peak { (bytes, 0) } else { (0, bytes) };
                    add(&mut figures.owners, name.clone(), name, peak, exit);
                }
            }
        }
        figures
    }
}

/// One name's figures in both runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Growth {
    /// The name shown: the short headline, or the long one where two
    /// short ones coincide.
    pub name: String,
    /// The first run's figures.
    pub a: AtPeakAndExit,
    /// The second run's.
    pub b: AtPeakAndExit,
}

impl Growth {
    /// How much the peak grew (negative: shrank).
    pub fn peak_growth(&self) -> i64 {
        self.b.peak as i64 - self.a.peak as i64
    }

    /// How much what is live at exit grew.
    pub fn exit_growth(&self) -> i64 {
        self.b.exit as i64 - self.a.exit as i64
    }
}

/// The names of either run matched, largest growth first (the larger of
/// the peak's and the exit's), then largest shrinking last; names that
/// are the same in both runs are left out unless `all`.
pub fn compare(
    a: &BTreeMap<String, (String, AtPeakAndExit)>,
    b: &BTreeMap<String, (String, AtPeakAndExit)>,
    all: bool,
) -> Vec<Growth> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let short_name = |key: &String| a.get(key).or_else(|| b.get(key)).map_or("", |(name, _)| name.as_str());
    // Keys per short name: a short name two sites share is not shown.
    let mut sharing: BTreeMap<&str, usize> = BTreeMap::new();
    for key in &keys {
        *sharing.entry(short_name(key)).or_default() += 1;
    }
    let mut rows: Vec<Growth> = keys
        .iter()
        .map(|&key| {
            let name = short_name(key);
            Growth {
                name: if sharing[name] > 1 {
                    key.clone()
                } else {
                    name.to_string()
                },
                a: a.get(key).map(|(_, f)| *f).unwrap_or_default(),
                b: b.get(key).map(|(_, f)| *f).unwrap_or_default(),
            }
        })
        .filter(|row| all || row.a != row.b)
        .collect();
    rows.sort_by(|x, y| {
        let key = |row: &Growth| std::cmp::Reverse(row.peak_growth().max(row.exit_growth()));
        let shrink = |row: &Growth| row.peak_growth().min(row.exit_growth());
        key(x)
            .cmp(&key(y))
            .then_with(|| shrink(y).cmp(&shrink(x)))
            .then_with(|| x.name.cmp(&y.name))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(rows: &[(&str, &str, u64, u64)]) -> BTreeMap<String, (String, AtPeakAndExit)> {
        rows.iter()
            .map(|&(key, name, peak, exit)| {
                (
                    key.to_string(),
                    (
                        name.to_string(),
                        AtPeakAndExit {
                            peak,
                            exit,
                            per_step: None,
                        },
                    ),
                )
            })
            .collect()
    }

    #[test]
    fn names_are_matched_sorted_by_growth_and_made_unique() {
        let a = figures(&[
            ("/a/train.py:10 step", "train.py:10 step", 100, 50),
            ("/a/data.py:3 load", "data.py:3 load", 30, 0),
            ("/a/same.py:1 f", "same.py:1 f", 7, 7),
            ("/x/util.py:2 g", "util.py:2 g", 5, 0),
        ]);
        let b = figures(&[
            ("/a/train.py:10 step", "train.py:10 step", 100, 90),
            ("/a/model.py:8 fwd", "model.py:8 fwd", 60, 0),
            ("/a/same.py:1 f", "same.py:1 f", 7, 7),
            ("/y/util.py:2 g", "util.py:2 g", 5, 0),
        ]);
        let rows = compare(&a, &b, false);
        let seen: Vec<(&str, i64, i64)> = rows
            .iter()
            .map(|r| (r.name.as_str(), r.peak_growth(), r.exit_growth()))
            .collect();
        assert_eq!(
            seen,
            [
                ("model.py:8 fwd", 60, 0),
                ("train.py:10 step", 0, 40),
                ("/y/util.py:2 g", 5, 0),
                ("/x/util.py:2 g", -5, 0),
                ("data.py:3 load", -30, 0),
            ]
        );
        assert_eq!(compare(&a, &b, true).len(), 6);
    }
}
