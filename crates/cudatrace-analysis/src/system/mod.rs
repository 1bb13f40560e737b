//! What the analysis stands on: a progress bar for a pass over a large
//! trace, and refusing, before anything opens it, an input that is not a
//! regular file.

pub mod input_path;
pub mod progress;
