//! [`Export`]: the two Parquet files of `cudatrace export`, written trace by
//! trace.

use super::call_site_table::CallSiteTable;
use super::event_rows::TraceRows;
use super::events_file::EventsFile;
use cudatrace_analysis::Progress;
use cudatrace_analysis::{Replay, TraceIndex, UnreadBlock};
use parquet::errors::Result;
use std::io::Write;

/// An export under way: `events.parquet` being written, the call sites
/// gathered for `call_sites.parquet`.
pub struct Export<W: Write + Send> {
    events: EventsFile<W>,
    sites: CallSiteTable,
}

/// What an export wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exported {
    /// Rows of `events.parquet`.
    pub events: u64,
    /// Rows of `call_sites.parquet`.
    pub call_sites: usize,
}

impl<W: Write + Send> Export<W> {
    /// Starts `events.parquet` in `events`.
    pub fn new(events: W) -> Result<Export<W>> {
        Ok(Export {
            events: EventsFile::new(events)?,
            sites: CallSiteTable::default(),
        })
    }

    /// Adds every event of the trace `index`, named `name` in the rows;
    /// returns the blocks that could not be read again.
    pub fn add_trace(&mut self, index: &TraceIndex, name: &str, progress: &Progress) -> Result<Vec<UnreadBlock>> {
        let mut rows = TraceRows::new(index, name, &mut self.events);
        let replayed = Replay::new(index, progress).run(&mut rows)?;
        rows.finish(&mut self.sites);
        Ok(replayed.stream_errors)
    }

    /// Ends `events.parquet`: its output, to be flushed, and the export
    /// left to write, `call_sites.parquet`.
    pub fn finish_events(self) -> Result<(W, CallSites)> {
        let rows = self.events.rows_written;
        Ok((
            self.events.finish()?,
            CallSites {
                table: self.sites,
                rows,
            },
        ))
    }
}

/// The call sites of a finished `events.parquet`.
pub struct CallSites {
    table: CallSiteTable,
    rows: u64,
}

impl CallSites {
    /// Writes `call_sites.parquet` into `out`: the output, to be flushed,
    /// and what the export wrote.
    pub fn write<W: Write + Send>(&self, out: W) -> Result<(W, Exported)> {
        let out = self.table.write(out)?;
        let exported = Exported {
            events: self.rows,
            call_sites: self.table.len(),
        };
        Ok((out, exported))
    }
}
