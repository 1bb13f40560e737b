//! What became of tensor tracking in a process, in words: from its
//! tensor-status records and its count of tensor actions.

use super::numbers::{bytes, count};
use cudatrace_analysis::{ProcessIndex, TensorBytes, OOM_STATES_KEPT};
use cudatrace_events::tensors::{reason, status, version_text};

/// One line on the process's tensors, or `None` when PyTorch's allocator
/// never came into it.
pub fn tensor_status_line(process: &ProcessIndex) -> Option<String> {
    let version = process
        .tensor_status
        .iter()
        .map(|e| e.address)
        .find(|&v| v != 0)
        .map(|v| format!("PyTorch {}", version_text(v)))
        .unwrap_or_else(|| "PyTorch".to_owned());
    let of = |what: u64| process.tensor_status.iter().find(|e| e.arg1 == what);
    if let Some(off) = of(status::UNAVAILABLE) {
        if process.tensor_actions > 0 {
            return Some(format!(
                "tensors: {} of {version}'s caching allocator recorded, then tracking stopped: {}; the tensors live at exit are not known",
                count(process.tensor_actions, "action", "actions"),
                reason::text(off.arg2)
            ));
        }
        return Some(format!("tensors: unavailable in {version}: {}", reason::text(off.arg2)));
    }
    let missed: u64 = process
        .tensor_status
        .iter()
        .filter(|e| e.arg1 == status::NOT_RECORDED)
        .map(|e| e.arg2)
        .sum();
    let missed = if missed > 0 {
        format!("; {missed} before the layout was confirmed were not recorded")
    } else {
        String::new()
    };
    if process.tensor_actions > 0 {
        return Some(format!(
            "tensors: {} of {version}'s caching allocator recorded{missed}",
            count(process.tensor_actions, "action", "actions")
        ));
    }
    of(status::ATTACHED).map(|_| {
        format!("tensors: attached to {version}'s caching allocator, which made no segment to confirm its layout by{missed}")
    })
}

/// PyTorch's figures at one moment: "PyTorch 15.5 MiB allocated, 44.0 MiB
/// reserved, 28.5 MiB inactive".
pub fn torch_bytes_text(now: &TensorBytes) -> String {
    format!(
        "PyTorch {} allocated, {} reserved, {} inactive",
        bytes(now.allocated),
        bytes(now.reserved),
        bytes(now.inactive())
    )
}

/// An out-of-memory failure whose state the replay did not keep.
pub fn oom_state_not_kept() -> String {
    format!("not kept (past the device's first {OOM_STATES_KEPT} failures)")
}
