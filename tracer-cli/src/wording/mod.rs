//! Every sentence the command line says that is not part of one output's
//! own format: what each command and the collector say on stderr, why they
//! fail, and the words several outputs share. What stands below (the
//! `system` layer, and the analysis, events and trace crates) returns data
//! (enums, codes, figures); the collector, the outputs and the commands,
//! above, say what these modules word. A sentence of one output's format (the report's
//! headings, the page's captions) lives in that output's writer, beside
//! its layout, under `outputs/`.
//!
//! Names that identify a place are data, not sentences: a call site's
//! headline (`model.py:31 forward`, `autograd backward pass`), an owner
//! (`torch (torch/lib/libc10_cuda.so)`) or a placeholder frame
//! (`[stack truncated at the depth limit]`) is made in analysis and
//! symbolization, because `diff` matches runs by them.
//!
//! Shared by outputs:
//! - [`numbers`]: bytes in binary units, counts with their noun, paths for a shell;
//! - [`devices`]: a device's label, the names of the driver's categories of its memory;
//! - [`stacks`]: a frame as one line, a stack's lines with framework runs folded;
//! - [`processes`]: processes that could not record, children that left no spool;
//! - [`tensors`]: what became of tensor tracking in a process;
//! - [`footprint_notes`]: a context limit, and the caveats on a device's figures;
//! - [`limit_lines`]: the memory limit's verdict;
//! - [`oom_lines`]: out-of-memory failures and the limit's refusals.
//!
//! Said on stderr, or why a command fails:
//! - [`stderr`]: the shape of a line on stderr, a rejected command line;
//! - [`run_lines`]: what `run` says;
//! - [`collect_lines`]: what `collect` says;
//! - [`collector_lines`]: what the collector says, on stderr and in the trace;
//! - [`switch_lines`]: what `pause` and `resume` say;
//! - [`output_lines`]: what the commands that write an output say;
//! - [`trace_damage`]: a damaged frame, a trace that cannot be read, a block that changed;
//! - [`spool_faults`]: a spool that cannot be read, a spool folder not used;
//! - [`write_failures`]: why an output, a trace or stdout could not be written.

pub mod collect_lines;
pub mod collector_lines;
pub mod devices;
pub mod fold_lines;
pub mod footprint_notes;
pub mod image_end;
pub mod limit_lines;
pub mod merge_lines;
pub mod numbers;
pub mod oom_lines;
pub mod output_lines;
pub mod processes;
pub mod rank_lines;
pub mod run_lines;
pub mod spool_faults;
pub mod stacks;
pub mod stderr;
pub mod switch_lines;
pub mod tensors;
pub mod trace_damage;
pub mod write_failures;

pub use devices::{category_chart_name, category_name, device_label};
pub use footprint_notes::{limit_text, note_text};
pub use image_end::image_end_text;
pub use numbers::{bytes, count, duration, signed_bytes};
pub use processes::{silent_children_line, unrecorded_line, unrecorded_process_text};
pub use spool_faults::{not_private_text, spool_error_text};
pub use stacks::{frame_function_text, frame_text, stack_names, stack_texts};
pub use stderr::said;
pub use tensors::{oom_state_not_kept, tensor_status_line, torch_bytes_text};
pub use trace_damage::{damage_text, not_regular_text, problem_text, unread_block_text, unreadable_trace_text};
pub use write_failures::write_failure_text;
