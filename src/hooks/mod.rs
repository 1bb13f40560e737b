//! The hooks layer: the doors a call can take into CUDA and the entry
//! points we export. Each hook forwards the call unchanged and reports what
//! it saw to the record layer below.
//!
//! - exported symbols ([`driver`], [`runtime`], [`context`], [`streams`],
//!   [`graphs`], [`launch`]), for programs linked against `libcuda` or
//!   `libcudart`;
//! - `dlsym` ([`dlsym_door`]), for programs that `dlopen` the driver, and
//!   `dlclose` ([`dlclose_door`]), for those that unload it and load it
//!   again;
//! - `cuGetProcAddress` ([`proc_address`]), through which the runtime and
//!   PyTorch obtain driver entry points;
//! - the `exec` family ([`exec`]), so that an image that replaced itself is
//!   not taken for one that exited;
//! - `fork` ([`fork`]), so that a child that leaves no spool is still known;
//! - the device's memory queries ([`limit_queries`]), answered for the
//!   memory limit when there is one;
//! - PyTorch's caching allocator ([`torch_allocator`]), through a trace
//!   tracker attached from inside the process: one record per tensor.

pub mod array_bytes;
pub mod context;
pub mod dlclose_door;
pub mod dlopen_door;
pub mod dlsym_door;
pub mod driver;
pub mod exec;
pub mod fork;
pub mod graphs;
pub mod launch;
pub mod limit_queries;
pub mod proc_address;
pub mod runtime;
pub mod streams;
mod support;
pub mod table;
pub mod torch_allocator;
