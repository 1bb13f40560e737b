//! The memory limit's verdict (`cudatrace run --limit SIZE`): per process
//! and device it ran under the limit, whether the job fit, and if not,
//! which allocations the limit refused.

use super::device_stats::Oom;
use super::footprint::{Breakdown, Category};
use super::keys::DeviceKey;
use super::summary::Summary;

/// One process's verdict on one device.
#[derive(Debug)]
pub struct LimitVerdict<'a> {
    /// Index of the process in the trace.
    pub process: usize,
    /// The device.
    pub device: DeviceKey,
    /// The limit in bytes.
    pub limit: u64,
    /// The allocations the limit refused, in time order.
    pub refused: Vec<&'a Oom>,
    /// The card's own out-of-memory errors, in time order: with a limit
    /// larger than the card, the card refuses first.
    pub card_ooms: Vec<&'a Oom>,
    /// The card's real total bytes, where the process described it.
    pub card_total: Option<u64>,
    /// The process's peak on the device: the driver's figure where it was
    /// measured, else its allocations' peak.
    pub peak_bytes: u64,
    /// When the peak was (`CLOCK_MONOTONIC` ns).
    pub peak_time_ns: u64,
    /// What made up the peak, largest first: owners of allocations, the
    /// context, modules and kernels, pools and graph memory beyond their
    /// allocations, and what no measurement covers (empty where the
    /// driver's figure was not measured).
    pub peak_parts: Vec<(String, u64)>,
    /// The out-of-memory errors were PyTorch's caching allocator's to
    /// recover from: its tensors were recorded on the device and it raised
    /// no out-of-memory error (it frees its cache and asks again before it
    /// raises).
    pub recovered_by_pytorch: bool,
}

impl LimitVerdict<'_> {
    /// Whether the job fit: no out-of-memory error, the limit's or the
    /// card's, or only those PyTorch's cache recovered from, as it would on
    /// a card of the limit's size.
    pub fn fits(&self) -> bool {
        (self.refused.is_empty() && self.card_ooms.is_empty()) || self.recovered_by_pytorch
    }

    /// Whether the limit is larger than the card: the card then holds the
    /// job to its own size first.
    pub fn limit_above_card(&self) -> bool {
        self.card_total.is_some_and(|total| self.limit > total)
    }
}

/// The verdict of every process and device that ran under a limit, in
/// trace order. A device where the limit refused an allocation counts as
/// run under it even without its limit record (a forked child's: the limit
/// is then the one the refusal carries).
pub fn limit_verdicts(summary: &Summary) -> Vec<LimitVerdict<'_>> {
    let mut verdicts = Vec::new();
    for (process, (figures, footprints)) in summary.processes.iter().zip(&summary.footprints).enumerate() {
        let mut limits = figures.memory_limits.clone();
        for (&device, stats) in &figures.devices {
            if let Some(refusal) = stats.ooms.iter().find(|o| o.by_limit) {
                limits.entry(device).or_insert(refusal.device_total);
            }
        }
        for (&device, &limit) in &limits {
            let stats = figures.devices.get(&device);
            let ooms = |by_limit: bool| -> Vec<&Oom> {
                let mut ooms: Vec<&Oom> = stats
                    .map(|s| s.ooms.iter().filter(|o| o.by_limit == by_limit).collect())
                    .unwrap_or_default();
                ooms.sort_by_key(|o| o.time_ns);
                ooms
            };
            let (refused, card_ooms) = (ooms(true), ooms(false));
            let footprint = match device {
                DeviceKey::Gpu(ordinal) => footprints.iter().find(|f| f.device == ordinal),
                DeviceKey::Unknown => None,
            };
            let at_peak = footprint.and_then(|f| f.at_peak.as_ref());
            let (peak_bytes, peak_time_ns, peak_parts) = match at_peak {
                Some(breakdown) => (
                    breakdown.reference.bytes,
                    breakdown.reference.time_ns,
                    parts_of(breakdown),
                ),
                None => stats.map_or((0, 0, Vec::new()), |s| (s.peak, s.peak_time_ns, Vec::new())),
            };
            let tensors = figures
                .tensors
                .devices
                .get(&device)
                .filter(|t| t.allocations > 0 && !figures.tensors.stopped);
            let any_oom = !refused.is_empty() || !card_ooms.is_empty();
            let recovered_by_pytorch = any_oom && tensors.is_some_and(|t| t.ooms == 0);
            verdicts.push(LimitVerdict {
                process,
                device,
                limit,
                refused,
                card_ooms,
                card_total: footprint
                    .and_then(|f| f.info.as_ref())
                    .map(|i| i.total_bytes)
                    .filter(|&t| t > 0),
                peak_bytes,
                peak_time_ns,
                peak_parts,
                recovered_by_pytorch,
            });
        }
    }
    verdicts
}

/// The named parts of a peak's split, largest first, with what no
/// measurement covers last where there is any, so that the parts add up to
/// the peak.
fn parts_of(breakdown: &Breakdown) -> Vec<(String, u64)> {
    let names = [
        (Category::Context, "context"),
        (Category::Modules, "modules and kernels"),
        (Category::Pools, "pools beyond their allocations"),
        (Category::Graphs, "graph memory"),
        (Category::StreamsAndEvents, "streams and events"),
        (Category::GraphExecutables, "executable graphs"),
    ];
    let mut parts: Vec<(String, u64)> = breakdown.owners.clone();
    for (category, name) in names {
        let bytes = breakdown.category(category).max(0) as u64;
        if bytes > 0 {
            parts.push((name.to_string(), bytes));
        }
    }
    parts.retain(|(_, bytes)| *bytes > 0);
    parts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let unexplained = breakdown.unexplained();
    if unexplained > 0 {
        parts.push(("not measured".to_string(), unexplained as u64));
    }
    parts
}
