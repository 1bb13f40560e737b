//! The record layer: what a hooked call becomes in the spool. The hooks
//! above it say what happened; this layer keeps the process's live
//! allocations, knows which device an event is on and whether a stream is
//! being captured, takes the device readings, and writes the records.

pub mod capture_state;
pub mod devices;
pub mod live_table;
pub mod memory_limit;
pub mod readings;
pub mod recorder;
pub mod tensors;
pub mod unloaded_driver;
