//! One trace's rows: a consumer of its replay that turns each change of
//! memory into a row of `events.parquet`.
//!
//! - an allocation the replay saw come into use is an `alloc` row, and its
//!   going out of use a `free` row (at the free's call, or at the call that
//!   reused its address or unmapped it last), with the allocation's size,
//!   kind, device and call site: so the rows of a call site add up to what
//!   it holds;
//! - PyTorch's tensors are `tensor_alloc` rows, and `tensor_free` rows when
//!   their block's free completes, as the report counts them;
//! - an out-of-memory failure is an `oom` row, with the bytes asked for.

use super::call_site_table::{CallSiteTable, SiteDescription};
use super::events_file::{EventsFile, Row, RowAction, Source};
use crate::wording::stack_texts;
use cudatrace_analysis::{
    call_site_id, owner_of, site_key_of, site_name, Allocation, Change, Consumer, FramesShown, Step, TraceIndex,
};
use cudatrace_events::tensors::{action_of, Action};
use cudatrace_events::Event;
use foldhash::HashMap;
use parquet::errors::{ParquetError, Result};
use std::io::Write;

/// What the rows of one call stack of one process carry.
#[derive(Clone, Copy, Debug)]
struct StackSite {
    call_site_id: Option<u64>,
    /// The owner, in the file's texts.
    owner: u32,
    /// Bytes allocated under it (its `alloc` and `tensor_alloc` rows).
    bytes: u64,
}

/// The rows of one trace, being written into `events`.
pub struct TraceRows<'a, W: Write + Send> {
    index: &'a TraceIndex,
    events: &'a mut EventsFile<W>,
    /// Each process's number in `events`, by its place in the index.
    sources: Vec<u32>,
    /// Each stack's call site and owner, by (process, stack).
    stacks: HashMap<(usize, u32), StackSite>,
    /// Live tensors: (process, device, address) → (bytes, stack).
    tensors: HashMap<(usize, Option<u8>, u64), (u64, u32)>,
}

impl<'a, W: Write + Send> TraceRows<'a, W> {
    /// Rows of the trace `index`, named `name` in the `trace` column.
    pub fn new(index: &'a TraceIndex, name: &str, events: &'a mut EventsFile<W>) -> TraceRows<'a, W> {
        let trace = events.texts.id(name);
        let sources = index
            .processes
            .iter()
            .map(|info| {
                let start = &info.start;
                // The trace index gives a process of a trace written before
                // hosts were recorded per process its trace's host.
                let host = events.texts.id(&start.place.host);
                events.source(Source {
                    trace,
                    host,
                    rank: start.place.rank,
                    pid: start.pid,
                    process: start.process,
                    start_monotonic_ns: start.start_monotonic_ns,
                    start_realtime_ns: start.start_realtime_ns,
                })
            })
            .collect();
        TraceRows {
            index,
            events,
            sources,
            stacks: HashMap::default(),
            tensors: HashMap::default(),
        }
    }

    /// The call site and owner of `stack` of process `process`.
    fn site(&mut self, process: usize, stack: u32) -> &mut StackSite {
        let (index, texts) = (self.index, &mut self.events.texts);
        self.stacks.entry((process, stack)).or_insert_with(|| {
            let frames = if stack == 0 {
                Vec::new()
            } else {
                index.frames(&index.processes[process], stack)
            };
            StackSite {
                call_site_id: (!frames.is_empty()).then(|| call_site_id(&site_key_of(&frames))),
                owner: texts.id(&owner_of(&frames)),
                bytes: 0,
            }
        })
    }

    /// Adds a row of `event` of process `process`; the call site and owner
    /// are those of `stack`.
    fn row(&mut self, process: usize, event: &Event, action: RowAction, what: Allocation) -> Result<()> {
        let site = self.site(process, what.stack);
        if matches!(action, RowAction::Alloc | RowAction::TensorAlloc) {
            site.bytes += what.size;
        }
        let (call_site_id, owner) = (site.call_site_id, site.owner);
        self.events.push(Row {
            time_ns: event.time_ns,
            address: what.address,
            size: what.size,
            seq: event.seq,
            call_site_id,
            source: self.sources[process],
            owner,
            device: what.device,
            action,
            api: what.api,
            kind: what.kind,
        })
    }

    /// A tensor record: an `alloc` or a completed free of a live tensor.
    fn tensor(&mut self, process: usize, event: &Event, action: Action) -> Result<()> {
        let key = (process, event.device, event.address);
        let what = |size: u64, stack: u32| Allocation {
            size,
            stack,
            ..Allocation::of(event)
        };
        match action {
            Action::Alloc => {
                // Its free was never seen: the block is free again now.
                if let Some((size, stack)) = self.tensors.insert(key, (event.size, event.stack)) {
                    self.row(process, event, RowAction::TensorFree, what(size, stack))?;
                }
                self.row(process, event, RowAction::TensorAlloc, Allocation::of(event))
            }
            Action::FreeCompleted => match self.tensors.remove(&key) {
                Some((size, stack)) => self.row(process, event, RowAction::TensorFree, what(size, stack)),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// The trace is done: offers each call stack met to `table` as its
    /// site's example.
    pub fn finish(self, table: &mut CallSiteTable) {
        let index = self.index;
        let mut stacks: Vec<((usize, u32), StackSite)> = self.stacks.into_iter().collect();
        stacks.sort_unstable_by_key(|&(key, _)| key);
        for ((process, stack), site) in stacks {
            let Some(id) = site.call_site_id else { continue };
            table.offer(id, site.bytes, || {
                let frames = index.frames(&index.processes[process], stack);
                SiteDescription {
                    key: site_key_of(&frames),
                    headline: site_name(&frames),
                    owner: owner_of(&frames),
                    frames: stack_texts(&frames, FramesShown::Full),
                }
            });
        }
    }
}

impl<W: Write + Send> Consumer for TraceRows<'_, W> {
    type Error = ParquetError;

    fn step(&mut self, step: &Step) -> Result<()> {
        let (process, event) = (step.process, step.event);
        for change in step.changes {
            match change {
                Change::Allocated(allocation) => self.row(process, event, RowAction::Alloc, allocation.clone())?,
                Change::Freed { allocation, .. } => {
                    let what = Allocation {
                        api: event.api,
                        ..allocation.clone()
                    };
                    self.row(process, event, RowAction::Free, what)?
                }
                Change::OutOfMemory { requested, .. } => {
                    let what = Allocation {
                        address: 0,
                        size: *requested,
                        ..Allocation::of(event)
                    };
                    self.row(process, event, RowAction::Oom, what)?
                }
                _ => {}
            }
        }
        if let Some(action) = action_of(event) {
            self.tensor(process, event, action)?;
        }
        Ok(())
    }
}
