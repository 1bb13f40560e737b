//! The hooks layer: the doors a call can take into CUDA and the entry
//! points we export. Each hook forwards the call unchanged and reports what
//! it saw to the record layer below.
//!
//! - exported symbols ([`driver`], [`driver_frees`], [`address_ranges`],
//!   [`runtime`], [`context`], [`streams`], [`graphs`], [`launch`]), for
//!   programs linked against `libcuda` or `libcudart`;
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

pub(crate) mod address_ranges;
pub(crate) mod array_bytes;
pub(crate) mod context;
pub(crate) mod dlclose_door;
pub(crate) mod dlopen_door;
pub(crate) mod dlsym_door;
pub(crate) mod driver;
pub(crate) mod driver_frees;
pub(crate) mod exec;
pub(crate) mod fork;
pub(crate) mod graphs;
pub(crate) mod launch;
pub(crate) mod limit_queries;
pub(crate) mod proc_address;
pub(crate) mod runtime;
pub(crate) mod streams;
mod support;
pub(crate) mod table;
pub(crate) mod torch_allocator;
