//! What the analysis stands on: a progress bar for a pass over a large
//! trace, refusing, before anything opens it, an input that is not a
//! regular file, and how many threads a pass may use.

pub mod cores;
pub mod input_path;
pub mod progress;
