//! The figures of a footprint: the reference, its split at a moment, and
//! one process's footprint on one device with its caveats.

use cudatrace_events::measures::DeviceInfo;

/// Where a reference figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReferenceSource {
    /// NVML's per-process usage, read by the collector.
    Nvml,
    /// The device's used memory, read by the process: other processes'
    /// memory is in it too, so the figure is an upper bound.
    DeviceBound,
}

impl ReferenceSource {
    /// The name JSON and reports use.
    pub fn name(self) -> &'static str {
        match self {
            ReferenceSource::Nvml => "nvml-process",
            ReferenceSource::DeviceBound => "device-used-bound",
        }
    }
}

/// A reference figure: what the driver holds for the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reference {
    /// Bytes.
    pub bytes: u64,
    /// When it was read (`CLOCK_MONOTONIC` ns).
    pub time_ns: u64,
    /// Where it comes from.
    pub source: ReferenceSource,
}

/// The split of the driver-used bytes at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breakdown {
    /// The figure being explained, at the moment of the split: the reading
    /// it stands on plus what the measured categories changed by since
    /// (`time_ns` is the moment).
    pub reference: Reference,
    /// The reading `reference` stands on: the one before the moment, or
    /// the one after it where that leaves less unexplained (or none came
    /// before).
    pub reading: Reference,
    /// Live allocations by owning library, largest first.
    pub owners: Vec<(String, u64)>,
    /// What stream-ordered pools hold beyond their live allocations.
    pub pools: u64,
    /// What the device's graph memory pool holds.
    pub graphs: u64,
    /// The context, with what its limits grew by since.
    pub context: u64,
    /// Modules and libraries loaded, and kernels loaded at their first launch.
    pub modules: u64,
    /// Streams and events created (an estimate once creations were sampled).
    pub streams_and_events: u64,
    /// Executable graphs: instantiated, updated, uploaded, first launched.
    pub graph_executables: u64,
}

/// The driver's own categories of a device's memory, beside allocations
/// by owner, in the order outputs show them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// What stream-ordered pools hold beyond their live allocations.
    Pools,
    /// The device's graph memory pool.
    Graphs,
    /// The context.
    Context,
    /// Modules and kernels loaded.
    Modules,
    /// Streams and events.
    StreamsAndEvents,
    /// Executable graphs.
    GraphExecutables,
    /// What no measurement covers.
    Unexplained,
}

impl Category {
    /// Every category, in order.
    pub const ALL: [Category; 7] = [
        Category::Pools,
        Category::Graphs,
        Category::Context,
        Category::Modules,
        Category::StreamsAndEvents,
        Category::GraphExecutables,
        Category::Unexplained,
    ];
}

impl Breakdown {
    /// The bytes of `category` (what is unexplained may be negative).
    pub fn category(&self, category: Category) -> i64 {
        match category {
            Category::Pools => self.pools as i64,
            Category::Graphs => self.graphs as i64,
            Category::Context => self.context as i64,
            Category::Modules => self.modules as i64,
            Category::StreamsAndEvents => self.streams_and_events as i64,
            Category::GraphExecutables => self.graph_executables as i64,
            Category::Unexplained => self.unexplained(),
        }
    }

    /// Bytes some measurement covers.
    pub fn explained(&self) -> u64 {
        self.owners.iter().map(|(_, bytes)| bytes).sum::<u64>()
            + self.pools
            + self.graphs
            + self.context
            + self.modules
            + self.streams_and_events
            + self.graph_executables
    }

    /// The reference less what is explained; negative when the
    /// measurements add up to more than the reference.
    pub fn unexplained(&self) -> i64 {
        self.reference.bytes as i64 - self.explained() as i64
    }

    /// The explained share of the reference, in percent.
    pub fn explained_percent(&self) -> f64 {
        if self.reference.bytes == 0 {
            return 0.0;
        }
        self.explained() as f64 * 100.0 / self.reference.bytes as f64
    }
}

/// One process's footprint on one device.
#[derive(Clone, Debug)]
pub struct DeviceFootprint {
    /// Ordinal in the process.
    pub device: u8,
    /// What the process said the device is.
    pub info: Option<DeviceInfo>,
    /// The split at the process's exit (or its last event): what was live
    /// then.
    pub at_exit: Option<Breakdown>,
    /// The split at the footprint's peak: the moment the driver-used bytes,
    /// estimated between readings from what was measured, were highest.
    pub at_peak: Option<Breakdown>,
    /// The context's limits when it was first current, then as set: (limit, bytes).
    pub limits: Vec<(u64, u64)>,
    /// The context as NVML's first per-process reading after it puts it: that
    /// reading less everything else measured by then. A check on the
    /// context figure.
    pub context_by_nvml: Option<u64>,
    /// The context's bytes when it became current, before any limit grew it.
    pub context_first: u64,
    /// From each reading on, until the next: what the reading leaves
    /// unexplained, as (reading time, bytes). Between readings the
    /// footprint is estimated as everything measured plus this.
    pub unexplained_steps: Vec<(u64, i64)>,
    /// Caveats on the figures.
    pub notes: Vec<FootprintNote>,
}

impl DeviceFootprint {
    /// Every owner at exit or at the peak, with the larger of its two
    /// figures, largest first.
    pub fn owners_by_size(&self) -> Vec<(String, u64)> {
        let mut owners: Vec<(String, u64)> = Vec::new();
        for breakdown in self.at_exit.iter().chain(self.at_peak.iter()) {
            for (name, bytes) in &breakdown.owners {
                match owners.iter_mut().find(|(n, _)| n == name) {
                    Some(entry) => entry.1 = entry.1.max(*bytes),
                    None => owners.push((name.clone(), *bytes)),
                }
            }
        }
        owners.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        owners
    }
}

/// A caveat on a device's footprint figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FootprintNote {
    /// NVML's first reading of the device came after the process started:
    /// the context figure may be low.
    LateBaseline,
    /// No reading of the device before the process (NVML missing): the
    /// context figure includes every other process's memory.
    NoBaseline,
    /// No context was seen becoming current on the device.
    NoContext,
    /// NVML gave no per-process figure (with NVML's own reason, where it
    /// gave one): the reference is the device's used memory, a bound.
    NoPerProcessFigure {
        /// Why, as NVML's status said.
        nvml_reason: Option<String>,
    },
    /// No reading of the device's memory: nothing to explain.
    NoReading,
    /// Stream and event creations were sampled: the figure is an estimate.
    StreamsEstimated {
        /// Creations measured.
        measured: u64,
        /// Creations they stand for.
        represented: u64,
    },
    /// A thread's current device changed through calls cudatrace does not
    /// see, this many times.
    DeviceMismatches(usize),
    /// NVML's first reading after the context, less what was measured by
    /// then, differs from the context as measured.
    ContextDisagrees {
        /// The context by NVML's reading.
        by_nvml: u64,
        /// The context as measured.
        measured: u64,
    },
}
