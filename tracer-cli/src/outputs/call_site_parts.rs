//! A call site's parts as one line: the backward pass's bytes by autograd
//! node, for the report and the page alike.

use crate::wording::bytes;

/// Autograd nodes named in a backward pass's line; the rest are counted.
const PARTS_NAMED: usize = 5;

/// A call site's parts (the backward pass's bytes by autograd node) as
/// one line: `by autograd node: ConvolutionBackward0 89.5 MiB, …`.
pub fn parts_text(parts: &[(String, u64)]) -> Option<String> {
    if parts.is_empty() {
        return None;
    }
    let mut named: Vec<String> = parts
        .iter()
        .take(PARTS_NAMED)
        .map(|(node, size)| format!("{node} {}", bytes(*size)))
        .collect();
    if parts.len() > PARTS_NAMED {
        let rest: u64 = parts[PARTS_NAMED..].iter().map(|(_, size)| size).sum();
        named.push(format!("{} more {}", parts.len() - PARTS_NAMED, bytes(rest)));
    }
    Some(format!("by autograd node: {}", named.join(", ")))
}
