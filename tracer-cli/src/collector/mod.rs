//! The live collector: turns the spools of a traced process tree into one
//! trace while the processes run.
//!
//! - a scanner thread finds new spool files in the run folder and refuses
//!   any that are not ours;
//! - a pool of reader threads follows the spools (a spool is a unit of work
//!   passed between them through a channel);
//! - a preparer thread ([`chunk_preparer`]) makes the next chunk places of
//!   each live spool ready ahead of its writer, off the hooks' path;
//! - one writer thread ([`sink`]) appends to the trace everything the others
//!   send it, through a crossbeam channel, and flushes whenever it runs dry,
//!   so the trace is readable while it is written.

mod chunk_preparer;
mod collection_summary;
mod fold;
pub mod fold_schedule;
mod host;
pub mod liveness;
pub mod notice_file;
mod nvml;
pub mod recover;
mod sink;
pub mod spool_dir;
pub mod spool_tail;
pub mod switch_log;
pub mod trace_name;

pub use collection_summary::Summary;
pub use host::{host_name, monotonic_ns, realtime_ns};

pub use sink::TraceFailure;

use crate::collector::liveness::Liveness;
use crate::collector::notice_file::NoticeTail;
use crate::collector::spool_tail::{check_spool_file, damaged_spool, may_become_readable, SpoolTail};
use crate::system::terminal::say;
use crate::system::trace_file::InPlace;
use crate::wording::collector_lines;
use crate::wording::said;
use crate::wording::stderr;
use crate::wording::write_failure_text;
use chunk_preparer::{Gate, SpoolPlaces};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use cudatrace_events::{naming, Pass};
use cudatrace_trace::{Header, ProcessEnd, TraceWriter};
use fold_schedule::FoldSchedule;
use sink::{Message, Sink};
use std::collections::{HashMap, HashSet};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SCAN_INTERVAL: Duration = Duration::from_millis(20);
/// Messages (batches of events, at most a few thousand each) waiting for
/// the writer thread at most.
const WRITER_BACKLOG: usize = 64;
const IDLE_SPOOL_PAUSE: Duration = Duration::from_millis(5);

impl Summary {
    /// The line `run` and `collect` print when they are done.
    pub fn describe(&self, trace: &Path) -> String {
        collector_lines::wrote_trace(trace, self.processes, self.events, self.folded_events, self.bytes)
    }

    /// Lines about what the trace lacks, naming `spool_dir` when a process
    /// could not store events there.
    pub fn warnings(&self, spool_dir: &Path) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(why) = &self.folds.failure {
            lines.push(collector_lines::could_not_fold(why));
        }
        // Said only when the trace did end up over its cap, or took, with a
        // fold's new file, more than the cap and a tenth.
        let over_cap = self
            .folds
            .cap
            .is_some_and(|cap| self.bytes > cap || self.folds.highest_bytes > cap + cap / 10);
        if let (Some(kept), 0, true) = (self.folds.largest_state, self.folds.failure.iter().count(), over_cap) {
            lines.push(collector_lines::state_larger_than_cap(kept));
        }
        if self.dropped_events > 0 {
            lines.push(collector_lines::events_not_recorded(
                self.dropped_events,
                self.drop_errno,
                spool_dir,
            ));
        }
        if self.lost_events > self.dropped_events {
            lines.push(collector_lines::trace_lacks_events(self.lost_events));
        }
        if self.damaged_spools > 0 {
            lines.push(collector_lines::spools_unreadable(self.damaged_spools));
        }
        if let Some(line) = crate::wording::unrecorded_line(&self.unrecorded) {
            lines.push(said(line));
        }
        lines
    }
}

struct Shared {
    dir: PathBuf,
    keep_spools: bool,
    draining: AtomicBool,
    scanner_done: AtomicBool,
    /// Passes the scanner has finished over the folder.
    scans: AtomicUsize,
    active_spools: AtomicUsize,
    latest_image: Mutex<HashMap<u32, u32>>,
    exits: Mutex<HashMap<u32, (i32, u64)>>,
    held: Mutex<HashSet<u32>>,
    /// The preparer's gate of each spool it follows, by process index.
    gates: Mutex<HashMap<u32, Arc<Gate>>>,
    drop_reported: AtomicBool,
}

/// A running collection.
pub struct Collector {
    shared: Arc<Shared>,
    to_writer: Sender<Message>,
    scanner: JoinHandle<()>,
    preparer: JoinHandle<()>,
    nvml_sampler: JoinHandle<()>,
    readers: Vec<JoinHandle<()>>,
    writer: JoinHandle<Result<Summary, TraceFailure>>,
}

/// The header of a trace of `command` started now.
pub fn header_for(command: Vec<String>) -> Header {
    Header {
        format_version: cudatrace_trace::FORMAT_VERSION,
        tracer_version: env!("CARGO_PKG_VERSION").to_string(),
        host: host_name(),
        start_realtime_ns: realtime_ns(),
        start_monotonic_ns: monotonic_ns(),
        command,
    }
}

/// Names the trace in the spool folder, so that `collect` finds it after a crash.
fn point_to_trace(dir: &Path, trace: &Path) -> Result<(), String> {
    let absolute = std::path::absolute(trace).map_err(|e| stderr::path_failed(trace, e))?;
    let pointer = dir.join(naming::TRACE_POINTER);
    let staging = dir.join(format!("{}.new", naming::TRACE_POINTER));
    std::fs::write(&staging, absolute.as_os_str().as_encoded_bytes())
        .and_then(|()| std::fs::rename(&staging, &pointer))
        .map_err(|e| collector_lines::cannot_do(collector_lines::WRITE, &pointer, &e))
}

impl Collector {
    /// Starts collecting the spools of `dir` into the claimed trace `output`.
    /// With `keep_spools`, no spool space is given back.
    pub fn start(
        dir: &Path,
        output: InPlace,
        header: &Header,
        keep_spools: bool,
        nvml: NvmlStart,
        cap: Option<u64>,
    ) -> Result<Collector, String> {
        if let Err(reason) = point_to_trace(dir, &output.path).and_then(|()| spool_dir::write_cap(dir, cap)) {
            output.abandon();
            return Err(reason);
        }
        output.start().map_err(|failure| write_failure_text(&failure))?;
        for leftover in &output.leftovers {
            say(&collector_lines::removed_leftover(leftover));
        }
        let trace = TraceWriter::new(BufWriter::with_capacity(1 << 20, output.file), header)
            .map_err(|e| collector_lines::cannot_do(collector_lines::WRITE, &output.path, &e))?;
        let shared = Arc::new(Shared {
            dir: dir.to_owned(),
            keep_spools,
            draining: AtomicBool::new(false),
            scanner_done: AtomicBool::new(false),
            scans: AtomicUsize::new(0),
            active_spools: AtomicUsize::new(0),
            latest_image: Mutex::new(HashMap::new()),
            exits: Mutex::new(HashMap::new()),
            held: Mutex::new(HashSet::new()),
            gates: Mutex::new(HashMap::new()),
            drop_reported: AtomicBool::new(false),
        });
        // Bounded: while the writer folds the trace, the readers wait and
        // the events wait in their spools, rather than in our memory.
        let (to_writer, writer_inbox) = crossbeam_channel::bounded(WRITER_BACKLOG);
        let (to_readers, reader_inbox) = crossbeam_channel::unbounded::<SpoolTail>();
        let (to_preparer, preparer_inbox) = crossbeam_channel::unbounded::<SpoolPlaces>();
        let sink = Sink {
            trace,
            path: output.path,
            stacks: Default::default(),
            schedule: FoldSchedule::new(cap),
        };
        let writer = std::thread::Builder::new()
            .name("cudatrace-writer".into())
            .spawn(move || sink.run(writer_inbox))
            .map_err(|e| e.to_string())?;
        let reader_count = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8);
        let readers = (0..reader_count)
            .map(|i| {
                let (shared, to_writer, inbox) = (shared.clone(), to_writer.clone(), reader_inbox.clone());
                let requeue = to_readers.clone();
                std::thread::Builder::new()
                    .name(format!("cudatrace-reader-{i}"))
                    .spawn(move || read_spools(&shared, &to_writer, &inbox, &requeue))
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let preparer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("cudatrace-preparer".into())
                .spawn(move || chunk_preparer::prepare_places(&shared.draining, &preparer_inbox))
                .map_err(|e| e.to_string())?
        };
        let scanner = {
            let (shared, to_writer) = (shared.clone(), to_writer.clone());
            std::thread::Builder::new()
                .name("cudatrace-scanner".into())
                .spawn(move || scan(&shared, &to_writer, &to_readers, &to_preparer))
                .map_err(|e| e.to_string())?
        };
        let nvml_sampler = {
            let (shared, to_writer) = (shared.clone(), to_writer.clone());
            std::thread::Builder::new()
                .name("cudatrace-nvml".into())
                .spawn(move || sample_nvml(&shared, &to_writer, nvml))
                .map_err(|e| e.to_string())?
        };

        Ok(Collector {
            shared,
            to_writer,
            scanner,
            preparer,
            nvml_sampler,
            readers,
            writer,
        })
    }

    /// Keeps the spools of `pid` open until [`Collector::finish`], so that
    /// the exit status learnt from `waitpid` can reach the trace.
    pub fn hold(&self, pid: u32) {
        self.shared.held.lock().unwrap().insert(pid);
    }

    /// Records how `pid` exited, as observed by its parent.
    pub fn record_exit(&self, pid: u32, status: i32, time_ns: u64) {
        self.shared.exits.lock().unwrap().insert(pid, (status, time_ns));
    }

    /// Finishes the trace: waits up to `grace` for traced processes still
    /// running, reads every spool to its end, writes the footer.
    pub fn finish(self, grace: Duration) -> Result<Summary, TraceFailure> {
        self.shared.held.lock().unwrap().clear();
        let deadline = Instant::now() + grace;
        // Let the scanner see spools created just before now, so that the
        // grace covers the processes that wrote them.
        let seen = self.shared.scans.load(Ordering::Acquire);
        while Instant::now() < deadline && self.shared.scans.load(Ordering::Acquire) < seen + 2 {
            std::thread::sleep(Duration::from_millis(2));
        }
        while Instant::now() < deadline && self.shared.active_spools.load(Ordering::Acquire) > 0 {
            std::thread::sleep(SCAN_INTERVAL);
        }
        self.shared.draining.store(true, Ordering::Release);
        // Threads of ours that panicked are a bug; the trace is still finished.
        let _ = self.scanner.join();
        let _ = self.preparer.join();
        let _ = self.nvml_sampler.join();
        for reader in self.readers {
            let _ = reader.join();
        }
        for record in switch_log::records(&self.shared.dir) {
            let _ = self.to_writer.send(Message::Record(record));
        }
        let _ = self.to_writer.send(Message::Finish);
        match self.writer.join() {
            Ok(result) => result,
            Err(_) => Err(TraceFailure {
                message: collector_lines::TRACE_WRITER_FAILED.into(),
            }),
        }
    }
}

/// NVML opened, and read once, before the traced program starts: that
/// reading is the device's usage without it. `Err` says why NVML is unusable.
pub type NvmlStart = Result<(nvml::Nvml, Vec<cudatrace_trace::Record>), String>;

/// Opens NVML and reads every device once; call before starting the program.
pub fn start_nvml() -> NvmlStart {
    let mut nvml = nvml::Nvml::open()?;
    let first = nvml.sample(&HashSet::new());
    Ok((nvml, first))
}

/// Reads NVML until the collection drains, sending what it read to the writer.
fn sample_nvml(shared: &Shared, to_writer: &Sender<Message>, start: NvmlStart) {
    let mut nvml = match start {
        Ok((nvml, first)) => {
            for record in first {
                let _ = to_writer.send(Message::Record(record));
            }
            nvml
        }
        Err(reason) => {
            let _ = to_writer.send(Message::Record(nvml::unavailable(reason)));
            return;
        }
    };
    let mut traced: HashSet<u32> = HashSet::new();
    while !shared.draining.load(Ordering::Acquire) {
        traced.extend(shared.latest_image.lock().unwrap().keys().copied());
        for record in nvml.sample(&traced) {
            let _ = to_writer.send(Message::Record(record));
        }
        std::thread::sleep(nvml::INTERVAL);
    }
    let _ = to_writer.send(Message::Record(nvml.final_status(!traced.is_empty())));
}

fn scan(
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

fn read_spools(shared: &Shared, to_writer: &Sender<Message>, inbox: &Receiver<SpoolTail>, requeue: &Sender<SpoolTail>) {
    loop {
        let mut tail = match inbox.recv_timeout(Duration::from_millis(20)) {
            Ok(tail) => tail,
            Err(RecvTimeoutError::Timeout) => {
                if shared.scanner_done.load(Ordering::Acquire) && shared.active_spools.load(Ordering::Acquire) == 0 {
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if follow(shared, to_writer, &mut tail) {
            shared.active_spools.fetch_sub(1, Ordering::AcqRel);
        } else {
            let _ = requeue.send(tail);
        }
    }
}

/// Reads what is new in one spool; true once the spool is finished.
fn follow(shared: &Shared, to_writer: &Sender<Message>, tail: &mut SpoolTail) -> bool {
    let draining = shared.draining.load(Ordering::Acquire);
    let held = !draining && shared.held.lock().unwrap().contains(&tail.pid);
    let superseded = shared
        .latest_image
        .lock()
        .unwrap()
        .get(&tail.pid)
        .is_some_and(|&latest| latest > tail.image);
    let dead = tail.liveness.is_dead();
    let final_pass = !held && (draining || dead || superseded);
    // Slots read are never written again: live reads stop at the first one
    // not yet whole, and a final read of a dead image has no writer left.
    let settled = !final_pass || dead || superseded;
    let pass = if final_pass { Pass::Final } else { Pass::Live };
    let mut progressed = false;
    let mut failure = None;
    loop {
        let (events, at_end) = match tail.read_batch(pass) {
            Ok(read) => read,
            Err(error) => {
                failure = Some(error);
                break;
            }
        };
        if !events.is_empty() {
            progressed = true;
            let _ = to_writer.send(Message::Events(tail.process, events));
        }
        if settled && !shared.keep_spools {
            if let Some(release) = tail.chunks_to_release() {
                let _ = to_writer.send(Message::Release(release));
            }
        }
        if at_end || !final_pass {
            break;
        }
    }
    let header = tail.header();
    for process in tail.new_child_failures(&header, &shared.dir, final_pass) {
        let _ = to_writer.send(Message::Unrecorded(process));
    }
    if header.dropped_records > 0 && !shared.drop_reported.swap(true, Ordering::Relaxed) {
        say(&collector_lines::losing_events(
            tail.pid,
            &shared.dir,
            header.drop_errno,
        ));
    }
    if failure.is_none() && !final_pass {
        if !progressed {
            std::thread::sleep(IDLE_SPOOL_PAUSE);
        }
        return false;
    }
    let gone = dead || superseded;
    let collected = (gone && failure.is_none() && tail.cursor.damaged == 0).then(|| tail.path.clone());
    if let Some(reason) = failure {
        let error = cudatrace_events::SpoolError::Io(std::io::Error::other(reason));
        let _ = to_writer.send(Message::Damaged(damaged_spool(
            &tail.path, tail.pid, tail.image, &error,
        )));
    }
    tail.finish(&header);
    // The places made ready ahead of a writer that is gone were never used:
    // the file goes back to the chunks it wrote, once no preparation runs.
    let trim = || {
        if gone {
            tail.trim_unused_places(&header);
        }
    };
    let gate = shared.gates.lock().unwrap().remove(&tail.process);
    match gate {
        Some(gate) => gate.close_and(trim),
        None => trim(),
    }
    let end = end_of(shared, tail, &header, gone, superseded);
    let _ = to_writer.send(Message::End(end, collected));
    true
}

/// Whether a later image of `tail`'s process has a spool: one the scanner
/// took already, or one it has yet to find (its file is there before the
/// process ends, and removed only once collected, after the scanner took
/// it).
fn later_image_recorded(shared: &Shared, tail: &SpoolTail) -> bool {
    let taken = shared
        .latest_image
        .lock()
        .unwrap()
        .get(&tail.pid)
        .is_some_and(|&latest| latest > tail.image);
    taken
        || (tail.image + 1..=tail.image + 4)
            .any(|image| shared.dir.join(naming::spool_file_name(tail.pid, image)).exists())
}

/// How a process image ended: the status its parent saw if cudatrace is
/// that parent, else what it recorded when it called `exit`.
fn end_of(
    shared: &Shared,
    tail: &SpoolTail,
    header: &cudatrace_events::SpoolHeaderInfo,
    gone: bool,
    superseded: bool,
) -> ProcessEnd {
    // An image that was calling exec and never exited was replaced: the
    // status its pid ended with belongs to a later image.
    let replaced = header.process.exec_started && header.process.exit.is_none();
    let observed = shared
        .exits
        .lock()
        .unwrap()
        .get(&tail.pid)
        .copied()
        .filter(|_| !superseded && !replaced);
    let (exit_status, exit_time_ns) = match (observed, header.process.exit) {
        (Some((status, time)), _) => (Some(status), Some(time)),
        (None, Some((status, time))) => (Some(status), Some(time)),
        (None, None) if gone => (None, Some(monotonic_ns())),
        (None, None) => (None, None),
    };
    let mut end = tail.end_record(header, exit_status, exit_time_ns, !gone);
    if replaced {
        end.exec_into.clone_from(&header.process.exec_into);
        // The last traced image of its process (no later image recorded):
        // the status the process ended with, where run saw it, is told
        // with it, as the process's and not the image's.
        if !superseded && !later_image_recorded(shared, tail) {
            end.process_exit_status = shared.exits.lock().unwrap().get(&tail.pid).map(|&(status, _)| status);
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_too_large_is_said_whenever_the_promised_bound_was_passed() {
        let cap = 64 << 10;
        let summary = |bytes: u64, highest_bytes: u64| Summary {
            bytes,
            folds: collection_summary::Folds {
                cap: Some(cap),
                largest_state: Some(30 << 10),
                highest_bytes,
                ..Default::default()
            },
            ..Default::default()
        };
        let said = collector_lines::state_larger_than_cap(30 << 10);
        let spools = Path::new("/spools");
        // Over the cap at the end, or over the cap and a tenth on the way.
        assert_eq!(summary(cap + 1, cap).warnings(spools), std::slice::from_ref(&said));
        assert_eq!(summary(cap, cap + cap / 10 + 1).warnings(spools), [said]);
        // Within both: nothing to say.
        assert!(summary(cap, cap + cap / 10).warnings(spools).is_empty());
    }
}
