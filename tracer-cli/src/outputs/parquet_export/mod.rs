//! Traces as Parquet, for queries over many ranks' traces with DuckDB,
//! Polars or Spark (`cudatrace export`): two files.
//!
//! `events.parquet`, one row per allocation, free, tensor allocation,
//! tensor free and out-of-memory failure of every input trace, in the
//! order of each trace's replay (see [`cudatrace_analysis`]), written in row
//! groups of a million rows, so that memory stays one row group's however
//! many events the traces hold. Its columns ([`schemas::EVENT_COLUMNS`]):
//!
//! | column | type | what |
//! | --- | --- | --- |
//! | `time_ns` | int64 | the event's `CLOCK_MONOTONIC` time, as the trace has it |
//! | `wall_time_ns` | int64 | the same instant on the wall clock, ns since the epoch, from the process's clock anchor |
//! | `trace` | string | the input trace, as named on the command line |
//! | `host` | string | the host the process ran on |
//! | `rank` | int32, nullable | its rank in its job, where the trace records it |
//! | `pid` | int32 | process id |
//! | `process` | int32 | the process image's index within its trace |
//! | `device` | int32, nullable | device ordinal; null for host memory or where unknown |
//! | `action` | string | `alloc`, `free`, `tensor_alloc`, `tensor_free` or `oom` |
//! | `api` | string | the CUDA call (or PyTorch's allocator) that made the change, as reports name it |
//! | `kind` | string | the sort of memory (`device`, `pool`, `host-pinned`, ...) |
//! | `address` | uint64 | address or handle; 0 for an `oom` |
//! | `size` | int64 | bytes: allocated, freed (the allocation's), or asked for |
//! | `call_site_id` | uint64, nullable | the call site (see `call_sites.parquet`); for a free, the allocation's; null without a call stack |
//! | `owner` | string | the library that owns the memory, as `diff` and the report attribute it |
//! | `seq` | int64 | the event's sequence number in its process: the order memory changed in |
//!
//! `call_sites.parquet`, one row per distinct call site of all inputs
//! ([`call_site_table`]). A call site's id is the same in every trace
//! ([`cudatrace_analysis::call_site_id`]).

mod call_site_table;
mod event_rows;
mod events_file;
mod export_writer;
mod schemas;

pub use export_writer::Export;
