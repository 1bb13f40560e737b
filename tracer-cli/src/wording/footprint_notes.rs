//! The footprint table's words: a context limit with its value, and the
//! caveats on a device's figures.

use super::numbers::bytes;
use cudatrace_analysis::FootprintNote;
use cudatrace_events::measures::limit;

/// The name a report gives a limit, with its value.
pub fn limit_text(which: u64, value: u64) -> String {
    format!("{} {}", limit::name(which), bytes(value))
}

/// A caveat on a footprint, in words.
pub fn note_text(note: &FootprintNote) -> String {
    match note {
        FootprintNote::LateBaseline => {
            "NVML's first reading of the device came after the process started: the context figure may be low".into()
        }
        FootprintNote::NoBaseline => "no reading of the device before the process (NVML missing): the context figure includes every other process's memory".into(),
        FootprintNote::NoContext => "no context was seen becoming current on this device".into(),
        FootprintNote::NoPerProcessFigure { nvml_reason } => format!(
            "NVML gave no per-process figure{}: the reference is the device's used memory, an upper bound",
            nvml_reason.as_ref().map_or_else(String::new, |reason| format!(" ({reason})"))
        ),
        FootprintNote::NoReading => "no reading of the device's memory: nothing to explain".into(),
        FootprintNote::StreamsEstimated { measured, represented } => format!(
            "streams and events: an estimate, {measured} of {represented} creations measured, each standing for those after it"
        ),
        FootprintNote::DeviceMismatches(times) => format!(
            "{times} time(s) a thread's current device changed through a call cudatrace does not see: events on that thread until the next check may name the previous device"
        ),
        FootprintNote::ContextDisagrees { by_nvml, measured } => format!(
            "NVML's first reading after the context, less what was measured by then, leaves {}; the context as measured is {} (the rest is memory measured later, or not at all)",
            bytes(*by_nvml),
            bytes(*measured)
        ),
    }
}
