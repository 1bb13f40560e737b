//! Decoding a trace's blocks of events on the machine's other cores while
//! one thread replays them.
//!
//! Decoding is a fifth to a half of a pass over a trace, and a typical job
//! is one process whose replay cannot be split. So the blocks are decoded
//! ahead, in the order the replay will want them (by the time of their
//! first event, which is how [`super::event_stream::EventStream`] merges
//! processes), by worker threads, and handed over decoded. At most
//! [`WINDOW`] blocks wait decoded at a time, so memory stays bounded
//! whatever the trace's length. A block the replay wants before any worker
//! took it is decoded by the replay itself, so no order of wants can stall.

use super::trace_index::TraceIndex;
use super::unreadable::UnreadBlock;
use cudatrace_events::Event;
use cudatrace_trace::{read_record_at, Record};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

/// Blocks decoded ahead of the one being replayed, at most: some 15 MB of
/// events at 4,096 events a block.
const WINDOW: usize = 48;

/// The least window of one of several replays running at once.
const MOST_REPLAYS_WINDOW: usize = 8;

/// What decoding one block gave.
pub type Decoded = Result<Vec<Event>, UnreadBlock>;

const UNCLAIMED: u8 = 0;
const CLAIMED: u8 = 1;

/// Blocks decoded and waiting, and how far the replay has come.
struct Waiting {
    blocks: HashMap<usize, Decoded>,
    /// Every position below this one has been taken by the replay.
    floor: usize,
    /// Positions at or above `floor` taken already.
    taken: Vec<bool>,
}

/// The blocks of a trace, decoded ahead by workers (see the module
/// documentation).
pub struct Prefetch<'a> {
    index: &'a TraceIndex,
    /// (process, block) in the order the replay is expected to want them.
    order: Vec<(usize, usize)>,
    /// Per process and block, its place in `order`.
    position_of: Vec<Vec<usize>>,
    /// Per place in `order`, whether someone decodes it.
    claims: Vec<AtomicU8>,
    /// The next place a worker looks at.
    next: AtomicUsize,
    waiting: Mutex<Waiting>,
    /// A block was put among the waiting ones.
    decoded: Condvar,
    /// The replay took a block: there may be room in the window.
    room: Condvar,
    stop: AtomicBool,
    /// Blocks that may wait decoded at once: [`WINDOW`], shared out among
    /// the replays that run at once.
    window: usize,
    /// Replays running at once, this one included, that share the cores.
    replays: usize,
}

impl<'a> Prefetch<'a> {
    /// The plan for the blocks of `index`'s processes (those `selected`,
    /// where given), for one of `replays` replays running at once: the
    /// window and the spare cores are shared out among them, so that memory
    /// and threads stay as for one. No decoding starts until
    /// [`Prefetch::work`] runs on some threads.
    pub fn sharing(index: &'a TraceIndex, selected: Option<&[bool]>, replays: usize) -> Prefetch<'a> {
        let replays = replays.max(1);
        let mut order: Vec<(u64, usize, usize)> = Vec::new();
        for (process, info) in index.processes.iter().enumerate() {
            if selected.is_some_and(|selected| !selected[process]) {
                continue;
            }
            for (block, reference) in info.blocks.iter().enumerate() {
                order.push((reference.first_time_ns, process, block));
            }
        }
        order.sort_unstable();
        let mut position_of: Vec<Vec<usize>> = index.processes.iter().map(|p| vec![0; p.blocks.len()]).collect();
        for (position, &(_, process, block)) in order.iter().enumerate() {
            position_of[process][block] = position;
        }
        let claims = (0..order.len()).map(|_| AtomicU8::new(UNCLAIMED)).collect();
        Prefetch {
            index,
            order: order.into_iter().map(|(_, process, block)| (process, block)).collect(),
            position_of,
            claims,
            next: AtomicUsize::new(0),
            waiting: Mutex::new(Waiting {
                blocks: HashMap::new(),
                floor: 0,
                taken: Vec::new(),
            }),
            decoded: Condvar::new(),
            room: Condvar::new(),
            stop: AtomicBool::new(false),
            window: (WINDOW / replays).max(MOST_REPLAYS_WINDOW),
            replays,
        }
    }

    /// How many workers are worth starting on this machine: none where
    /// there is one core or few blocks.
    pub fn workers(&self) -> usize {
        if self.order.len() < 4 {
            return 0;
        }
        // The cores the replays' own threads leave, shared out.
        (crate::system::cores::helpers() + 1).saturating_sub(self.replays) / self.replays
    }

    /// A worker's loop: decodes the blocks in order, staying within the
    /// window, until every block is claimed or [`Prefetch::stop`].
    pub fn work(&self) {
        loop {
            let position = self.next.fetch_add(1, Ordering::Relaxed);
            if position >= self.order.len() || !self.wait_for_room(position) {
                return;
            }
            if self.claim(position) {
                let decoded = self.decode(position);
                let mut waiting = lock(&self.waiting);
                waiting.blocks.insert(position, decoded);
                drop(waiting);
                self.decoded.notify_all();
            }
        }
    }

    /// Ends the workers' loops: the replay is over.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _waiting = lock(&self.waiting);
        self.room.notify_all();
    }

    /// Block `block` of `process`, decoded: by a worker, or here if none
    /// has taken it yet.
    pub fn take(&self, process: usize, block: usize) -> Decoded {
        let position = self.position_of[process][block];
        let decoded = if self.claim(position) {
            self.decode(position)
        } else {
            let mut waiting = lock(&self.waiting);
            loop {
                if let Some(decoded) = waiting.blocks.remove(&position) {
                    break decoded;
                }
                waiting = self.decoded.wait(waiting).unwrap_or_else(|e| e.into_inner());
            }
        };
        self.mark_taken(position);
        decoded
    }

    /// Whether `position` was unclaimed, claiming it.
    fn claim(&self, position: usize) -> bool {
        self.claims[position]
            .compare_exchange(UNCLAIMED, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Waits until `position` is inside the window; false if stopped.
    fn wait_for_room(&self, position: usize) -> bool {
        let mut waiting = lock(&self.waiting);
        loop {
            if self.stop.load(Ordering::Acquire) {
                return false;
            }
            if position < waiting.floor + self.window {
                return true;
            }
            waiting = self.room.wait(waiting).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The replay took `position`: the floor moves past every taken place.
    fn mark_taken(&self, position: usize) {
        let mut waiting = lock(&self.waiting);
        if position < waiting.floor {
            return;
        }
        let at = position - waiting.floor;
        if waiting.taken.len() <= at {
            waiting.taken.resize(at + 1, false);
        }
        waiting.taken[at] = true;
        let moved = waiting.taken.iter().take_while(|&&taken| taken).count();
        if moved > 0 {
            waiting.taken.drain(..moved);
            waiting.floor += moved;
            drop(waiting);
            self.room.notify_all();
        }
    }

    fn decode(&self, position: usize) -> Decoded {
        let (process, block) = self.order[position];
        decode_block(self.index, process, block)
    }
}

/// Decodes block `block` of `process` from the trace's file.
pub fn decode_block(index: &TraceIndex, process: usize, block: usize) -> Decoded {
    let offset = index.processes[process].blocks[block].offset;
    match read_record_at(&index.file, offset, &|p| index.pid_of(p)) {
        Ok(Record::Events { events, .. }) => Ok(events),
        Ok(_) => Err(UnreadBlock::NotEvents { offset }),
        Err(damage) => Err(UnreadBlock::Damaged(damage)),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::event_stream::EventStream;

    /// A synthetic trace of `events` events over `processes` processes, in
    /// a file of its own.
    fn trace(name: &str, events: u64, processes: u32) -> TraceIndex {
        let path = std::env::temp_dir().join(format!("cudatrace-prefetch-{name}-{}.trace", std::process::id()));
        let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        cudatrace_trace::synthetic::write_synthetic(file, events, processes, 11).unwrap();
        let index = TraceIndex::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        index
    }

    fn order(stream: EventStream) -> Vec<(usize, u64, u64)> {
        stream
            .map(|(process, event)| (process, event.seq, event.time_ns))
            .collect()
    }

    #[test]
    fn the_stream_is_the_same_with_the_blocks_decoded_ahead() {
        let index = trace("same", 600_000, 3);
        let blocks: usize = index.processes.iter().map(|p| p.blocks.len()).sum();
        assert!(blocks > 2 * WINDOW, "{blocks} blocks");
        let alone = order(EventStream::new(&index, None, None));
        assert_eq!(alone.len() as u64, index.events);
        let prefetch = Prefetch::sharing(&index, None, 1);
        let ahead = std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| prefetch.work());
            }
            let ahead = order(EventStream::new(&index, None, Some(&prefetch)));
            prefetch.stop();
            ahead
        });
        assert_eq!(ahead, alone);
        // Only the selected process's blocks are read.
        let selected = [false, true, false];
        let one = order(EventStream::new(&index, Some(&selected), None));
        let expected: Vec<_> = alone.iter().copied().filter(|&(p, _, _)| p == 1).collect();
        assert_eq!(one, expected);
    }

    #[test]
    fn blocks_wanted_in_any_order_come_whole_and_nothing_stalls() {
        let index = trace("order", 300_000, 2);
        let prefetch = Prefetch::sharing(&index, None, 1);
        let wanted: Vec<(usize, usize)> = index
            .processes
            .iter()
            .enumerate()
            .flat_map(|(p, info)| (0..info.blocks.len()).map(move |b| (p, b)))
            .rev()
            .collect();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| prefetch.work());
            }
            for &(process, block) in &wanted {
                assert_eq!(prefetch.take(process, block), decode_block(&index, process, block));
            }
            prefetch.stop();
        });
    }
}
