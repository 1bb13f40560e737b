//! Every rank in one view: one row per process and device of a trace that
//! holds several, and the rank that stands out named, with the step it
//! peaked in and the call site that makes the difference.
//!
//! The question it answers is the one a large job asks ("why does rank 5
//! run out of memory when the others don't?"): each row's peak against the
//! median row's, and where the highest row's memory differs most from it.

use super::call_site::call_sites;
use super::keys::{ByStack, DeviceKey};
use super::trace_index::TraceIndex;
use super::trace_summary::Summary;
use cudatrace_events::ProcessPlace;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// One process on one device.
#[derive(Clone, Debug, PartialEq)]
pub struct RankRow {
    /// The process's place in [`TraceIndex::processes`].
    pub process: usize,
    /// Its host and rank.
    pub place: ProcessPlace,
    /// Its pid.
    pub pid: u32,
    /// The device's ordinal in the process.
    pub device: u8,
    /// The peak: the footprint's (what the driver held for the process,
    /// every byte) where the device was read, else its allocations'.
    pub peak_bytes: u64,
    /// When (`CLOCK_MONOTONIC` ns).
    pub peak_time_ns: u64,
    /// Whether `peak_bytes` is the footprint's (else the allocations').
    pub peak_is_footprint: bool,
    /// PyTorch's allocated peak, where its tensors were recorded.
    pub allocated_peak: Option<u64>,
    /// PyTorch's reserved peak, likewise.
    pub reserved_peak: Option<u64>,
    /// Allocations live at exit, in bytes.
    pub live_at_exit: u64,
    /// Out-of-memory failures.
    pub ooms: u64,
    /// The share of the footprint's peak that is explained, where measured.
    pub explained_percent: Option<f64>,
}

/// The row that peaks highest, against the median row.
#[derive(Clone, Debug, PartialEq)]
pub struct Outlier {
    /// Its place in [`RankTable::rows`].
    pub row: usize,
    /// The median row's place (the lower median).
    pub median_row: usize,
    /// Bytes its peak is above the median row's.
    pub above_median: u64,
    /// That difference as a share of the median row's peak, in percent.
    pub percent: f64,
    /// The steps its peak fell in, where the process had steps.
    pub step: Option<(u64, u64)>,
    /// The call site whose bytes at the peak differ most from the median
    /// row's (its short name), and by how much.
    pub site: Option<(String, u64)>,
}

/// One row per process and device, and the outlier.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankTable {
    /// By host, rank (processes without one last), pid and device.
    pub rows: Vec<RankRow>,
    /// The highest row, when it peaks [`OUTLIER_PERCENT`] and
    /// [`OUTLIER_BYTES`] above the median row.
    pub outlier: Option<Outlier>,
}

/// A row stands out when it peaks at least this many percent above the median row...
pub const OUTLIER_PERCENT: f64 = 5.0;
/// ...and at least this many bytes.
pub const OUTLIER_BYTES: u64 = 1 << 20;

impl RankTable {
    /// The table of a trace, when it holds more than one process or device
    /// that used a GPU; else `None`. The images of one process (before and
    /// after an `exec`) are one row: a process is not compared with itself.
    pub fn of(index: &TraceIndex, summary: &Summary) -> Option<RankTable> {
        let first_images = first_images(index);
        let mut rows: Vec<RankRow> = Vec::new();
        // Per process (its first image) and device, its row in `rows`.
        let mut row_of: HashMap<(usize, u8), usize> = HashMap::new();
        for (process, (info, figures)) in index.processes.iter().zip(&summary.processes).enumerate() {
            for (&key, stats) in &figures.devices {
                let DeviceKey::Gpu(device) = key else { continue };
                let footprint = summary.footprints[process].iter().find(|f| f.device == device);
                let at_peak = footprint.and_then(|f| f.at_peak.as_ref());
                let tensors = figures.tensors.devices.get(&key);
                let (peak_bytes, peak_time_ns) = match at_peak {
                    Some(breakdown) => (breakdown.reference.bytes, breakdown.reference.time_ns),
                    None => (stats.peak, stats.peak_time_ns),
                };
                let row = RankRow {
                    process,
                    place: info.start.place.clone(),
                    pid: info.start.pid,
                    device,
                    peak_bytes,
                    peak_time_ns,
                    peak_is_footprint: at_peak.is_some(),
                    allocated_peak: tensors.map(|t| t.allocated_peak.allocated),
                    reserved_peak: tensors.map(|t| t.reserved_peak),
                    live_at_exit: stats.current,
                    ooms: stats.oom_sites.total(),
                    explained_percent: at_peak.map(|b| b.explained_percent()),
                };
                match row_of.entry((first_images[process], device)) {
                    Entry::Occupied(earlier) => rows[*earlier.get()].continue_with(row),
                    Entry::Vacant(place) => {
                        place.insert(rows.len());
                        rows.push(row);
                    }
                }
            }
        }
        if rows.len() < 2 {
            return None;
        }
        // By host, then rank (processes without one last), pid and device:
        // the order a reader looks for a rank in.
        rows.sort_by(|a, b| {
            (&a.place.host, a.place.rank.is_none(), a.place.rank, a.pid, a.device).cmp(&(
                &b.place.host,
                b.place.rank.is_none(),
                b.place.rank,
                b.pid,
                b.device,
            ))
        });
        let outlier = outlier(index, summary, &rows);
        Some(RankTable { rows, outlier })
    }
}

/// Each image's process, by its first image's place in
/// [`TraceIndex::processes`]: an image after an `exec` continues the latest
/// earlier image of its pid on its host; an image 0 is a process of its
/// own (a pid used again).
fn first_images(index: &TraceIndex) -> Vec<usize> {
    // Per host and pid: the process's first image, and its latest image number.
    let mut latest: HashMap<(&str, u32), (usize, u32)> = HashMap::new();
    index
        .processes
        .iter()
        .enumerate()
        .map(|(process, info)| {
            let start = &info.start;
            let key = (start.place.host.as_str(), start.pid);
            let first = match latest.get(&key) {
                Some(&(first, image)) if start.image > image => first,
                _ => process,
            };
            latest.insert(key, (first, start.image));
            first
        })
        .collect()
}

impl RankRow {
    /// The row of a process, now with its later image's row on the same
    /// device: the peak is the higher image's, with its moment and the
    /// figures taken there; PyTorch's peaks are the higher of the two;
    /// live at exit is the later image's (the process ended with it); the
    /// out-of-memory failures are added up.
    fn continue_with(&mut self, later: RankRow) {
        let allocated_peak = self.allocated_peak.max(later.allocated_peak);
        let reserved_peak = self.reserved_peak.max(later.reserved_peak);
        let ooms = self.ooms + later.ooms;
        // A rank set by the program itself is recorded at its exit: the
        // later image's place, unless only the earlier one has a rank.
        let place = if later.place.rank.is_some() || self.place.rank.is_none() {
            later.place.clone()
        } else {
            self.place.clone()
        };
        if later.peak_bytes > self.peak_bytes {
            self.process = later.process;
            self.peak_bytes = later.peak_bytes;
            self.peak_time_ns = later.peak_time_ns;
            self.peak_is_footprint = later.peak_is_footprint;
            self.explained_percent = later.explained_percent;
        }
        self.live_at_exit = later.live_at_exit;
        self.allocated_peak = allocated_peak;
        self.reserved_peak = reserved_peak;
        self.ooms = ooms;
        self.place = place;
    }
}

/// The highest row against the median row, when it stands out. Where some
/// rows have a rank, only those are compared: a launcher or a helper
/// process that touched a GPU is not a rank, and its small peak would pull
/// the median down.
fn outlier(index: &TraceIndex, summary: &Summary, rows: &[RankRow]) -> Option<Outlier> {
    let ranked = rows.iter().any(|r| r.place.rank.is_some());
    let mut order: Vec<usize> = (0..rows.len())
        .filter(|&i| !ranked || rows[i].place.rank.is_some())
        .collect();
    order.sort_by_key(|&i| (rows[i].peak_bytes, i));
    let median_row = order[(order.len() - 1) / 2];
    let row = *order.last()?;
    let (high, median) = (&rows[row], &rows[median_row]);
    let above_median = high.peak_bytes.saturating_sub(median.peak_bytes);
    let percent = if median.peak_bytes == 0 {
        100.0
    } else {
        above_median as f64 * 100.0 / median.peak_bytes as f64
    };
    if row == median_row || above_median < OUTLIER_BYTES || percent < OUTLIER_PERCENT {
        return None;
    }
    let step = summary.processes[high.process].steps.as_ref().and_then(|steps| {
        steps
            .records
            .iter()
            .find(|r| r.start_ns <= high.peak_time_ns && high.peak_time_ns <= r.end_ns)
            .map(|r| (r.first, r.last))
    });
    Some(Outlier {
        row,
        median_row,
        above_median,
        percent,
        step,
        site: largest_difference(index, summary, high, median),
    })
}

/// What each row held at its peak, by call stack: PyTorch's tensors at
/// their allocated peak where both rows recorded them (the program's own
/// lines), else the driver's allocations at their peak.
fn held_at_peak<'a>(summary: &'a Summary, row: &RankRow, tensors: bool) -> &'a ByStack {
    let figures = &summary.processes[row.process];
    let key = DeviceKey::Gpu(row.device);
    match (tensors, figures.tensors.devices.get(&key)) {
        (true, Some(stats)) => &stats.peak_by_stack,
        _ => &figures.devices[&key].peak_by_stack,
    }
}

/// The call site (matched by its headline frame, as `cudatrace diff`
/// matches them) whose bytes at the peak are most above the median row's.
fn largest_difference(
    index: &TraceIndex,
    summary: &Summary,
    high: &RankRow,
    median: &RankRow,
) -> Option<(String, u64)> {
    let has_tensors = |row: &RankRow| {
        summary.processes[row.process]
            .tensors
            .devices
            .contains_key(&DeviceKey::Gpu(row.device))
    };
    let tensors = has_tensors(high) && has_tensors(median);
    let sites = |row: &RankRow| {
        call_sites(
            index,
            &index.processes[row.process],
            held_at_peak(summary, row, tensors),
        )
    };
    let baseline: HashMap<String, u64> = sites(median).into_iter().map(|s| (s.key, s.bytes)).collect();
    sites(high)
        .into_iter()
        .map(|site| {
            let more = site.bytes.saturating_sub(baseline.get(&site.key).copied().unwrap_or(0));
            (site.name, more)
        })
        .filter(|&(_, more)| more > 0)
        .max_by_key(|&(_, more)| more)
}
