//! A process image as merging tells runs apart by: the host, pid, image
//! number and start time that no two runs share.

use cudatrace_trace::{Header, ProcessStart};

/// A process image as it ran: no two runs hold the same one, whichever
/// traces they were collected or merged into.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProcessImage {
    /// Its host.
    pub host: String,
    /// Its pid.
    pub pid: u32,
    /// Its image number within the pid (0, then one more at each `exec`).
    pub image: u32,
    /// The wall clock when tracing started in it, ns since the epoch
    /// (which merging leaves as it is).
    pub start_realtime_ns: u64,
}

impl ProcessImage {
    /// The image `start` records, in a trace whose header is `header`.
    pub fn of(start: &ProcessStart, header: &Header) -> ProcessImage {
        let host = if start.place.host.is_empty() {
            &header.host
        } else {
            &start.place.host
        };
        ProcessImage {
            host: host.clone(),
            pid: start.pid,
            image: start.image,
            start_realtime_ns: start.start_realtime_ns,
        }
    }
}
