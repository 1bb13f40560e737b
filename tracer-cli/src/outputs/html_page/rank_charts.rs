//! Every rank in one view, on the page: the table `report` opens with, and
//! each row's memory over time as a small chart of its own, all on one
//! time axis and one byte scale, so that the rank that stands out is seen
//! at a glance.

use super::chart::Chart;
use super::chart_drawing::y_ticks;
use super::chart_filling::PageCharts;
use super::html_text::escape;
use crate::wording::rank_lines::{self, COLUMNS};
use crate::wording::{bytes, duration};
use cudatrace_analysis::{DeviceKey, RankTable, Summary, TraceIndex};
use std::fmt::Write as _;

/// One small chart's size in SVG units.
const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 70.0;

/// The section; nothing when the trace holds a single process and device.
pub(super) fn ranks_html(index: &TraceIndex, summary: &Summary, charts: &PageCharts) -> String {
    let Some(table) = RankTable::of(index, summary) else {
        return String::new();
    };
    let start_ns = index.start_ns();
    let mut out = format!("<h2>Every rank</h2>\n<p>{}</p>\n", escape(&rank_lines::title(&table)));
    out += "<table class=\"ranks\">\n<tr>";
    for column in COLUMNS {
        let _ = write!(out, "<th>{}</th>", escape(column));
    }
    out += "</tr>\n";
    for (number, cells) in rank_lines::row_cells(&table, start_ns).into_iter().enumerate() {
        let outlier = table.outlier.as_ref().is_some_and(|o| o.row == number);
        out += if outlier { "<tr class=\"outlier\">" } else { "<tr>" };
        for cell in cells {
            let _ = write!(out, "<td>{}</td>", escape(&cell));
        }
        out += "</tr>\n";
    }
    out += "</table>\n";
    if let Some(note) = rank_lines::allocations_peak_note(&table) {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(note));
    }
    let _ = writeln!(
        out,
        "<p class=\"outlier\">{}</p>",
        escape(&rank_lines::outlier_text(&table, start_ns))
    );
    out += &small_multiples(&table, charts, start_ns);
    out
}

/// Each row's chart, by the footprint (every byte) where its device was
/// read, else by its allocations.
fn row_chart(charts: &PageCharts, process: usize, device: u8) -> Option<&Chart> {
    charts.owners[process]
        .get(&device)
        .or_else(|| charts.sites[process].get(&DeviceKey::Gpu(device)))
}

/// Total bytes per bin of a chart, with each bin's time.
fn totals(chart: &Chart) -> Vec<(u64, u64)> {
    chart
        .columns()
        .iter()
        .enumerate()
        .map(|(bin, column)| {
            let time = chart.axis.t0 + chart.axis.offset_of(bin);
            (time, column.iter().fold(0u64, |sum, v| sum.saturating_add(*v)))
        })
        .collect()
}

/// One small chart per row, sharing the time axis (the trace's start to
/// the last row's end) and the byte scale (the highest peak).
fn small_multiples(table: &RankTable, charts: &PageCharts, start_ns: u64) -> String {
    let series: Vec<Option<Vec<(u64, u64)>>> = table
        .rows
        .iter()
        .map(|row| row_chart(charts, row.process, row.device).map(totals))
        .collect();
    let end_ns = series
        .iter()
        .flatten()
        .filter_map(|points| points.last().map(|p| p.0))
        .chain(table.rows.iter().map(|r| r.peak_time_ns))
        .max()
        .unwrap_or(start_ns);
    let span = end_ns.saturating_sub(start_ns).max(1) as f64;
    let highest = table
        .rows
        .iter()
        .map(|r| r.peak_bytes)
        .chain(series.iter().flatten().flat_map(|points| points.iter().map(|p| p.1)));
    let axis_top = *y_ticks(highest.max().unwrap_or(1)).last().unwrap_or(&1) as f64;
    let x = |time: u64| time.saturating_sub(start_ns) as f64 / span * WIDTH;
    let y = |value: u64| HEIGHT - value as f64 / axis_top * HEIGHT;
    let mut out = format!(
        "<div class=\"small-multiples\" data-end-s=\"{:.6}\" data-axis-top=\"{axis_top}\">\n",
        span / 1e9
    );
    for (row, points) in table.rows.iter().zip(&series) {
        let name = format!(
            "{} on {}, device {}",
            rank_lines::process_name(&row.place, row.pid),
            row.place.host,
            row.device
        );
        let _ = write!(
            out,
            "<div class=\"small-chart\"><span class=\"small-name\">{}</span><svg class=\"small\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" preserveAspectRatio=\"none\" xmlns=\"http://www.w3.org/2000/svg\">",
            escape(&name)
        );
        if let Some(points) = points {
            let mut path = format!("M{:.1},{HEIGHT}", x(points[0].0));
            for &(time, value) in points {
                let _ = write!(path, " L{:.1},{:.1}", x(time), y(value));
            }
            let _ = write!(path, " L{:.1},{HEIGHT} Z", x(points[points.len() - 1].0));
            let _ = write!(
                out,
                "<path d=\"{path}\" fill=\"#4e79a7\" fill-opacity=\"0.55\" stroke=\"#4e79a7\" vector-effect=\"non-scaling-stroke\"/>"
            );
        }
        let _ = writeln!(
            out,
            "<circle class=\"peak\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#d00\"><title>peak {} at {}</title></circle></svg><span class=\"small-peak\">{}</span></div>",
            x(row.peak_time_ns),
            y(row.peak_bytes),
            bytes(row.peak_bytes),
            duration(row.peak_time_ns.saturating_sub(start_ns)),
            bytes(row.peak_bytes)
        );
    }
    let _ = writeln!(
        out,
        "<div class=\"small-axis\">0 s to {}, each chart up to {}</div>\n</div>",
        duration(end_ns.saturating_sub(start_ns)),
        bytes(axis_top as u64)
    );
    out
}
