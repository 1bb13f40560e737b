//! The spool layer: the file this process's records go to, and, for plain
//! `LD_PRELOAD` runs, the tree's spool folder and collector, and the
//! job's recording switch kept in that folder.

pub(crate) mod chunks;
pub(crate) mod notice;
pub(crate) mod recording_switch;
pub(crate) mod replaced_image;
pub(crate) mod spool_descriptor;
pub(crate) mod tree_root;
pub(crate) mod writer;
