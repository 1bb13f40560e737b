//! The memory limit's verdict (`cudatrace run --limit SIZE`): per process
//! and device it ran under the limit, whether the job fit, and if not,
//! which allocations the limit refused.

use super::device_stats::Oom;
use super::footprint::{Breakdown, Category};
use super::keys::DeviceKey;
use super::owner::{owner_of, UNKNOWN_OWNER};
use super::paused_spans::PAUSED_SITE;
use super::trace_index::TraceIndex;
use super::trace_summary::Summary;

/// Whether a job fit on a card of the limit's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitOutcome {
    /// It fit.
    Fits,
    /// It did not.
    DidNotFit,
    /// The trace cannot tell: PyTorch recovered from its refusals, but how
    /// the process ended is not recorded.
    NotKnown,
}

/// How a process ended, as the trace's process end says (for a process
/// that `exec`'d, its last traced image's end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessEnding {
    /// Its exit status: the exit code, or 128 + the signal that killed it.
    Status(i32),
    /// It was still running when the trace was finished.
    StillRunning,
    /// The trace does not say: no end record, or one without a status (a
    /// process killed with no `cudatrace run` to see it).
    NotRecorded,
}

/// One process's verdict on one device.
#[derive(Debug)]
pub struct LimitVerdict<'a> {
    /// Index of the process in the trace.
    pub process: usize,
    /// The device.
    pub device: DeviceKey,
    /// The limit in bytes.
    pub limit: u64,
    /// The allocations the limit refused, in time order: those the summary
    /// kept in detail, and the latest.
    pub refused: Vec<&'a Oom>,
    /// How many the limit refused in all.
    pub refused_count: u64,
    /// The card's own out-of-memory errors, in time order (those kept, and
    /// the latest): with a limit larger than the card, the card refuses
    /// first.
    pub card_ooms: Vec<&'a Oom>,
    /// How many the card refused in all.
    pub card_oom_count: u64,
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
    /// How the process ended.
    pub ending: ProcessEnding,
    /// The library that made the last refused allocation (the limit's or
    /// the card's): the innermost module of its stack that is not CUDA,
    /// cudatrace or the interpreter (`libcublas.so.12` for `cublasCreate`);
    /// `None` without refusals or where its stack names none.
    pub failed_library: Option<String>,
    /// Why the process kept the limit to itself, not counted with the rest
    /// of the job (`cudatrace_events::measures::limit_ledger`); `None`
    /// where it shared the job's ledger.
    pub kept_alone: Option<u64>,
}

impl LimitVerdict<'_> {
    /// Whether the job fit: no out-of-memory error, the limit's or the
    /// card's, or only those PyTorch's cache recovered from, as it would on
    /// a card of the limit's size. PyTorch raising no error is not enough:
    /// another library's allocation may have been refused (cuBLAS's, when
    /// PyTorch creates its handle) and the program died of it. So after a
    /// refusal, a process that exited non-zero or was killed did not fit,
    /// and one whose end is not recorded is not known to.
    pub fn outcome(&self) -> LimitOutcome {
        if self.refused.is_empty() && self.card_ooms.is_empty() {
            return LimitOutcome::Fits;
        }
        if !self.recovered_by_pytorch {
            return LimitOutcome::DidNotFit;
        }
        match self.ending {
            ProcessEnding::Status(0) => LimitOutcome::Fits,
            ProcessEnding::Status(_) => LimitOutcome::DidNotFit,
            ProcessEnding::StillRunning | ProcessEnding::NotRecorded => LimitOutcome::NotKnown,
        }
    }

    /// The limit's and the card's refusals together, in time order.
    pub fn all_refusals(&self) -> Vec<&Oom> {
        let mut ooms: Vec<&Oom> = self.refused.iter().chain(&self.card_ooms).copied().collect();
        ooms.sort_by_key(|o| o.time_ns);
        ooms
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
pub fn limit_verdicts<'a>(index: &TraceIndex, summary: &'a Summary) -> Vec<LimitVerdict<'a>> {
    let mut verdicts = Vec::new();
    for (process, (figures, footprints)) in summary.processes.iter().zip(&summary.footprints).enumerate() {
        let mut limits = figures.memory_limits.clone();
        for (&device, stats) in &figures.devices {
            if let Some(refusal) = stats.ooms_of_cause(true).first() {
                limits.entry(device).or_insert(refusal.device_total);
            }
        }
        for (&device, &limit) in &limits {
            let stats = figures.devices.get(&device);
            let ooms = |by_limit: bool| -> Vec<&Oom> { stats.map(|s| s.ooms_of_cause(by_limit)).unwrap_or_default() };
            let count = |by_limit: bool| stats.map_or(0, |s| s.oom_sites.count(by_limit));
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
            let last_refusal = refused.iter().chain(&card_ooms).max_by_key(|o| o.time_ns);
            let failed_library = last_refusal
                .map(|oom| owner_of(&index.frames(&index.processes[process], oom.stack)))
                .filter(|owner| owner != UNKNOWN_OWNER && owner != PAUSED_SITE);
            verdicts.push(LimitVerdict {
                process,
                device,
                limit,
                refused,
                refused_count: count(true),
                card_ooms,
                card_oom_count: count(false),
                card_total: footprint
                    .and_then(|f| f.info.as_ref())
                    .map(|i| i.total_bytes)
                    .filter(|&t| t > 0),
                peak_bytes,
                peak_time_ns,
                peak_parts,
                recovered_by_pytorch,
                ending: process_ending(index, process),
                failed_library,
                kept_alone: figures.limit_kept_alone,
            });
        }
    }
    verdicts
}

/// How the process of image `process` ended. An image that `exec`'d hands
/// the question on to the next traced image of its process (same pid and
/// host, a later image number); the last traced one carries the process's
/// status where `cudatrace run` saw it.
fn process_ending(index: &TraceIndex, process: usize) -> ProcessEnding {
    let mut info = &index.processes[process];
    // Image numbers only grow along the chain, so it ends.
    loop {
        let Some(end) = &info.end else {
            return ProcessEnding::NotRecorded;
        };
        if end.still_running {
            return ProcessEnding::StillRunning;
        }
        if end.exec_into.is_none() {
            return end
                .exit_status
                .map_or(ProcessEnding::NotRecorded, ProcessEnding::Status);
        }
        let next = index
            .processes
            .iter()
            .filter(|other| {
                other.start.pid == info.start.pid
                    && other.start.place.host == info.start.place.host
                    && other.start.image > info.start.image
                    && other.start.start_monotonic_ns >= info.start.start_monotonic_ns
            })
            .min_by_key(|other| other.start.image);
        match next {
            Some(next) => info = next,
            None => {
                return end
                    .process_exit_status
                    .map_or(ProcessEnding::NotRecorded, ProcessEnding::Status)
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use cudatrace_events::Api;

    fn refusal() -> Oom {
        Oom {
            requested_bytes: 32 << 20,
            api: Api::CuMemAllocV2,
            device_free: 14 << 20,
            device_total: 40 << 20,
            by_limit: true,
            stack: 0,
            time_ns: 1,
            held: None,
        }
    }

    fn verdict<'a>(refused: Vec<&'a Oom>, recovered_by_pytorch: bool, ending: ProcessEnding) -> LimitVerdict<'a> {
        LimitVerdict {
            process: 0,
            device: DeviceKey::Gpu(0),
            limit: 40 << 20,
            refused_count: refused.len() as u64,
            refused,
            card_ooms: Vec::new(),
            card_oom_count: 0,
            card_total: None,
            peak_bytes: 0,
            peak_time_ns: 0,
            peak_parts: Vec::new(),
            recovered_by_pytorch,
            ending,
            failed_library: None,
            kept_alone: None,
        }
    }

    #[test]
    fn after_a_refusal_pytorch_recovered_from_the_ending_decides() {
        let oom = refusal();
        let outcome = |recovered, ending| verdict(vec![&oom], recovered, ending).outcome();
        assert_eq!(outcome(true, ProcessEnding::Status(0)), LimitOutcome::Fits);
        assert_eq!(outcome(true, ProcessEnding::Status(1)), LimitOutcome::DidNotFit);
        assert_eq!(outcome(true, ProcessEnding::Status(137)), LimitOutcome::DidNotFit);
        assert_eq!(outcome(true, ProcessEnding::StillRunning), LimitOutcome::NotKnown);
        assert_eq!(outcome(true, ProcessEnding::NotRecorded), LimitOutcome::NotKnown);
        // PyTorch raised: it did not fit, however the process ended.
        assert_eq!(outcome(false, ProcessEnding::Status(0)), LimitOutcome::DidNotFit);
        // No refusal: it fit, whatever else made the process fail.
        assert_eq!(
            verdict(Vec::new(), false, ProcessEnding::Status(1)).outcome(),
            LimitOutcome::Fits
        );
        assert_eq!(
            verdict(Vec::new(), false, ProcessEnding::NotRecorded).outcome(),
            LimitOutcome::Fits
        );
    }
}
