//! One device's figures within a process, and a process's pinned host
//! memory: allocations, frees, the peak and what was in use at it, memory
//! live now by call stack, and out-of-memory failures with what held the
//! device then.

use super::keys::ByStack;
use super::tensor_summary::TensorBytes;
use cudatrace_events::Api;
use foldhash::HashMap;

/// An out-of-memory failure.
#[derive(Clone, Debug)]
pub struct Oom {
    /// Bytes asked for.
    pub requested_bytes: u64,
    /// Entry point that failed.
    pub api: Api,
    /// The device's free bytes then.
    pub device_free: u64,
    /// The device's total bytes.
    pub device_total: u64,
    /// Refused by the memory limit (`run --limit`), not the card: then
    /// `device_free` is what the limit had left and `device_total` the limit.
    pub by_limit: bool,
    /// Call stack.
    pub stack: u32,
    /// When (`CLOCK_MONOTONIC` ns).
    pub time_ns: u64,
    /// What held the device's memory at that moment; `None` past the first
    /// [`OOM_STATES_KEPT`] failures of a device (a program that retries in a
    /// loop), whose states are not kept.
    pub held: Option<Box<HeldAtOom>>,
}

/// Out-of-memory failures per device whose state [`Oom::held`] keeps.
pub const OOM_STATES_KEPT: usize = 16;

/// Out-of-memory failures a device keeps in detail, unless every one is
/// asked for: a program that retries in a loop fails millions of times,
/// and keeping each would take the memory a command keeps to. Every one is
/// counted by call site ([`OomSites`]), and the latest of each cause kept.
pub const OOMS_KEPT: usize = 10_000;

/// How many out-of-memory failures a summary keeps in detail per device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OomsKept(pub usize);

impl Default for OomsKept {
    fn default() -> OomsKept {
        OomsKept(OOMS_KEPT)
    }
}

impl OomsKept {
    /// Every failure, as `report --all-ooms` asks.
    pub const EVERY: OomsKept = OomsKept(usize::MAX);
}

/// Failures with one call stack, entry point and cause (card or limit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OomSite {
    /// Call stack.
    pub stack: u32,
    /// Entry point.
    pub api: Api,
    /// Refused by the memory limit.
    pub by_limit: bool,
    /// Failures.
    pub count: u64,
    /// The fewest bytes asked for.
    pub smallest: u64,
    /// The most bytes asked for.
    pub largest: u64,
    /// When the first failed.
    pub first_ns: u64,
    /// When the last failed.
    pub last_ns: u64,
}

/// Every out-of-memory failure of a device, counted by call site, in the
/// order the sites first failed.
#[derive(Clone, Debug, Default)]
pub struct OomSites {
    sites: Vec<OomSite>,
    place: HashMap<(u32, Api, bool), usize>,
}

impl OomSites {
    /// Counts one failure.
    pub fn add(&mut self, oom: &Oom) {
        let next = self.sites.len();
        let place = *self.place.entry((oom.stack, oom.api, oom.by_limit)).or_insert(next);
        if place == next {
            self.sites.push(OomSite {
                stack: oom.stack,
                api: oom.api,
                by_limit: oom.by_limit,
                count: 0,
                smallest: u64::MAX,
                largest: 0,
                first_ns: oom.time_ns,
                last_ns: oom.time_ns,
            });
        }
        let site = &mut self.sites[place];
        site.count += 1;
        site.smallest = site.smallest.min(oom.requested_bytes);
        site.largest = site.largest.max(oom.requested_bytes);
        site.first_ns = site.first_ns.min(oom.time_ns);
        site.last_ns = site.last_ns.max(oom.time_ns);
    }

    /// The sites, in the order they first failed.
    pub fn sites(&self) -> &[OomSite] {
        &self.sites
    }

    /// The sites, most failures first; ties in the order they first failed.
    pub fn most_frequent_first(&self) -> Vec<&OomSite> {
        let mut sites: Vec<&OomSite> = self.sites.iter().collect();
        sites.sort_by_key(|site| (std::cmp::Reverse(site.count), site.first_ns));
        sites
    }

    /// Failures in all, of the card (`by_limit` false) or of the limit.
    pub fn count(&self, by_limit: bool) -> u64 {
        self.sites
            .iter()
            .filter(|s| s.by_limit == by_limit)
            .map(|s| s.count)
            .sum()
    }

    /// Failures in all, whatever their cause.
    pub fn total(&self) -> u64 {
        self.sites.iter().map(|s| s.count).sum()
    }
}

/// What held a device's memory when an allocation failed.
#[derive(Clone, Debug, Default)]
pub struct HeldAtOom {
    /// Bytes of device memory live in the process.
    pub live_bytes: u64,
    /// They, by call stack.
    pub live_by_stack: ByStack,
    /// PyTorch's figures then, where its tensors are recorded: allocated
    /// and reserved bytes (inactive is the difference), and live tensors by
    /// call stack.
    pub tensors: Option<(TensorBytes, ByStack)>,
}

impl HeldAtOom {
    /// The call stacks a view of the failure lists: PyTorch's live tensors
    /// where they are recorded (`true`), else the live allocations.
    pub fn listed(&self) -> (bool, &ByStack) {
        match &self.tensors {
            Some((_, by_stack)) => (true, by_stack),
            None => (false, &self.live_by_stack),
        }
    }
}

/// One device's figures within a process.
#[derive(Clone, Debug, Default)]
pub struct DeviceStats {
    /// Allocations made.
    pub allocations: u64,
    /// Allocations freed.
    pub frees: u64,
    /// Bytes allocated in all.
    pub bytes_allocated: u64,
    /// Bytes in use now.
    pub current: u64,
    /// Most bytes in use at once.
    pub peak: u64,
    /// When the peak was first reached.
    pub peak_time_ns: u64,
    /// Out-of-memory failures: the first [`OOMS_KEPT`] (or as many as the
    /// summary was asked to keep), in time order.
    pub ooms: Vec<Oom>,
    /// Every out-of-memory failure, kept or not, counted by call site.
    pub oom_sites: OomSites,
    /// The first failure of the card (0) and of the limit (1) that came
    /// after those kept in `ooms`, where none of its cause is kept there.
    pub first_unkept_ooms: [Option<Oom>; 2],
    /// The latest failure of the card (0) and of the limit (1), where it
    /// came after those kept in `ooms` and is not the first unkept one.
    pub latest_ooms: [Option<Oom>; 2],
    /// Whether `ooms` holds a failure of the card (0), of the limit (1).
    kept_cause: [bool; 2],
    /// Bytes and allocations in use now, per call stack.
    pub live_by_stack: ByStack,
    /// What was in use when the peak was reached.
    pub peak_by_stack: ByStack,
    /// The peak was raised and not yet copied into `peak_by_stack`: copied
    /// when memory first goes down again (or at the end), so that a climb
    /// costs one copy, not one per allocation.
    peak_pending: bool,
}

impl DeviceStats {
    /// Takes in one failure: kept in detail while fewer than `kept` are,
    /// else as the first or the latest of its cause; counted by call site
    /// either way.
    pub(super) fn failed(&mut self, oom: Oom, kept: usize) {
        self.oom_sites.add(&oom);
        let cause = usize::from(oom.by_limit);
        if self.ooms.len() < kept {
            self.kept_cause[cause] = true;
            self.ooms.push(oom);
        } else if !self.kept_cause[cause] && self.first_unkept_ooms[cause].is_none() {
            self.first_unkept_ooms[cause] = Some(oom);
        } else {
            self.latest_ooms[cause] = Some(oom);
        }
    }

    /// The failures of one cause (the limit's refusals, or the card's) that
    /// the device holds in detail: those kept, and the first and latest
    /// past them; in time order.
    pub fn ooms_of_cause(&self, by_limit: bool) -> Vec<&Oom> {
        let cause = usize::from(by_limit);
        let past = [&self.first_unkept_ooms[cause], &self.latest_ooms[cause]];
        let mut ooms: Vec<&Oom> = self
            .ooms
            .iter()
            .chain(past.into_iter().flatten())
            .filter(|o| o.by_limit == by_limit)
            .collect();
        ooms.sort_by_key(|o| o.time_ns);
        ooms
    }

    pub(super) fn add(&mut self, size: u64, stack: u32, time_ns: u64) {
        self.allocations += 1;
        self.bytes_allocated += size;
        self.current += size;
        let entry = self.live_by_stack.entry(stack).or_default();
        entry.0 += size;
        entry.1 += 1;
        if self.current > self.peak {
            self.peak = self.current;
            self.peak_time_ns = time_ns;
            self.peak_pending = true;
        }
    }

    pub(super) fn remove(&mut self, size: u64, stack: u32) {
        self.settle_peak();
        self.frees += 1;
        self.current = self.current.saturating_sub(size);
        if let Some(entry) = self.live_by_stack.get_mut(&stack) {
            entry.0 = entry.0.saturating_sub(size);
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                self.live_by_stack.remove(&stack);
            }
        }
    }

    pub(super) fn settle_peak(&mut self) {
        if self.peak_pending {
            self.peak_by_stack = self.live_by_stack.clone();
            self.peak_pending = false;
        }
    }
}

/// Pinned host memory (and host-side VMM memory) of a process.
#[derive(Clone, Debug, Default)]
pub struct HostStats {
    /// Allocations made.
    pub allocations: u64,
    /// Allocations freed.
    pub frees: u64,
    /// Bytes in use now.
    pub current: u64,
    /// Most bytes in use at once.
    pub peak: u64,
}
