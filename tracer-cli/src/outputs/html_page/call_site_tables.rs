//! The page's tables of call sites, with the stack of each site's largest
//! allocation, and PyTorch's tensors on a device: their chart and tables.

use super::chart::Chart;
use super::chart_drawing::chart_html;
use super::html_text::escape;
use crate::wording::stack_texts;
use crate::wording::{bytes, count};
use cudatrace_analysis::{
    call_sites, headline, headline_text, ByStack, Frame, FramesShown, ProcessIndex, TensorStats, TraceIndex, NO_STACK,
};
use std::fmt::Write as _;

/// Call sites listed per table.
const TABLE_ROWS: usize = 20;
/// Lines shown per stack, unless every frame is asked for.
const FRAMES_SHOWN: usize = 12;

/// PyTorch's tensors on a device: allocated and inactive bytes over time,
/// on the time axis of the device's own chart, and their call sites.
pub(super) fn tensors_html(
    index: &TraceIndex,
    info: &ProcessIndex,
    tensors: &TensorStats,
    device_chart: &Chart,
    first_ns: Option<u64>,
    steps: &[(u64, u64)],
    frames: FramesShown,
) -> String {
    let names = vec![
        "allocated (tensors)".to_string(),
        "reserved, not allocated (inactive)".to_string(),
    ];
    let mut chart = Chart::new(names, device_chart.axis.clone());
    // Each bin at the allocated bytes' highest, as the marked peak is theirs.
    chart.ranked_by = Some(0);
    for point in &tensors.timeline {
        chart.current = vec![point.allocated, point.inactive()];
        chart.record(point.time_ns);
    }
    let mut out = format!(
        "<h3>PyTorch's tensors</h3>\n<p>{}, {}; allocated {} at exit (peak {}), reserved {} at exit (peak {}).</p>\n",
        count(tensors.allocations, "allocation", "allocations"),
        count(tensors.frees, "free", "frees"),
        bytes(tensors.now.allocated),
        bytes(tensors.allocated_peak.allocated),
        bytes(tensors.now.reserved),
        bytes(tensors.reserved_peak)
    );
    out += &chart_html(
        &chart,
        "chart tensors",
        tensors.allocated_peak.allocated,
        tensors.allocated_peak.time_ns,
        first_ns,
        steps,
    );
    out += &sites_table(
        index,
        info,
        frames,
        "Tensors live at exit (leaks)",
        &tensors.live_by_stack,
    );
    out += &sites_table(
        index,
        info,
        frames,
        &format!(
            "Tensors at the allocated peak of {}",
            bytes(tensors.allocated_peak.allocated)
        ),
        &tensors.peak_by_stack,
    );
    out
}

pub(super) fn sites_table(
    index: &TraceIndex,
    info: &ProcessIndex,
    frames: FramesShown,
    title: &str,
    by_stack: &ByStack,
) -> String {
    let sites = call_sites(index, info, by_stack);
    if sites.is_empty() {
        return format!("<h3>{}</h3>\n<p class=\"note\">none</p>\n", escape(title));
    }
    let mut out = format!(
        "<h3>{}</h3>\n<table class=\"sites\"><tr><th>bytes</th><th>allocations</th><th>call site</th><th>stack of its largest allocation</th></tr>\n",
        escape(title)
    );
    for site in sites.iter().take(TABLE_ROWS) {
        let _ = writeln!(
            out,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"site\">{}</td><td>{}{}</td></tr>",
            bytes(site.bytes),
            site.allocations,
            escape(&site.name),
            crate::outputs::parts_text(&site.parts).map_or_else(String::new, |parts| format!(
                "<div class=\"parts\">{}</div>",
                escape(&parts)
            )),
            stack_lines_html(&index.frames(info, site.stack), frames)
        );
    }
    if sites.len() > TABLE_ROWS {
        let _ = writeln!(
            out,
            "<tr><td colspan=\"4\">... and {} more call sites</td></tr>",
            sites.len() - TABLE_ROWS
        );
    }
    out + "</table>\n"
}

/// A stack headed by its headline frame.
pub(super) fn stack_html(index: &TraceIndex, info: &ProcessIndex, stack: u32, frames: FramesShown) -> String {
    let resolved = index.frames(info, stack);
    match headline(&resolved) {
        Some(at) => format!(
            "<div class=\"site\">{}</div>{}",
            escape(&headline_text(&resolved[at], false)),
            stack_lines_html(&resolved, frames)
        ),
        None => format!("<span class=\"note\">{NO_STACK}</span>"),
    }
}

/// A stack's lines: folded and at most [`FRAMES_SHOWN`], or every frame.
fn stack_lines_html(resolved: &[Frame], frames: FramesShown) -> String {
    if resolved.is_empty() {
        return format!("<span class=\"note\">{NO_STACK}</span>");
    }
    let lines = stack_texts(resolved, frames);
    let shown = if frames == FramesShown::Full {
        lines.len()
    } else {
        FRAMES_SHOWN
    };
    let mut out: Vec<String> = lines.iter().take(shown).map(|line| escape(line)).collect();
    if lines.len() > shown {
        out.push(format!(
            "... {} more lines (--frames full shows them)",
            lines.len() - shown
        ));
    }
    format!("<pre class=\"stack\">{}</pre>", out.join("\n"))
}
