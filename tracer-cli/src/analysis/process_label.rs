//! Where a process ran and which rank of its job it was, for outputs that
//! put processes of many traces side by side (`cudatrace export`).

use cudatrace_trace::{Header, ProcessStart};

/// A process's host and rank: `(host, rank)`.
///
/// The host is the trace header's (every process of a trace ran on the
/// collector's host, "" where the header is missing); the rank is `None`,
/// since traces do not record it yet. Once `ProcessStart` carries its own
/// `host` and `rank`, this is the one place to take them from it.
pub fn process_label(header: Option<&Header>, _start: &ProcessStart) -> (String, Option<u32>) {
    let host = header.map(|h| h.host.clone()).unwrap_or_default();
    (host, None)
}
