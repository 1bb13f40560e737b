//! The spool layer: the file this process's records go to, and, for plain
//! `LD_PRELOAD` runs, the tree's spool folder and collector.

pub mod chunks;
pub mod notice;
pub mod spool_file;
pub mod tree_root;
pub mod writer;
