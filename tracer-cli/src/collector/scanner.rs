//! The scanner thread: finds new spool files in the run folder, refuses
//! any that are not ours, and hands each to the readers (and its chunk
//! places to the preparer).

use super::chunk_preparer::{Gate, SpoolPlaces};
use super::shared_state::Shared;
use super::sink::Message;
use crate::collector::liveness::Liveness;
use crate::collector::notice_file::NoticeTail;
use crate::collector::spool_tail::{check_spool_file, damaged_spool, may_become_readable, SpoolTail};
use crossbeam_channel::Sender;
use cudatrace_events::naming;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long the scanner waits between two looks at the folder.
pub(super) const SCAN_INTERVAL: Duration = Duration::from_millis(20);

/// Looks at the folder every [`SCAN_INTERVAL`] until the collection drains.
pub(super) fn scan(
    shared: &Shared,
    to_writer: &Sender<Message>,
    to_readers: &Sender<SpoolTail>,
    to_preparer: &Sender<SpoolPlaces>,
) {
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut next_process = 0u32;
    let mut notices = NoticeTail::new(&shared.dir);
    loop {
        let last_pass = shared.draining.load(Ordering::Acquire);
        for process in notices.read_new() {
            let _ = to_writer.send(Message::Unrecorded(process));
        }
        let mut found: Vec<(u32, u32, PathBuf)> = std::fs::read_dir(&shared.dir)
            .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|path| !seen.contains(path))
            .filter_map(|path| naming::parse_spool_file_name(&path).map(|(pid, image)| (pid, image, path)))
            .collect();
        found.sort();
        // The latest image of each pid with a spool, in this folder now.
        let mut latest_spool: HashMap<u32, u32> = shared.latest_image.lock().unwrap().clone();
        for &(pid, image, _) in &found {
            let entry = latest_spool.entry(pid).or_insert(image);
            *entry = (*entry).max(image);
        }
        for (pid, image, path) in found {
            match check_spool_file(&path) {
                Ok(()) => {}
                Err(None) => continue,
                Err(Some(refusal)) => {
                    let _ = to_writer.send(Message::Refused(refusal));
                    seen.insert(path);
                    continue;
                }
            }
            // Whether its process was gone before the header is read: a
            // process that ends between the read and the look would have
            // its header, unfinished when read, taken as never finished.
            let gone_before = Liveness::watch(pid).is_dead();
            match SpoolTail::open(&path, next_process, image, true) {
                Ok((tail, header)) => {
                    seen.insert(path);
                    next_process += 1;
                    let mut latest = shared.latest_image.lock().unwrap();
                    let entry = latest.entry(pid).or_insert(image);
                    *entry = (*entry).max(image);
                    drop(latest);
                    shared.active_spools.fetch_add(1, Ordering::AcqRel);
                    let _ = to_writer.send(Message::Process(tail.start_record(&header)));
                    if let Some(file) = tail.writable_file() {
                        let gate = Arc::new(Gate::default());
                        shared.gates.lock().unwrap().insert(tail.process, gate.clone());
                        let _ = to_preparer.send(SpoolPlaces::new(gate, file, header.ring_chunks));
                    }
                    let _ = to_readers.send(tail);
                }
                // Its process exec'd while creating it (a later image of the
                // pid has a spool): it never held a record, and is not ours
                // to call damaged.
                Err(error) if may_become_readable(&error) && latest_spool.get(&pid).is_some_and(|&l| l > image) => {
                    seen.insert(path);
                }
                // The header is still being written: look again later.
                Err(error) if may_become_readable(&error) && !last_pass && !gone_before => {}
                Err(error) => {
                    let _ = to_writer.send(Message::Damaged(damaged_spool(&path, pid, image, &error)));
                    seen.insert(path);
                }
            }
        }
        if last_pass {
            shared.scanner_done.store(true, Ordering::Release);
            return;
        }
        shared.scans.fetch_add(1, Ordering::AcqRel);
        std::thread::sleep(SCAN_INTERVAL);
    }
}
