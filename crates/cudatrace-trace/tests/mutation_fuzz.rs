//! A mutation fuzzer for the trace reader: random truncations, bit flips,
//! byte overwrites, insertions and deletions of a valid trace must never make
//! the reader panic, loop, or return a record after the damage point.
//!
//! `CUDATRACE_FUZZ_ITERATIONS` sets how long it runs (default 20,000).

use cudatrace_events::{Api, Event, Kind, Op};
use cudatrace_trace::synthetic::Rng;
use cudatrace_trace::{Footer, Header, ProcessStart, Record, TraceReader, TraceWriter, FORMAT_VERSION};

fn seed_trace() -> Vec<u8> {
    let header = Header {
        format_version: FORMAT_VERSION,
        tracer_version: "x".into(),
        host: "h".into(),
        start_realtime_ns: 1,
        start_monotonic_ns: 2,
        command: vec!["a".into()],
    };
    let mut writer = TraceWriter::new(Vec::new(), &header).unwrap();
    for process in 0..3u32 {
        writer
            .process_start(&ProcessStart {
                process,
                pid: 100 + process,
                ppid: 1,
                image: 0,
                argv: vec!["p".into()],
                start_monotonic_ns: 3,
                start_realtime_ns: 4,
                place: Default::default(),
            })
            .unwrap();
        let events: Vec<Event> = (0..50u64)
            .map(|seq| Event {
                pid: 100 + process,
                tid: 7,
                seq,
                time_ns: 10 + seq,
                device: Some(0),
                stream: seq & 1,
                api: Api::CuMemAllocV2,
                op: if seq % 2 == 0 { Op::Alloc } else { Op::Free },
                kind: Kind::Device,
                address: 0x1000 * (seq / 2 + 1),
                size: 4096,
                arg1: 0,
                arg2: 0,
                stack: (seq % 3) as u32,
            })
            .collect();
        writer.events(process, &events).unwrap();
    }
    writer
        .footer(&Footer {
            processes: 3,
            events: 150,
            ..Default::default()
        })
        .unwrap();
    writer.into_inner()
}

fn read_all(bytes: &[u8]) -> usize {
    let Ok(reader) = TraceReader::new(bytes) else { return 0 };
    let mut count = 0;
    for item in reader {
        match item {
            Ok(Record::Events { events, .. }) => count += events.len(),
            Ok(_) => count += 1,
            Err(damage) if damage.skipped => {}
            Err(_) => break,
        }
        assert!(count < 1_000_000, "reader did not stop");
    }
    count
}

#[test]
fn mutated_traces_never_panic_the_reader() {
    let seed = seed_trace();
    let whole = read_all(&seed);
    assert_eq!(whole, 1 + 3 + 150 + 1);
    let iterations: usize = std::env::var("CUDATRACE_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..iterations {
        let mut bytes = seed.clone();
        for _ in 0..1 + rng.below(4) as usize {
            match rng.below(5) {
                0 => bytes.truncate(rng.below(bytes.len() as u64 + 1) as usize),
                1 => {
                    let at = rng.below(bytes.len() as u64) as usize;
                    if let Some(b) = bytes.get_mut(at) {
                        *b ^= 1 << rng.below(8);
                    }
                }
                2 => {
                    let at = rng.below(bytes.len() as u64) as usize;
                    if let Some(b) = bytes.get_mut(at) {
                        *b = rng.next_u64() as u8;
                    }
                }
                3 => {
                    let at = rng.below(bytes.len() as u64 + 1) as usize;
                    bytes.insert(at.min(bytes.len()), rng.next_u64() as u8);
                }
                _ => {
                    if !bytes.is_empty() {
                        let at = rng.below(bytes.len() as u64) as usize;
                        bytes.remove(at);
                    }
                }
            }
        }
        assert!(read_all(&bytes) <= whole + 1);
    }
}
