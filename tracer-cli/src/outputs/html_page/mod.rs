//! The HTML report: one self-contained page, viewable with no network.
//! It opens with the answers, as the text report does: the memory limit's
//! verdict, the out-of-memory failures and refusals, the call sites that
//! keep growing. Then the ranks, and per process and device, where the
//! driver's memory went (a table and a chart by owner), a chart of live
//! bytes over time stacked by the top call sites with the peak marked, and
//! tables of memory at the peak, memory live at exit and OOMs, by call
//! site. Notes that do not change the answer come last.
//!
//! The charts are SVG drawn here; a little script of our own adds hover
//! and zoom. The figures come from the same replay as `cudatrace report`.

mod call_site_tables;
mod chart;
mod chart_drawing;
mod chart_filling;
mod chart_tally;
mod html_text;
mod owner_chart;
mod page;
mod rank_charts;

pub use page::page;
