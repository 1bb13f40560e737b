//! The words that several outputs and commands share. The analysis layer
//! returns data (processes that could not record, a footprint's caveats,
//! what became of tensor tracking) and these modules word it; a sentence
//! that one writer alone says still lives in that writer.
//!
//! - [`devices`]: a device's label, the names of the driver's categories of its memory;
//! - [`numbers`]: bytes in binary units, counts with their noun, paths for a shell;
//! - [`processes`]: processes that could not record, children that left no spool;
//! - [`tensors`]: what became of tensor tracking in a process;
//! - [`footprint_notes`]: a context limit, and the caveats on a device's figures;
//! - [`trace_damage`]: a damaged frame, a trace that cannot be read, a block that changed;
//! - [`spool_faults`]: a spool that cannot be read, a spool folder not used;
//! - [`stacks`]: a frame as one line, a stack's lines with framework runs folded.

pub mod devices;
pub mod footprint_notes;
pub mod numbers;
pub mod processes;
pub mod spool_faults;
pub mod stacks;
pub mod tensors;
pub mod trace_damage;

pub use devices::{category_chart_name, category_name, device_label};
pub use footprint_notes::{limit_text, note_text};
pub use numbers::{bytes, count, shell_quoted};
pub use processes::{silent_children_line, unrecorded_line, unrecorded_process_text};
pub use spool_faults::{not_private_text, spool_error_text};
pub use stacks::{frame_text, stack_names, stack_texts};
pub use tensors::tensor_status_line;
pub use trace_damage::{damage_text, not_regular_text, problem_text, unread_block_text, unreadable_trace_text};
