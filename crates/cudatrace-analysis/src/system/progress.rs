//! A progress bar for conversions of large traces: drawn on stderr when it
//! is a terminal, absent when piped.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::cell::Cell;
use std::io::IsTerminal;

/// Events between two updates of the bar: updating costs more than an event.
const EVENTS_PER_UPDATE: u64 = 1 << 16;
/// Traces smaller than this convert too fast to need a bar.
const SMALLEST_SHOWN: u64 = 1_000_000;

/// Counts events as a pass over the trace goes.
pub struct Progress {
    bar: Option<ProgressBar>,
    seen: Cell<u64>,
    /// Whether this is the bar's own counter, which clears it when done,
    /// rather than a [`Progress::share`] of it.
    owns_bar: bool,
}

impl Progress {
    /// A bar for `what`, over `total` events; none unless stderr is a
    /// terminal and the trace is large.
    pub fn new(what: &str, total: u64) -> Progress {
        let bar = (std::io::stderr().is_terminal() && total >= SMALLEST_SHOWN).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) =
                ProgressStyle::with_template("{msg} [{bar:40}] {human_pos}/{human_len} events, {eta} left")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(what.to_string());
            bar
        });
        Progress {
            bar,
            seen: Cell::new(0),
            owns_bar: true,
        }
    }

    /// A counter of its own that moves the same bar: for one of several
    /// threads that each read a share of a pass's events.
    pub fn share(&self) -> Progress {
        Progress {
            bar: self.bar.clone(),
            seen: Cell::new(0),
            owns_bar: false,
        }
    }

    /// No bar: for passes made behind the traced job's back (the collector's).
    pub fn hidden() -> Progress {
        Progress {
            bar: None,
            seen: Cell::new(0),
            owns_bar: true,
        }
    }

    /// One more event.
    pub fn tick(&self) {
        let seen = self.seen.get() + 1;
        self.seen.set(seen);
        if seen.is_multiple_of(EVENTS_PER_UPDATE) {
            if let Some(bar) = &self.bar {
                // Added, not set: shares of the bar count their own events.
                bar.inc(EVENTS_PER_UPDATE);
            }
        }
    }

    /// Starts another pass over the same events.
    pub fn next_pass(&self, what: &str) {
        self.seen.set(0);
        if let Some(bar) = &self.bar {
            bar.set_position(0);
            bar.set_message(what.to_string());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.as_ref().filter(|_| self.owns_bar) {
            bar.finish_and_clear();
        }
    }
}
