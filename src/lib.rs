//! `libcudatrace.so`: loaded into a program with `LD_PRELOAD`, it records
//! every CUDA memory allocation and free the program makes, through every
//! door a call can take into the driver:
//!
//! - exported symbols ([`driver_hooks`], [`runtime_hooks`]), for programs
//!   linked against `libcuda`/`libcudart`;
//! - `dlsym` ([`dlsym_door`]), for programs that `dlopen` the driver;
//! - `cuGetProcAddress` ([`proc_address`]), through which the runtime and
//!   PyTorch obtain driver entry points.
//!
//! The hooks do the minimum: one fixed-size record per event into a shared
//! memory spool ([`spool_writer`]). Everything else (reading, accounting,
//! reports) happens outside the traced process, in the `cudatrace` CLI.

pub mod array_bytes;
pub mod call_stack;
pub mod context_hooks;
pub mod cuda_ffi;
pub mod device_probe;
pub mod dlopen_door;
pub mod dlsym_door;
pub mod driver_hooks;
mod hook_support;
pub mod launch_hooks;
pub mod live_table;
pub mod module_map;
pub mod native_unwind;
pub mod proc_address;
pub mod process_state;
pub mod python_frames;
pub mod recorder;
pub mod runtime_hooks;
pub mod spool_chunks;
pub mod spool_writer;
pub mod stack_table;
pub mod symbols;
pub mod tree_root;
