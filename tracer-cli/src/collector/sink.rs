//! The collector's writer thread: appends everything the readers send to
//! the trace, and gives spool space back only once the events it held are
//! durably in the trace, which the spool folder names, so that recovery
//! after a crash can always find every event.

use super::collection_summary::CollectionSummary;
use super::fold_schedule::FoldSchedule;
use super::host::realtime_ns;
use crate::collector::spool_tail::Release;
use crate::wording::collector_lines;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use cudatrace_analysis::StackCatalog;
use cudatrace_events::Event;
use cudatrace_trace::{
    DamagedSpool, Footer, ProcessEnd, ProcessStart, Record, Refusal, TraceWriter, UnrecordedProcess,
};
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Spool space is given back at most this often, each time after one
/// `fdatasync` of the trace.
const SYNC_INTERVAL: Duration = Duration::from_millis(250);
/// ... or as soon as this many chunks (1 MiB each) wait to be given back.
const SYNC_CHUNKS: usize = 256;

/// What the writer thread is told.
pub enum Message {
    Process(ProcessStart),
    Events(u32, Vec<Event>),
    /// Spool chunks whose events were all sent before this message.
    Release(Release),
    /// A process image ended; its spool, if every record of it is now sent.
    End(ProcessEnd, Option<PathBuf>),
    Refused(Refusal),
    Damaged(DamagedSpool),
    /// A process that said it could not record.
    Unrecorded(UnrecordedProcess),
    /// A record written as it is (NVML's readings).
    Record(Record),
    Finish,
}

/// How the trace could not be written.
pub struct TraceFailure {
    /// One line: what failed, where, and the `errno`.
    pub message: String,
}

pub struct Sink {
    pub trace: TraceWriter<BufWriter<File>>,
    pub path: PathBuf,
    /// Stack nodes seen, symbolized when the run is over.
    pub stacks: StackCatalog,
    /// The trace's size cap (`run --max-size`) and the folds done.
    pub schedule: FoldSchedule,
}

impl Sink {
    /// Runs until told to finish, or until the trace cannot be written.
    pub fn run(mut self, inbox: Receiver<Message>) -> Result<CollectionSummary, TraceFailure> {
        let mut summary = CollectionSummary::default();
        let mut pending: Vec<Release> = Vec::new();
        let mut last_sync = Instant::now();
        loop {
            let message = match inbox.recv_timeout(SYNC_INTERVAL) {
                Ok(message) => Some(message),
                // Quiet: give back what waits, if anything does.
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.fail(
                        collector_lines::COLLECT_INTO,
                        std::io::Error::other(collector_lines::COLLECTOR_STOPPED_EARLY),
                    ));
                }
            };
            // Each record makes its room first: the trace folds before it
            // would pass its fold size, not after (events, piece by piece).
            let written = match message {
                None => Ok(()),
                Some(Message::Process(start)) => {
                    summary.processes += 1;
                    self.make_room_for(&Record::Process(start.clone()));
                    self.trace.process_start(&start)
                }
                Some(Message::Events(process, events)) => {
                    self.stacks.observe(process, &events);
                    self.schedule
                        .write_events(&mut self.trace, &self.path, process, &events)
                }
                Some(Message::Release(release)) => {
                    pending.push(release);
                    Ok(())
                }
                Some(Message::End(end, collected)) => {
                    summary.collected.extend(collected);
                    summary.dropped_events += end.dropped_records;
                    summary.still_running += u64::from(end.still_running);
                    if let Some(errno) = end.drop_errno {
                        summary.drop_errno.get_or_insert(errno);
                    }
                    self.make_room_for(&Record::ProcessEnd(end.clone()));
                    self.trace.process_end(&end)
                }
                Some(Message::Refused(refusal)) => {
                    summary.refused += 1;
                    self.make_room_for(&Record::Refused(refusal.clone()));
                    self.trace.refused(&refusal)
                }
                Some(Message::Damaged(damage)) => {
                    summary.damaged_spools += 1;
                    self.make_room_for(&Record::DamagedSpool(damage.clone()));
                    self.trace.damaged_spool(&damage)
                }
                Some(Message::Unrecorded(process)) => {
                    let record = Record::Unrecorded(process.clone());
                    self.make_room_for(&record);
                    let written = self.trace.record(&record);
                    summary.unrecorded.push(process);
                    written
                }
                Some(Message::Record(record)) => {
                    self.make_room_for(&record);
                    self.trace.record(&record)
                }
                Some(Message::Finish) => return self.finish(summary),
            };
            if let Err(error) = written {
                return Err(self.fail(collector_lines::WRITE_THE_TRACE, error));
            }
            self.schedule.fold_if_due(&mut self.trace, &self.path, 0);
            // Readers may follow the trace: flush whenever there is a pause.
            if inbox.is_empty() {
                if let Err(error) = self.trace.flush() {
                    return Err(self.fail(collector_lines::WRITE_THE_TRACE, error));
                }
            }
            // Give space back regularly, under load too.
            let due = pending.len() >= SYNC_CHUNKS || last_sync.elapsed() >= SYNC_INTERVAL;
            if !pending.is_empty() && due {
                let synced = self
                    .trace
                    .flush()
                    .and_then(|()| self.trace.get_ref().get_ref().sync_data());
                if let Err(error) = synced {
                    return Err(self.fail(collector_lines::WRITE_THE_TRACE, error));
                }
                pending.drain(..).for_each(Release::apply);
                last_sync = Instant::now();
            }
        }
    }

    /// Folds the trace first if `record` would take it to its fold size.
    fn make_room_for(&mut self, record: &Record) {
        self.schedule.make_room_for(&mut self.trace, &self.path, record);
    }

    fn fail(&self, action: &str, error: std::io::Error) -> TraceFailure {
        TraceFailure {
            message: collector_lines::cannot_do(action, &self.path, &error),
        }
    }

    fn finish(mut self, mut summary: CollectionSummary) -> Result<CollectionSummary, TraceFailure> {
        let symbols = std::mem::take(&mut self.stacks).into_records();
        self.schedule.fold_before_the_end(&mut self.trace, &self.path, &symbols);
        for record in symbols {
            if let Err(error) = self.trace.record(&record) {
                return Err(self.fail(collector_lines::WRITE_THE_TRACE, error));
            }
        }
        summary.events = self.trace.events_written();
        summary.folded_events = self.trace.folded_events();
        summary.folds = self.schedule.folds.clone();
        summary.lost_events = self.trace.lost_events();
        let footer = Footer {
            processes: summary.processes,
            events: summary.events,
            dropped_events: summary.dropped_events,
            refused_spools: summary.refused,
            end_realtime_ns: realtime_ns(),
            lost_events: summary.lost_events,
            damaged_spools: summary.damaged_spools,
        };
        let written = self
            .trace
            .footer(&footer)
            .and_then(|()| self.trace.get_ref().get_ref().sync_all());
        if let Err(error) = written {
            return Err(self.fail(collector_lines::WRITE_THE_TRACE, error));
        }
        summary.bytes = self.trace.bytes_written();
        Ok(summary)
    }
}
