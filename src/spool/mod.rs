//! The spool layer: the file this process's records go to, and, for plain
//! `LD_PRELOAD` runs, the tree's spool folder and collector, and the
//! job's recording switch kept in that folder.

pub mod chunks;
pub mod notice;
pub mod recording_switch;
pub mod replaced_image;
pub mod spool_file;
pub mod tree_root;
pub mod writer;
