//! A recorded trace given times of the test's choosing: a run's times
//! follow the machine's load (a step the scheduler preempts lasts
//! milliseconds, not microseconds), so what a chart draws of them can only
//! be asserted exactly on a copy whose times are fixed.

use cudatrace_events::Event;
use cudatrace_trace::{Record, TraceReader, TraceWriter};
use std::path::Path;

/// Copies the one-process `trace` to `copy` with every time fixed, in ns
/// after the trace's start: its process starts with the trace, its `n`th
/// memory event (in sequence order) happens at `memory_events[n]`, any
/// other event (a call stack's record, a measurement) at the next memory
/// event's time (the last one's after it), and it exits at `exit_ns`.
/// Panics unless the trace has as many memory events, or where it holds a
/// timed record this does not fix.
pub fn retimed(trace: &Path, copy: &Path, memory_events: &[u64], exit_ns: u64) {
    let file = std::io::BufReader::new(std::fs::File::open(trace).unwrap());
    let mut reader = TraceReader::new(file).unwrap();
    let mut records = Vec::new();
    while let Some(record) = reader.next_record().unwrap() {
        records.push(record);
    }
    let Some(Record::Header(header)) = records.first() else {
        panic!("{}: no header", trace.display())
    };
    let start = header.start_monotonic_ns;
    let events = || {
        records.iter().flat_map(|record| match record {
            Record::Events { events, .. } => events.as_slice(),
            _ => &[],
        })
    };
    let memory = |event: &Event| event.op.is_memory_event();
    assert_eq!(
        events().filter(|e| memory(e)).count(),
        memory_events.len(),
        "{}",
        trace.display()
    );
    assert!(events().all(|e| e.pid == events().next().unwrap().pid), "one process");
    let mut writer = TraceWriter::new(std::fs::File::create(copy).unwrap(), header).unwrap();
    let mut seen = 0;
    for mut record in records.into_iter().skip(1) {
        match &mut record {
            Record::Process(process) => process.start_monotonic_ns = start,
            Record::NvmlStatus(status) => status.time_ns = start,
            Record::Events { events, .. } => {
                for event in events.iter_mut() {
                    let next = seen.min(memory_events.len() - 1);
                    event.time_ns = start + memory_events[next];
                    seen += usize::from(memory(event));
                }
            }
            Record::ProcessEnd(end) => end.exit_time_ns = Some(start + exit_ns),
            Record::Nvml(_) | Record::RecordingSwitch(_) | Record::Fold(_) | Record::Unrecorded(_) => {
                panic!("{}: a timed record not fixed: {record:?}", trace.display())
            }
            _ => {}
        }
        match &record {
            Record::Events { process, events } => writer.events(*process, events).unwrap(),
            Record::ProcessEnd(end) => writer.process_end(end).unwrap(),
            other => writer.record(other).unwrap(),
        }
    }
    writer.flush().unwrap();
}
