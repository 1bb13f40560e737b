//! How many threads a pass over a trace may use besides its own.

/// Helper threads at most, whatever the machine: decoding does not gain
/// past a few, and a shared machine's other jobs need theirs.
const MOST_HELPERS: usize = 8;

/// Threads worth starting besides the caller's: one fewer than the cores
/// this process may run on (`taskset` and cgroups included), none on one.
pub fn helpers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_sub(1).min(MOST_HELPERS)
}
