//! One module per output of a trace. Each reads the same
//! [`TraceIndex`](cudatrace_analysis::TraceIndex)
//! and replays the same events (see [`cudatrace_analysis`]), so all agree.

mod call_site_parts;
pub mod diff_tables;
mod every_failure;
pub mod folded_stacks;
pub mod footprint_table;
pub mod html_page;
pub mod json;
pub mod merged_trace;
pub mod parquet_export;
pub mod perfetto_json;
pub mod perfetto_proto;
pub mod perfetto_scene;
pub mod pickle;
pub mod report_text;
pub mod steps_text;
pub mod torch_snapshot;
mod trace_lacks;

pub use call_site_parts::parts_text;
pub use trace_lacks::say_what_the_trace_lacks;
