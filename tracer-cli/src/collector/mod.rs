//! The live collector: turns the spools of a traced process tree into one
//! trace while the processes run. A [`Collector`] ([`collection`]) starts
//! and drains these threads, which share [`shared_state`]:
//!
//! - a scanner thread ([`scanner`]) finds new spool files in the run folder
//!   and refuses any that are not ours;
//! - a pool of reader threads ([`spool_readers`]) follows the spools (a
//!   spool is a unit of work passed between them through a channel);
//! - a preparer thread ([`chunk_preparer`]) makes the next chunk places of
//!   each live spool ready ahead of its writer, off the hooks' path;
//! - a sampler thread ([`nvml_sampler`]) reads the devices' usage;
//! - one writer thread ([`sink`]) appends to the trace everything the others
//!   send it, through a crossbeam channel, and flushes whenever it runs dry,
//!   so the trace is readable while it is written.

mod chunk_preparer;
mod collection;
mod collection_summary;
mod fold;
pub mod fold_schedule;
mod host;
pub mod liveness;
pub mod notice_file;
mod nvml;
mod nvml_sampler;
pub mod recover;
mod scanner;
mod shared_state;
mod sink;
pub mod spool_dir;
mod spool_readers;
pub mod spool_tail;
pub mod switch_log;
pub mod trace_name;

pub use collection::{header_for, Collector};
pub use collection_summary::CollectionSummary;
pub use host::{monotonic_ns, realtime_ns};
pub use nvml_sampler::{start_nvml, NvmlStart};
