//! What `cudatrace perfetto` draws, whatever the file format: one replay of
//! the trace that hands each thing to draw, in order, to a [`Canvas`] (the
//! JSON writer, [`super::perfetto_json`], or the protobuf one,
//! [`super::perfetto_proto`]).
//!
//! - one process per traced process image, named by its argv, with its
//!   parent and image number as a label;
//! - per device, a counter of live bytes, the report's figure, and counters
//!   of where the driver's memory went: one per owning library and one per
//!   driver category (see [`owner_tracks`]);
//! - per device where PyTorch's tensors were recorded, its allocated and
//!   reserved bytes as two counters beside those;
//! - each allocation's lifetime as a slice named by size and API, on a lane
//!   of its own while it lives (see [`lanes`]), with its top frames;
//! - out-of-memory failures as instants on the failing thread; process
//!   starts (forks and execs) as instants naming the parent;
//! - where recording was paused and resumed, as marks across the trace.
//!
//! The window (`--from`/`--to`) and `--max-events` choose what is drawn;
//! memory stays proportional to the allocations live at once.

mod counter_names;
pub mod lanes;
pub mod owner_tracks;
mod scene;

pub use owner_tracks::Counter;
pub use scene::{
    draw, passes, slice_name, Canvas, Ending, Mark, Process, ProcessStart, Refusal, SliceBegin, SliceEnd, Stack,
};
