//! The bottom layer: what every other layer may use, and which uses nothing
//! of ours. The real CUDA functions and their C types, the clock, the
//! calling thread and its block of hot state, the switch that turns recording off, the loader's
//! `dlopen` count, the lazily mapped tables and the per-thread ones made on
//! first use, and spare stacks for deep work on a nearly full stack.

pub mod address_budget;
pub mod clock;
pub mod cuda_ffi;
pub mod cxx_function;
pub mod elf_symbols;
pub mod environment;
pub mod file_space;
pub mod hot_statics;
pub mod lazy_mapping;
pub mod loader;
pub mod no_cancel;
pub mod prefetch;
pub mod process_mark;
pub mod process_place;
pub mod process_start;
pub mod shared_ledger;
pub mod spare_stack;
pub mod symbols;
pub mod thread;
pub mod thread_block;
pub mod thread_box;
pub mod thread_exit;
pub mod tracing_switch;
pub mod unseen_child;
