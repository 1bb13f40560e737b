//! Moving records from one trace into another (`cudatrace merge`): their
//! times onto the other trace's clock, and their process and string
//! numbers into its numbering. Everything that says which fields are times
//! or numbers lives here, beside the format that defines them.

use crate::format::*;

/// Adds `shift_ns` to every `CLOCK_MONOTONIC` time `record` holds (see
/// [`monotonic_times_mut`]). A time that would fall off either end of the
/// clock stops there: the number of such times is returned, for the caller
/// to say (a merge chooses its clock so that none falls off).
pub fn shift_times(record: &mut Record, shift_ns: i64) -> u64 {
    let mut clamped = 0;
    if shift_ns != 0 {
        monotonic_times_mut(record, |time| match time.checked_add_signed(shift_ns) {
            Some(moved) => *time = moved,
            None => {
                *time = time.saturating_add_signed(shift_ns);
                clamped += 1;
            }
        });
    }
    clamped
}

/// Calls `visit` on every `CLOCK_MONOTONIC` time `record` holds: event
/// times, process starts and exits, readings, switches, and what folds
/// kept. Wall-clock times are not visited: they are the same on every host
/// already.
pub fn monotonic_times_mut(record: &mut Record, mut visit: impl FnMut(&mut u64)) {
    match record {
        Record::Header(header) => visit(&mut header.start_monotonic_ns),
        Record::Process(start) => visit(&mut start.start_monotonic_ns),
        Record::Events { events, .. } => events.iter_mut().for_each(|e| visit(&mut e.time_ns)),
        Record::ProcessEnd(end) => {
            if let Some(time) = end.exit_time_ns.as_mut() {
                visit(time);
            }
        }
        Record::Unrecorded(notice) => visit(&mut notice.time_ns),
        Record::Nvml(sample) => visit(&mut sample.time_ns),
        Record::NvmlStatus(status) => visit(&mut status.time_ns),
        Record::RecordingSwitch(switch) => visit(&mut switch.time_ns),
        Record::Fold(fold) => visit(&mut fold.detail_from_ns),
        Record::StepsState(steps) => {
            for row in steps.records.iter_mut().chain(steps.open.as_mut()) {
                visit(&mut row.start_ns);
                visit(&mut row.end_ns);
            }
        }
        Record::LowPointsState(low) => low.points.iter_mut().for_each(|p| visit(&mut p.time_ns)),
        Record::Refused(_)
        | Record::DamagedSpool(_)
        | Record::String { .. }
        | Record::Symbols { .. }
        | Record::Footer(_)
        | Record::Unknown { .. } => {}
    }
}

/// The process image a record belongs to, for the records that belong to
/// one (besides its own [`Record::Process`]).
pub fn process_of(record: &Record) -> Option<u32> {
    match record {
        Record::Events { process, .. } | Record::Symbols { process, .. } => Some(*process),
        Record::ProcessEnd(end) => Some(end.process),
        Record::Fold(fold) => Some(fold.process),
        Record::StepsState(steps) => Some(steps.process),
        Record::LowPointsState(low) => Some(low.process),
        _ => None,
    }
}

/// A string id that does not fit once moved past the ids before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdOverflow;

/// The highest string id `record` defines or refers to (0: none).
pub fn highest_string_id(record: &Record) -> u64 {
    match record {
        Record::String { id, .. } => *id,
        Record::Symbols { nodes, .. } => nodes
            .iter()
            .flat_map(|n| &n.frames)
            .flat_map(|f| [f.function, f.file, f.module])
            .max()
            .unwrap_or(0),
        _ => 0,
    }
}

/// Gives `record` the process number `process` maps its own to, and adds
/// `string_base` to the string ids it defines or refers to (0, "unknown",
/// stays 0). Fails, changing nothing, when an id would not fit.
pub fn renumber(record: &mut Record, process: impl Fn(u32) -> u32, string_base: u64) -> Result<(), IdOverflow> {
    highest_string_id(record).checked_add(string_base).ok_or(IdOverflow)?;
    let text = |id: &mut u64| {
        if *id != 0 {
            *id += string_base;
        }
    };
    match record {
        Record::Process(start) => start.process = process(start.process),
        Record::Events { process: p, .. } => *p = process(*p),
        Record::ProcessEnd(end) => end.process = process(end.process),
        Record::Fold(fold) => fold.process = process(fold.process),
        Record::StepsState(steps) => steps.process = process(steps.process),
        Record::LowPointsState(low) => low.process = process(low.process),
        Record::String { id, .. } => text(id),
        Record::Symbols { process: p, nodes } => {
            *p = process(*p);
            for frame in nodes.iter_mut().flat_map(|n| n.frames.iter_mut()) {
                text(&mut frame.function);
                text(&mut frame.file);
                text(&mut frame.module);
            }
        }
        Record::Header(_)
        | Record::Refused(_)
        | Record::DamagedSpool(_)
        | Record::Unrecorded(_)
        | Record::Nvml(_)
        | Record::NvmlStatus(_)
        | Record::RecordingSwitch(_)
        | Record::Footer(_)
        | Record::Unknown { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudatrace_events::{Api, Event, Kind, Op};

    fn event(time_ns: u64) -> Event {
        Event {
            pid: 7,
            tid: 7,
            seq: 0,
            time_ns,
            device: Some(0),
            stream: 0,
            api: Api::CuMemAllocV2,
            op: Op::Alloc,
            kind: Kind::Device,
            address: 0x1000,
            size: 64,
            arg1: 0,
            arg2: 0,
            stack: 3,
        }
    }

    #[test]
    fn times_move_by_the_shift_and_stop_at_the_clock_ends() {
        let mut events = Record::Events {
            process: 2,
            events: vec![event(1_000), event(5)],
        };
        assert_eq!(shift_times(&mut events, -10), 1, "one time fell off the clock's start");
        let Record::Events { events, .. } = events else {
            unreachable!()
        };
        assert_eq!(events.iter().map(|e| e.time_ns).collect::<Vec<_>>(), [990, 0]);
        let mut late = Record::Events {
            process: 2,
            events: vec![event(u64::MAX - 5), event(7)],
        };
        assert_eq!(shift_times(&mut late, 10), 1, "and one off its end");

        let mut end = Record::ProcessEnd(ProcessEnd {
            exit_time_ns: Some(100),
            ..Default::default()
        });
        assert_eq!(shift_times(&mut end, 1_000_000), 0);
        assert!(matches!(
            end,
            Record::ProcessEnd(ProcessEnd {
                exit_time_ns: Some(1_000_100),
                ..
            })
        ));

        let mut steps = Record::StepsState(StepsState {
            records: vec![StepRow {
                first: 1,
                last: 1,
                start_ns: 10,
                end_ns: 20,
                ..Default::default()
            }],
            open: Some(StepRow {
                first: 2,
                last: 2,
                start_ns: 20,
                end_ns: 25,
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(shift_times(&mut steps, 5), 0);
        let Record::StepsState(steps) = steps else {
            unreachable!()
        };
        assert_eq!((steps.records[0].start_ns, steps.records[0].end_ns), (15, 25));
        assert_eq!(steps.open.map(|o| (o.start_ns, o.end_ns)), Some((25, 30)));
    }

    #[test]
    fn process_and_string_numbers_move_into_the_new_numbering() {
        let mut symbols = Record::Symbols {
            process: 1,
            nodes: vec![NodeSymbols {
                node: 3,
                frames: vec![SymbolFrame {
                    function: 4,
                    file: 0,
                    line: 12,
                    module: 5,
                }],
            }],
        };
        renumber(&mut symbols, |p| p + 10, 100).unwrap();
        assert_eq!(
            symbols,
            Record::Symbols {
                process: 11,
                nodes: vec![NodeSymbols {
                    node: 3,
                    frames: vec![SymbolFrame {
                        function: 104,
                        file: 0,
                        line: 12,
                        module: 105,
                    }],
                }],
            },
            "0 stays unknown"
        );
        let mut text = Record::String {
            id: 4,
            text: "main".into(),
        };
        renumber(&mut text, |p| p, 100).unwrap();
        assert_eq!(
            text,
            Record::String {
                id: 104,
                text: "main".into()
            }
        );
        let mut huge = Record::String {
            id: u64::MAX - 5,
            text: "x".into(),
        };
        assert_eq!(renumber(&mut huge, |p| p, 100), Err(IdOverflow));
        assert_eq!(highest_string_id(&huge), u64::MAX - 5, "unchanged");
    }
}
