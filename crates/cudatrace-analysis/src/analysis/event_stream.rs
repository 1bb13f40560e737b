//! The second pass: every event of a trace, in the order memory changed.
//!
//! Within a process, events come in sequence order, never re-sorted by
//! time: a free takes its sequence number before its call and its time after
//! it, so time order could put an address's reuse before its free. Across
//! processes, the stream merges by time. It holds one block per process.

use super::block_prefetch::{decode_block, Prefetch};
use super::trace_index::TraceIndex;
use super::unreadable::UnreadBlock;
use cudatrace_events::Event;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

struct Cursor {
    next_block: usize,
    events: Vec<Event>,
    position: usize,
}

/// The events of a trace, merged (see the module documentation). Each item
/// is the process's index in [`TraceIndex::processes`] and the event.
pub struct EventStream<'a> {
    index: &'a TraceIndex,
    /// Workers decoding the blocks ahead, if any.
    prefetch: Option<&'a Prefetch<'a>>,
    cursors: Vec<Cursor>,
    /// (time of the head event, process) of every process with events left.
    heads: BinaryHeap<Reverse<(u64, usize)>>,
    /// The head of the process that gave the last event, kept out of the
    /// heap: while it stays the earliest (always, for a trace of one
    /// process), the next event costs no heap operation.
    held: Option<(u64, usize)>,
    /// Blocks that could not be read again (the file changed under us).
    pub errors: Vec<UnreadBlock>,
    /// Events handed out so far.
    pub delivered: u64,
}

impl<'a> EventStream<'a> {
    /// Starts at the first event of every process (of those `selected`,
    /// where given: the others' blocks are never read); the blocks come
    /// from `prefetch` where given, else are decoded here.
    pub fn new(
        index: &'a TraceIndex,
        selected: Option<&[bool]>,
        prefetch: Option<&'a Prefetch<'a>>,
    ) -> EventStream<'a> {
        let mut stream = EventStream {
            index,
            prefetch,
            cursors: Vec::with_capacity(index.processes.len()),
            heads: BinaryHeap::new(),
            held: None,
            errors: Vec::new(),
            delivered: 0,
        };
        for process in 0..index.processes.len() {
            stream.cursors.push(Cursor {
                next_block: 0,
                events: Vec::new(),
                position: 0,
            });
            if selected.is_none_or(|selected| selected[process]) {
                if let Some(head) = stream.refill(process) {
                    stream.heads.push(Reverse(head));
                }
            }
        }
        stream
    }

    /// Makes `process`'s head event available, reading its next block if
    /// needed, and queues it.
    /// Moves `process`'s cursor to its next event, reading blocks as
    /// needed: that event's (time, process), or `None` when it has no more.
    fn refill(&mut self, process: usize) -> Option<(u64, usize)> {
        let info = &self.index.processes[process];
        let cursor = &mut self.cursors[process];
        while cursor.position >= cursor.events.len() {
            if cursor.next_block >= info.blocks.len() {
                cursor.events = Vec::new();
                return None;
            }
            let number = cursor.next_block;
            cursor.next_block += 1;
            cursor.position = 0;
            let decoded = match self.prefetch {
                Some(prefetch) => prefetch.take(process, number),
                None => decode_block(self.index, process, number),
            };
            match decoded {
                Ok(events) => cursor.events = events,
                Err(unread) => {
                    self.errors.push(unread);
                    cursor.events = Vec::new();
                }
            }
        }
        Some((cursor.events[cursor.position].time_ns, process))
    }
}

impl Iterator for EventStream<'_> {
    type Item = (usize, Event);

    fn next(&mut self) -> Option<(usize, Event)> {
        // The earliest head, in the heap's order: the held one unless the
        // heap's top comes before it.
        let process = match self.held.take() {
            Some(held) => match self.heads.peek() {
                Some(&Reverse(top)) if top < held => {
                    self.heads.push(Reverse(held));
                    self.heads.pop().expect("just pushed").0 .1
                }
                _ => held.1,
            },
            None => self.heads.pop()?.0 .1,
        };
        let cursor = &mut self.cursors[process];
        let event = cursor.events[cursor.position].clone();
        cursor.position += 1;
        self.held = self.refill(process);
        self.delivered += 1;
        Some((process, event))
    }
}
