//! Synthetic traces for benchmarks: processes that allocate and free device,
//! pool and pinned memory from several threads, with a bounded live set and
//! the address reuse a caching allocator shows. Behind the `testing`
//! feature: tests and benches only.

use crate::format::{Footer, Header, ProcessEnd, ProcessStart, FORMAT_VERSION};
use crate::writer::TraceWriter;
use cudatrace_events::{Api, Event, Kind, Op};
use std::io::{self, Write};

/// A small deterministic xorshift generator, for synthetic data and fuzzing.
pub struct Rng(pub u64);

impl Rng {
    /// The next pseudo-random number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One change to a process's live set: a free of a live allocation, now
/// and then an out-of-memory failure, or an allocation; `None` when the
/// address drawn was allocated just before.
fn next_change(
    rng: &mut Rng,
    live_set: &mut Vec<(u64, u64, Kind)>,
    process: usize,
) -> Option<(Op, Api, Kind, u64, u64)> {
    let free = !live_set.is_empty() && (live_set.len() >= 20_000 || rng.below(2) == 0);
    if free {
        let index = rng.below(live_set.len() as u64) as usize;
        let (address, size, kind) = live_set.swap_remove(index);
        let api = if kind == Kind::Pool {
            Api::CudaFreeAsync
        } else {
            Api::CudaFree
        };
        Some((Op::Free, api, kind, address, size))
    } else if rng.below(5000) == 0 {
        Some((Op::Oom, Api::CudaMalloc, Kind::Device, 0, 1 << 36))
    } else {
        let size = (1 + rng.below(1 << 12)) << (9 + rng.below(8));
        let kind = if rng.below(4) == 0 { Kind::Pool } else { Kind::Device };
        let address = 0x7f00_0000_0000 + (rng.below(1 << 20) << 21) + ((process as u64) << 44);
        if live_set.iter().rev().take(8).any(|&(a, _, _)| a == address) {
            return None;
        }
        live_set.push((address, size, kind));
        let api = if kind == Kind::Pool {
            Api::CudaMallocAsync
        } else {
            Api::CudaMalloc
        };
        Some((Op::Alloc, api, kind, address, size))
    }
}

/// Writes a trace of `events` events spread over `processes` processes.
/// Returns the bytes written.
pub fn write_synthetic<W: Write>(out: W, events: u64, processes: u32, seed: u64) -> io::Result<u64> {
    let header = Header {
        format_version: FORMAT_VERSION,
        tracer_version: "synthetic".into(),
        host: "synthetic".into(),
        start_realtime_ns: 1_800_000_000_000_000_000,
        start_monotonic_ns: 1_000_000_000,
        command: vec!["python".into(), "train.py".into()],
    };
    let mut writer = TraceWriter::new(out, &header)?;
    let mut rng = Rng(seed | 1);
    let per_process = events / u64::from(processes.max(1));
    for process in 0..processes {
        let pid = 1000 + process;
        writer.process_start(&ProcessStart {
            process,
            pid,
            ppid: 999,
            image: 0,
            argv: vec!["python".into(), "train.py".into(), format!("--rank={process}")],
            start_monotonic_ns: 1_000_000_000,
            start_realtime_ns: 1_800_000_000_000_000_000,
            place: cudatrace_events::ProcessPlace {
                host: "synthetic".into(),
                rank: Some(process),
                local_rank: Some(process),
                world_size: Some(processes),
            },
        })?;
    }
    // Processes run at once: interleave their blocks as a collector would.
    let mut live: Vec<Vec<(u64, u64, Kind)>> = vec![Vec::new(); processes as usize];
    let mut seq = vec![0u64; processes as usize];
    let mut time = vec![1_000_000_000u64; processes as usize];
    let mut block = Vec::with_capacity(4096);
    let mut remaining = vec![per_process; processes as usize];
    while remaining.iter().any(|&r| r > 0) {
        for process in 0..processes as usize {
            let count = remaining[process].min(4096);
            remaining[process] -= count;
            block.clear();
            for _ in 0..count {
                time[process] += 200 + rng.below(5000);
                let Some((op, api, kind, address, size)) = next_change(&mut rng, &mut live[process], process) else {
                    continue;
                };
                block.push(Event {
                    pid: 1000 + process as u32,
                    tid: 1000 + process as u32 + rng.below(4) as u32,
                    seq: seq[process],
                    time_ns: time[process],
                    device: Some(process as u8 % 8),
                    stream: if kind == Kind::Pool { 0x5000 } else { 0 },
                    api,
                    op,
                    kind,
                    address,
                    size,
                    arg1: if op == Op::Oom { 1 << 30 } else { 0 },
                    arg2: if op == Op::Oom { 80 << 30 } else { 0 },
                    stack: 1 + rng.below(50) as u32,
                });
                seq[process] += 1;
            }
            writer.events(process as u32, &block)?;
        }
    }
    for process in 0..processes {
        writer.process_end(&ProcessEnd {
            process,
            exit_status: Some(0),
            exit_time_ns: Some(time[process as usize]),
            ..Default::default()
        })?;
    }
    let total = writer.events_written();
    writer.footer(&Footer {
        processes: u64::from(processes),
        events: total,
        end_realtime_ns: 1,
        ..Default::default()
    })?;
    Ok(writer.bytes_written())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Record, TraceReader};

    #[test]
    fn a_synthetic_trace_reads_back_whole() {
        let mut bytes = Vec::new();
        write_synthetic(&mut bytes, 20_000, 4, 7).unwrap();
        let mut events = 0;
        let mut complete = false;
        for record in TraceReader::new(&bytes[..]).unwrap() {
            match record.unwrap() {
                Record::Events { events: block, .. } => events += block.len(),
                Record::Footer(footer) => {
                    complete = true;
                    assert_eq!(footer.events as usize, events);
                }
                _ => {}
            }
        }
        assert!(complete);
        assert!(events > 19_000 && events <= 20_000, "{events}");
    }
}
