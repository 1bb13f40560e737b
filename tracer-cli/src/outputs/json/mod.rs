//! Every JSON object the command writes of a trace's figures, so that
//! every field name of those shapes is in this folder:
//!
//! - [`report_object`]: `cudatrace report --json`;
//! - [`footprint_object`]: each process's `footprint` in it;
//! - [`oom_object`]: each device's out-of-memory failures in it;
//! - [`call_site_object`]: the stacks and call sites in all of them;
//! - [`diff_object`]: `cudatrace diff --json`;
//! - [`dump_lines`]: `cudatrace dump`'s lines.
//!
//! The Perfetto JSON file and the HTML page's chart data are JSON in formats
//! their viewers define; their writers ([`super::perfetto_json`],
//! [`super::html_page`]) keep those names.

pub mod call_site_object;
pub mod diff_object;
pub mod dump_lines;
pub mod footprint_object;
pub mod oom_object;
pub mod report_object;
