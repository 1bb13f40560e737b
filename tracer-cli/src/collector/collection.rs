//! [`Collector`]: a running collection. It claims the trace, starts the
//! threads (the scanner, the readers, the chunk preparer, the NVML
//! sampler and the writer) and, at the end, drains them and finishes the
//! trace.

use super::chunk_preparer::{self, SpoolPlaces};
use super::collection_summary::CollectionSummary;
use super::fold_schedule::FoldSchedule;
use super::host::{host_name, monotonic_ns, realtime_ns};
use super::nvml_sampler::{sample_nvml, NvmlStart};
use super::scanner::{scan, SCAN_INTERVAL};
use super::shared_state::Shared;
use super::sink::{Message, Sink, TraceFailure};
use super::spool_readers::read_spools;
use super::{spool_dir, switch_log};
use crate::collector::spool_tail::SpoolTail;
use crate::system::terminal::say;
use crate::system::trace_file::InPlace;
use crate::wording::{collector_lines, stderr, write_failure_text};
use crossbeam_channel::Sender;
use cudatrace_events::naming;
use cudatrace_trace::{Header, TraceWriter};
use std::collections::{HashMap, HashSet};
use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Messages (batches of events, at most a few thousand each) waiting for
/// the writer thread at most.
const WRITER_BACKLOG: usize = 64;

/// A running collection.
pub struct Collector {
    shared: Arc<Shared>,
    to_writer: Sender<Message>,
    scanner: JoinHandle<()>,
    preparer: JoinHandle<()>,
    nvml_sampler: JoinHandle<()>,
    readers: Vec<JoinHandle<()>>,
    writer: JoinHandle<Result<CollectionSummary, TraceFailure>>,
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
    pub fn finish(self, grace: Duration) -> Result<CollectionSummary, TraceFailure> {
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
