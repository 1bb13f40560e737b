//! What the collector's threads share, behind one `Arc`.

use super::chunk_preparer::Gate;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};

/// What the collector's threads share: the folder, what the scanner
/// found, how each process exited, and whether the collection drains.
pub(super) struct Shared {
    pub(super) dir: PathBuf,
    pub(super) keep_spools: bool,
    pub(super) draining: AtomicBool,
    pub(super) scanner_done: AtomicBool,
    /// Passes the scanner has finished over the folder.
    pub(super) scans: AtomicUsize,
    pub(super) active_spools: AtomicUsize,
    pub(super) latest_image: Mutex<HashMap<u32, u32>>,
    pub(super) exits: Mutex<HashMap<u32, (i32, u64)>>,
    pub(super) held: Mutex<HashSet<u32>>,
    /// The preparer's gate of each spool it follows, by process index.
    pub(super) gates: Mutex<HashMap<u32, Arc<Gate>>>,
    pub(super) drop_reported: AtomicBool,
}
