//! How fast a trace's records are read and decoded, on one thread: the
//! floor under every command's pass over a trace.
//!
//!   cargo run --release -p cudatrace-trace --example decode_rate TRACE [ROUNDS]
//!
//! Prints, for the fastest of ROUNDS passes (default 3), the seconds, the
//! events and the nanoseconds an event. The file is read into memory first,
//! so that the figure is the decoding's alone.

use cudatrace_trace::{Record, TraceReader};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: decode_rate TRACE [ROUNDS]");
        std::process::exit(2);
    };
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(3);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("decode_rate: cannot read {path}: {e}");
            std::process::exit(1);
        }
    };
    let mut best = f64::MAX;
    let mut events = 0u64;
    for _ in 0..rounds {
        let start = Instant::now();
        let mut reader = match TraceReader::new(&bytes[..]) {
            Ok(reader) => reader,
            Err(damage) => {
                eprintln!("decode_rate: {path}: {damage:?}");
                std::process::exit(1);
            }
        };
        events = 0;
        while let Ok(Some(record)) = reader.next_record() {
            if let Record::Events { events: block, .. } = record {
                events += block.len() as u64;
            }
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "{best:.3} s, {events} events, {:.1} ns an event",
        best * 1e9 / events.max(1) as f64
    );
}
