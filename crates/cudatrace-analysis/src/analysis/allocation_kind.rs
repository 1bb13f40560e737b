//! Which events allocate and free the memory that steps and growth are
//! measured on: PyTorch's tensors, or the driver's device memory.

use cudatrace_events::tensors::{action_of, Action};
use cudatrace_events::{Event, Op};

/// Whether `event` allocates: `Some(true)` for a tensor, `Some(false)` for
/// device memory from the driver, else `None`.
pub fn allocation_kind(event: &Event) -> Option<bool> {
    if action_of(event) == Some(Action::Alloc) {
        Some(true)
    } else if event.op == Op::Alloc && event.kind.counts_as_device_memory() {
        Some(false)
    } else {
        None
    }
}

/// Whether `event` frees, as [`allocation_kind`] tells its kind.
pub fn free_kind(event: &Event) -> Option<bool> {
    if action_of(event) == Some(Action::FreeCompleted) {
        Some(true)
    } else if event.op == Op::Free && event.kind.counts_as_device_memory() {
        Some(false)
    } else {
        None
    }
}
