//! The moments a view of memory by call stack can show.

/// Which moment of a run a view of memory by call stack shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// Each device at its peak (tensors at their allocated peak).
    Peak,
    /// What was live when each process ended.
    Exit,
    /// What the failing device of the failing process held at the run's
    /// Nth out-of-memory failure (from 1, in time order).
    Oom(usize),
}
