//! The record layer: what a hooked call becomes in the spool. The hooks
//! above it say what happened; this layer keeps the process's live
//! allocations, knows which device an event is on and whether a stream is
//! being captured, takes the device readings, and writes the records.

pub(crate) mod capture_state;
pub(crate) mod device_readings;
pub(crate) mod devices;
mod limit_exec;
mod limit_reports;
mod limit_state;
pub(crate) mod live_table;
pub(crate) mod memory_limit;
pub(crate) mod recorder;
pub(crate) mod tensors;
pub(crate) mod unloaded_driver;
