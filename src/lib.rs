//! `libcudatrace.so`: loaded into a program with `LD_PRELOAD`, it records
//! every CUDA memory allocation and free the program makes, through every
//! door a call can take into the driver.
//!
//! The library is built in layers; each uses only the layers below it:
//!
//! | layer | job |
//! | --- | --- |
//! | [`lifecycle`] | load, fork and exit handling for every layer below |
//! | [`hooks`] | the doors (`dlsym`, `dlopen`, `cuGetProcAddress`) and the hooked entry points |
//! | [`record`] | turning a hooked call into records: the live table, devices, captures, readings |
//! | [`stacks`] | call stacks: unwinding, Python frames, the module map, the node table |
//! | [`spool`] | the spool file a process's records go to, and the tree's collector |
//! | [`system`] | real CUDA functions, the FFI, the clock, threads, lazily mapped tables |
//!
//! The hooks do the minimum: one fixed-size record per event into a shared
//! memory spool. Everything else (reading, accounting, reports) happens
//! outside the traced process, in the `cudatrace` CLI.
//!
//! Nothing here is a Rust API: the program sees only the exported C entry
//! points (`src/exports.map` says which), and the tests and benches load
//! the built `.so` rather than link to the crate. So every module is
//! private and every item at most `pub(crate)`, which lets the compiler
//! report code nothing calls. The hook entry points keep a plain `pub`
//! beside their `#[no_mangle]` (which is what exports them), to mark what
//! the program calls.

#![warn(missing_docs)]

mod hooks;
mod lifecycle;
mod record;
mod spool;
mod stacks;
mod system;
