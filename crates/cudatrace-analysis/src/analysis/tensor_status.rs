//! Whether tensor tracking stopped in a process, from its tensor-status
//! records and its count of tensor actions.

use super::trace_index::ProcessIndex;
use cudatrace_events::tensors::status;

/// Whether tracking stopped after recording: the tensors' end state is then
/// not known, and no leak may be claimed from it.
pub fn tensors_stopped_midway(process: &ProcessIndex) -> bool {
    process.tensor_actions > 0 && process.tensor_status.iter().any(|e| e.arg1 == status::UNAVAILABLE)
}
