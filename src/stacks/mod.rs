//! The stacks layer: the call stack of an event, native and Python frames
//! interleaved, interned into nodes the spool carries. Nothing is
//! symbolized here: that happens outside the process.

pub(crate) mod call_stack;
pub(crate) mod learnt_steps;
pub(crate) mod module_map;
pub(crate) mod native_unwind;
pub(crate) mod python_frames;
pub(crate) mod return_slot;
pub(crate) mod stack_cache;
pub(crate) mod stack_table;
pub(crate) mod thread_stack;
pub(crate) mod walk_memo;
