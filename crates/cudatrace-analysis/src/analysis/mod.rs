//! Reading a trace for every output: one model, one replay.
//!
//! A trace is read in two steps. [`TraceIndex`] reads it once and keeps
//! what is small (processes, their ends, strings, stack symbols and nodes,
//! damage) and where each block of events lies. [`Replay`] then reads the
//! blocks again in event order (sequence order within a process, time order
//! across processes), replays each process's memory semantics into
//! [`Change`]s with [`ProcessMemory`], and hands every event to a
//! [`Consumer`]: the summary, each output's writer. So all views of a trace
//! agree, and memory stays proportional to the live set and the number of
//! distinct stacks, never to the number of events.

mod allocation_kind;
mod block_prefetch;
mod call_site;
mod device_stats;
mod engine;
mod event_stream;
mod footprint;
mod growth_between_runs;
mod growth_within_run;
mod keys;
mod limit_verdict;
mod low_points;
mod merge_summary;
mod moment;
mod owner;
mod parallel_summary;
mod paused_spans;
mod process_image;
mod ranges;
mod rank_table;
mod replay;
mod retention;
mod silent_children;
mod site_id;
mod stack_frames;
mod step_finding;
mod step_measures;
mod tensor_status;
mod tensor_summary;
#[cfg(any(test, feature = "testing"))]
pub mod test_events;
#[cfg(any(test, feature = "testing"))]
pub mod test_frames;
mod trace_index;
mod trace_summary;
mod unreadable;
mod window;

pub use crate::system::input_path::{check_regular_file, NotRegular};
pub use call_site::{
    call_sites, headline, headline_text, in_backward_pass, made_by_caching_allocator, site_key, site_key_of, site_name,
    stack_lines, FramesShown, Place, StackLine, BACKWARD_PASS, NO_STACK,
};
pub use device_stats::{DeviceStats, HeldAtOom, Oom, OomSite, OomSites, OomsKept, OOMS_KEPT};
pub use engine::{Consumer, NoConsumer, PerProcess, Replay, Step};
pub use footprint::{
    footprint_reading_times, Breakdown, Category, DeviceFootprint, FootprintNote, FootprintTracker, ReferenceSource,
};
pub use growth_between_runs::{compare, Growth, RunFigures};
pub use growth_within_run::{growing_sites, GrowingSite, Measured, FEWEST_RISES};
pub use keys::{ByStack, DeviceKey};
pub use limit_verdict::{limit_verdicts, LimitOutcome, LimitVerdict, ProcessEnding};
pub use merge_summary::MergeSummary;
pub use moment::Moment;
pub use owner::owner_of;
pub use parallel_summary::process_groups;
pub use paused_spans::{paused_spans, PAUSED_SITE};
pub use process_image::ProcessImage;
pub use ranges::cut_range;
pub use rank_table::{RankRow, RankTable, OUTLIER_BYTES, OUTLIER_PERCENT};
pub use replay::{Allocation, Change, ProcessMemory};
pub use retention::{Kept, RetentionPass};
pub use silent_children::{silent_children, unnamed_children, unrecorded_count, SilentChild};
pub use site_id::call_site_id;
pub use stack_frames::Frame;
#[cfg(any(test, feature = "testing"))]
pub use step_finding::find_boundaries;
pub use step_finding::{find_boundaries_so_far, Boundaries, StepCounts};
pub use step_measures::{StepRecord, Steps};
pub use tensor_status::tensors_stopped_midway;
pub use tensor_summary::{TensorBytes, TensorStats};
pub use trace_index::{ProcessIndex, TraceIndex};
pub use trace_summary::{largest_call_sites, AtCut, ProcessSummary, Summary, OOM_STATES_KEPT};
pub use unreadable::{UnreadBlock, UnreadableTrace};
pub use window::Window;
