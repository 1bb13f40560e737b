//! Reports with every out-of-memory failure (`report --all-ooms`): the
//! report is made with a placeholder where each device's list goes, and the
//! lists are made as the report is written, one failure at a time, so that
//! a program that failed millions of times takes the memory of one
//! failure's text, not of all of them.

use crate::system::terminal::Stdout;
use crate::system::write_failure::WriteFailure;
use cudatrace_analysis::{DeviceStats, Oom, ProcessIndex, Summary, TraceIndex};
use std::collections::HashMap;

/// The start of every placeholder: text no trace can make.
pub const MARK: &str = "\u{1}every failure ";

/// Where a device's failures go: the mark and the device's list's place
/// in memory.
pub fn placeholder(stats: &DeviceStats) -> String {
    format!("{MARK}{:p}\u{1}", stats.ooms.as_ptr())
}

/// A device's failures, and the process they belong to.
pub type Failures<'a> = (&'a ProcessIndex, &'a [Oom]);

/// Each device's failures, by its placeholder as the report writes it
/// (`written` turns a placeholder into that: quoted in JSON, a line in text).
pub fn lists<'a>(
    index: &'a TraceIndex,
    summary: &'a Summary,
    written: impl Fn(String) -> String,
) -> HashMap<String, Failures<'a>> {
    let mut lists = HashMap::new();
    for (info, process) in index.processes.iter().zip(&summary.processes) {
        for stats in process.devices.values() {
            lists.insert(written(placeholder(stats)), (info, stats.ooms.as_slice()));
        }
    }
    lists
}

/// Writes `text` to `out`, each placeholder in it replaced by what `fill`
/// writes for its device's failures. A placeholder starts where `start`
/// (the mark as written) is found, and `length` says how long it is from
/// there. `false` when the reader went away.
pub fn write_filled(
    text: &str,
    start: &str,
    length: impl Fn(&str) -> usize,
    lists: &HashMap<String, Failures>,
    out: &mut Stdout,
    mut fill: impl FnMut(Failures, &mut Stdout) -> Result<bool, WriteFailure>,
) -> Result<bool, WriteFailure> {
    let mut rest = text;
    while let Some(at) = rest.find(start) {
        let end = at + length(&rest[at..]);
        let written = match lists.get(&rest[at..end]) {
            Some(&failures) => out.write(&rest[..at])? && fill(failures, out)?,
            // Not a placeholder after all: written as it is.
            None => out.write(&rest[..end])?,
        };
        if !written {
            return Ok(false);
        }
        rest = &rest[end..];
    }
    out.write(rest)
}
