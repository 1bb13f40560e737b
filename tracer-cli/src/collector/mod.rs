//! The collector: turns the spools of a traced process tree into one trace,
//! while the processes run.
//!
//! - a scanner thread finds new spool files in the run folder and refuses
//!   any that are not ours;
//! - a pool of reader threads follows the spools (a spool is a unit of work
//!   passed between them through a channel);
//! - one writer thread appends to the trace everything the others send it,
//!   through a crossbeam channel, and flushes whenever it runs dry, so the
//!   trace is readable while it is written.

mod liveness;
mod spool_tail;

pub use liveness::Liveness;
use spool_tail::{Release, SpoolTail};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use cudatrace_events::{naming, Event};
use cudatrace_trace::{Footer, Header, ProcessEnd, ProcessStart, Refusal, TraceWriter};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SCAN_INTERVAL: Duration = Duration::from_millis(20);
const IDLE_SPOOL_PAUSE: Duration = Duration::from_millis(5);

/// What the writer thread is told.
enum Message {
    Process(ProcessStart),
    Events(u32, Vec<Event>),
    /// Spool chunks whose events were all sent before this message.
    Release(Release),
    End(ProcessEnd),
    Refused(Refusal),
    Finish,
}

/// What a finished collection wrote.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Process images in the trace.
    pub processes: u64,
    /// Events in the trace.
    pub events: u64,
    /// Events the processes could not record.
    pub dropped_events: u64,
    /// Spools refused.
    pub refused: u64,
    /// Bytes of the trace file.
    pub bytes: u64,
}

impl Summary {
    /// The line `run` and `collect` print when they are done.
    pub fn describe(&self, trace: &Path) -> String {
        format!(
            "cudatrace: wrote {} ({} processes, {} events, {} bytes)",
            trace.display(),
            self.processes,
            self.events,
            self.bytes
        )
    }
}

struct Shared {
    dir: PathBuf,
    draining: AtomicBool,
    scanner_done: AtomicBool,
    active_spools: AtomicUsize,
    latest_image: Mutex<HashMap<u32, u32>>,
    exits: Mutex<HashMap<u32, (i32, u64)>>,
    held: Mutex<HashSet<u32>>,
    reader_errors: Mutex<Vec<String>>,
}

/// A running collection.
pub struct Collector {
    shared: Arc<Shared>,
    to_writer: Sender<Message>,
    scanner: JoinHandle<()>,
    readers: Vec<JoinHandle<()>>,
    writer: JoinHandle<Result<Summary, String>>,
}

/// `CLOCK_MONOTONIC` now, the clock of event times.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid clock and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_REALTIME` now, in ns since the epoch.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// This machine's host name.
pub fn host_name() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most buffer.len() bytes.
    if unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } != 0 {
        return String::new();
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
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

impl Collector {
    /// Starts collecting the spools of `dir` into a new trace at `trace_path`.
    pub fn start(dir: &Path, trace_path: &Path, header: &Header) -> Result<Collector, String> {
        let file = File::create(trace_path).map_err(|e| format!("cannot create {}: {e}", trace_path.display()))?;
        let trace = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), header)
            .map_err(|e| format!("cannot write {}: {e}", trace_path.display()))?;
        let shared = Arc::new(Shared {
            dir: dir.to_owned(),
            draining: AtomicBool::new(false),
            scanner_done: AtomicBool::new(false),
            active_spools: AtomicUsize::new(0),
            latest_image: Mutex::new(HashMap::new()),
            exits: Mutex::new(HashMap::new()),
            held: Mutex::new(HashSet::new()),
            reader_errors: Mutex::new(Vec::new()),
        });
        let (to_writer, writer_inbox) = crossbeam_channel::unbounded();
        let (to_readers, reader_inbox) = crossbeam_channel::unbounded::<SpoolTail>();
        let writer = std::thread::Builder::new()
            .name("cudatrace-writer".into())
            .spawn(move || write_trace(trace, writer_inbox))
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
        let scanner = {
            let (shared, to_writer) = (shared.clone(), to_writer.clone());
            std::thread::Builder::new()
                .name("cudatrace-scanner".into())
                .spawn(move || scan(&shared, &to_writer, &to_readers))
                .map_err(|e| e.to_string())?
        };
        Ok(Collector {
            shared,
            to_writer,
            scanner,
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
    pub fn finish(self, grace: Duration) -> Result<Summary, String> {
        self.shared.held.lock().unwrap().clear();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.shared.active_spools.load(Ordering::Acquire) > 0 {
            std::thread::sleep(SCAN_INTERVAL);
        }
        self.shared.draining.store(true, Ordering::Release);
        self.scanner.join().map_err(|_| "the spool scanner panicked")?;
        for reader in self.readers {
            reader.join().map_err(|_| "a spool reader panicked")?;
        }
        self.to_writer
            .send(Message::Finish)
            .map_err(|_| "the trace writer stopped early")?;
        let summary = self.writer.join().map_err(|_| "the trace writer panicked")??;
        if let Some(error) = self.shared.reader_errors.lock().unwrap().first() {
            return Err(error.clone());
        }
        Ok(summary)
    }
}

fn scan(shared: &Shared, to_writer: &Sender<Message>, to_readers: &Sender<SpoolTail>) {
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut next_process = 0u32;
    // SAFETY: no preconditions.
    let uid = unsafe { libc::geteuid() };
    loop {
        let last_pass = shared.draining.load(Ordering::Acquire);
        let mut found: Vec<(u32, u32, PathBuf)> = std::fs::read_dir(&shared.dir)
            .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|path| !seen.contains(path))
            .filter_map(|path| naming::parse_spool_file_name(&path).map(|(pid, image)| (pid, image, path)))
            .collect();
        found.sort();
        for (pid, image, path) in found {
            let refuse = |reason: String, owner: u32| {
                Message::Refused(Refusal {
                    path: path.display().to_string(),
                    uid: owner,
                    reason,
                })
            };
            let metadata = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(_) => continue,
            };
            if !metadata.file_type().is_file() || metadata.uid() != uid {
                let reason = if metadata.file_type().is_file() {
                    "owned by another user"
                } else {
                    "not a regular file"
                };
                let _ = to_writer.send(refuse(reason.into(), metadata.uid()));
                seen.insert(path);
                continue;
            }
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| e.to_string())
                .and_then(|file| SpoolTail::open(&path, file, next_process, image));
            match opened {
                Ok(Some((tail, info))) => {
                    seen.insert(path);
                    let start = ProcessStart {
                        process: next_process,
                        pid,
                        ppid: info.process.ppid,
                        image,
                        argv: info.process.argv,
                        start_monotonic_ns: info.process.start_monotonic_ns,
                        start_realtime_ns: info.process.start_realtime_ns,
                    };
                    next_process += 1;
                    let mut latest = shared.latest_image.lock().unwrap();
                    let entry = latest.entry(pid).or_insert(image);
                    *entry = (*entry).max(image);
                    drop(latest);
                    shared.active_spools.fetch_add(1, Ordering::AcqRel);
                    let _ = to_writer.send(Message::Process(start));
                    let _ = to_readers.send(tail);
                }
                Ok(None) if !last_pass => {} // header not written yet: look again later
                Ok(None) => {
                    let _ = to_writer.send(refuse("its process died before writing the header".into(), uid));
                    seen.insert(path);
                }
                Err(reason) => {
                    let _ = to_writer.send(refuse(reason, uid));
                    seen.insert(path);
                }
            }
        }
        if last_pass {
            shared.scanner_done.store(true, Ordering::Release);
            return;
        }
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
        match follow(shared, to_writer, &mut tail) {
            Ok(true) => {
                shared.active_spools.fetch_sub(1, Ordering::AcqRel);
            }
            Ok(false) => {
                let _ = requeue.send(tail);
            }
            Err(error) => {
                shared.reader_errors.lock().unwrap().push(error);
                shared.active_spools.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// Reads what is new in one spool; true once the spool is finished.
fn follow(shared: &Shared, to_writer: &Sender<Message>, tail: &mut SpoolTail) -> Result<bool, String> {
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
    let mut progressed = false;
    loop {
        let (events, at_end) = tail.read_batch(final_pass)?;
        if !events.is_empty() {
            progressed = true;
            let _ = to_writer.send(Message::Events(tail.process, events));
        }
        if let Some(release) = tail.chunks_to_release() {
            let _ = to_writer.send(Message::Release(release));
        }
        if at_end || !final_pass {
            break;
        }
    }
    if !final_pass {
        if !progressed {
            std::thread::sleep(IDLE_SPOOL_PAUSE);
        }
        return Ok(false);
    }
    let header = tail.header()?;
    let observed = shared
        .exits
        .lock()
        .unwrap()
        .get(&tail.pid)
        .copied()
        .filter(|_| !superseded);
    let (exit_status, exit_time_ns) = match (observed, header.process.exit) {
        (Some((status, time)), _) => (Some(status), Some(time)),
        (None, Some((status, time))) => (Some(status), Some(time)),
        (None, None) if dead || superseded => (None, Some(monotonic_ns())),
        (None, None) => (None, None),
    };
    let _ = to_writer.send(Message::End(ProcessEnd {
        process: tail.process,
        exit_status,
        exit_time_ns,
        still_running: !(dead || superseded),
        unfinished_records: tail.unfinished,
        unknown_frees: header.unknown_frees,
        registry_overflows: header.registry_overflows,
        dropped_records: header.dropped_records,
    }));
    Ok(true)
}

fn write_trace(mut trace: TraceWriter<BufWriter<File>>, inbox: Receiver<Message>) -> Result<Summary, String> {
    let mut summary = Summary::default();
    let io = |e: std::io::Error| format!("cannot write the trace: {e}");
    loop {
        let message = inbox
            .recv()
            .map_err(|_| "the collector stopped without finishing the trace")?;
        match message {
            Message::Process(start) => {
                summary.processes += 1;
                trace.process_start(&start).map_err(io)?;
            }
            Message::Events(process, events) => trace.events(process, &events).map_err(io)?,
            Message::Release(release) => {
                // Only once the events are in the trace file may the spool let them go.
                trace.flush().map_err(io)?;
                release.apply();
            }
            Message::End(end) => {
                summary.dropped_events += end.dropped_records;
                trace.process_end(&end).map_err(io)?;
            }
            Message::Refused(refusal) => {
                summary.refused += 1;
                trace.refused(&refusal).map_err(io)?;
            }
            Message::Finish => {
                summary.events = trace.events_written();
                let footer = Footer {
                    processes: summary.processes,
                    events: summary.events,
                    dropped_events: summary.dropped_events,
                    refused_spools: summary.refused,
                    end_realtime_ns: realtime_ns(),
                };
                trace.footer(&footer).map_err(io)?;
                summary.bytes = trace.bytes_written();
                trace
                    .into_inner()
                    .into_inner()
                    .map_err(|e| io(e.into_error()))?
                    .sync_all()
                    .map_err(io)?;
                return Ok(summary);
            }
        }
        if inbox.is_empty() {
            trace.flush().map_err(io)?;
        }
    }
}
