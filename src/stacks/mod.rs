//! The stacks layer: the call stack of an event, native and Python frames
//! interleaved, interned into nodes the spool carries. Nothing is
//! symbolized here: that happens outside the process.

pub mod call_stack;
pub mod module_map;
pub mod native_unwind;
pub mod python_frames;
pub mod stack_cache;
pub mod stack_table;
pub mod walk_memo;
