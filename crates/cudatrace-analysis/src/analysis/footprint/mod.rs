//! Where every byte the driver holds for a process went: its driver-used
//! bytes on each device (the reference figure) split into allocations by
//! owning library, pools and graph memory beyond live allocations, the
//! context, modules and kernels, and what no measurement covers.
//!
//! Each category is measured when it appears, by the process's own
//! readings of the device around that moment (see
//! `cudatrace_events::measures`); "unexplained" is what is left of the
//! reference figure. The reference is NVML's per-process usage as the
//! collector last read it; without NVML it is the device's used memory as
//! the process last read it, which is only a bound.
//!
//! The work is in four parts: the figures ([`figures`]), the readings they
//! stand on ([`readings`]), the tracker that follows the replay
//! ([`tracker`]), and each device's split once the replay is over
//! ([`device_split`]).

mod device_split;
mod figures;
mod readings;
mod tracker;

pub use figures::{Breakdown, Category, DeviceFootprint, FootprintNote, ReferenceSource};
pub use readings::footprint_reading_times;
pub use tracker::FootprintTracker;
