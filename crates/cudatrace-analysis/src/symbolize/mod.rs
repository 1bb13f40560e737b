//! Turning the stack nodes of a trace into source frames, once a run is
//! collected and while its binaries are still on this machine.
//!
//! Native addresses are symbolized with blazesym from the ELF files the
//! module map names (DWARF where present: function, file, line and
//! inlined frames; the symbol table otherwise; `module+0xoffset` without
//! either). Python frames come from the code-object descriptions the
//! process copied, with the line worked out from the line table. Each
//! distinct frame is symbolized once, however many events share it. The
//! results go into the trace as `String` and `Symbols` records, beside the
//! raw addresses and build ids, so a trace copied elsewhere still reads.

mod byte_names;
mod native_symbols;
pub mod python_lines;
mod stack_catalog;
mod text_frames;

pub use stack_catalog::StackCatalog;
pub use text_frames::PYTHON_MODULE;
