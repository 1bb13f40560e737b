//! The bottom layer: what every other layer may use, and which uses nothing
//! of ours. The real CUDA functions and their C types, the clock, the
//! calling thread and its block of hot state, the switch that turns recording off, the loader's
//! `dlopen` count, the lazily mapped tables and the per-thread ones made on
//! first use, and spare stacks for deep work on a nearly full stack.

pub(crate) mod address_budget;
pub(crate) mod clock;
pub(crate) mod cuda_ffi;
pub(crate) mod cxx_function;
pub(crate) mod elf_symbols;
pub(crate) mod environment;
pub(crate) mod file_space;
pub(crate) mod hot_statics;
pub(crate) mod lazy_mapping;
pub(crate) mod loader;
pub(crate) mod no_cancel;
pub(crate) mod prefetch;
pub(crate) mod process_mark;
pub(crate) mod process_place;
pub(crate) mod process_start;
pub(crate) mod shared_ledger;
pub(crate) mod spare_stack;
pub(crate) mod symbols;
pub(crate) mod thread;
pub(crate) mod thread_block;
pub(crate) mod thread_box;
pub(crate) mod thread_exit;
pub(crate) mod tracing_switch;
pub(crate) mod unseen_child;
