//! The event format shared by the code that runs inside a traced process
//! (`libcudatrace.so`) and the code that runs outside it (the `cudatrace` CLI).
//!
//! Inside the process, every hooked CUDA call that changes memory writes one
//! fixed-layout [`RawRecord`] into a per-process *spool file* mapped with
//! `MAP_SHARED`; the kernel keeps those pages when the process dies, so every
//! record whose hook has returned survives a crash. Outside the process,
//! [`SpoolFile`] and [`SpoolCursor`] turn a spool file back into [`Event`]s,
//! following the publication protocol described in [`layout`].
//!
//! Nothing in this crate allocates or locks on the writer side: the hook only
//! needs [`RawRecord`], [`SpoolHeader`] and the code enums.

#![warn(missing_docs)]

#[macro_use]
pub mod codes;
pub mod cursor;
pub mod event_args;
pub mod layout;
pub mod measures;
pub mod naming;
pub mod notices;
pub mod recording_switch;
pub mod settings;
pub mod sizes;
pub mod slots;
pub mod spool;
pub mod spool_file;
pub mod stacks;
pub mod tensors;

pub use codes::{Api, Kind, Op};
pub use cursor::{Pass, SlotSource, SpoolCursor};
pub use layout::{ChildFailure, ProcessIdentity, RawRecord, SpoolHeader, SPOOL_MAGIC, SPOOL_VERSION};
pub use slots::{classify, Event, Incomplete, ProcessInfo, ProcessPlace, SlotState, SpoolError, SpoolHeaderInfo};
pub use spool::unfinished;
#[cfg(feature = "testing")]
pub use spool::{Spool, SpoolReader};
pub use spool_file::SpoolFile;
