//! The page itself: its sections, in order, around the charts and tables
//! that the modules beside it make.

use super::call_site_tables::{sites_table, stack_html, tensors_html};
use super::chart_drawing::chart_html;
use super::chart_filling::{ChartsFilling, PageCharts};
use super::html_text::escape;
use crate::outputs::steps_text;
use crate::wording::device_label;
use crate::wording::oom_lines;
use crate::wording::switch_lines;
use crate::wording::{bytes, count, oom_state_not_kept, torch_bytes_text};
use crate::wording::{silent_children_line, unrecorded_line};
use cudatrace_analysis::Progress;
use cudatrace_analysis::{
    growing_sites, silent_children, FramesShown, OomSites, ProcessIndex, ProcessSummary, Summary, TraceIndex,
};
use cudatrace_analysis::{StepCounts, UnreadBlock};
use std::fmt::Write as _;

/// The page for `index`, and the blocks of events that could not be read
/// again; `frames` says how much of each stack its tables show.
pub fn page(
    index: &TraceIndex,
    counts: StepCounts,
    frames: FramesShown,
    progress: &Progress,
) -> (String, Vec<UnreadBlock>) {
    // The steps are found before the replay: the charts are finer over them.
    let (boundaries, _) = counts.found(index);
    let axes_from = boundaries.clone();
    let (summary, charts) = Summary::build_found_per_process(index, boundaries, progress, &|selected| {
        ChartsFilling::new(index, &axes_from, selected)
    });
    let charts = charts.finish(&summary);
    let title = index
        .header
        .as_ref()
        .map_or_else(|| index.path.display().to_string(), |h| h.command.join(" "));
    let mut page = head_html(index, &title);
    page += &incomplete_html(index, &summary);
    // The answers open the page, as they open the report: the memory
    // limit's verdict, what ran out of memory or was refused, what keeps
    // growing.
    page += &limit_html(index, &summary);
    page += &failures_html(index, &summary);
    page += &growth_html(index, &summary, frames);
    page += &super::rank_charts::ranks_html(index, &summary, &charts);
    page += &processes_html(index, &summary);
    page += &footprints_html(index, &summary, &charts);
    page += &devices_html(index, &summary, &charts, frames);
    page += &notes_html(index, &summary);
    let _ = write!(page, "<script>\n{}</script>\n</body></html>\n", include_str!("page.js"));
    (page, summary.stream_errors)
}

/// The document's head, its title and where it was traced.
fn head_html(index: &TraceIndex, title: &str) -> String {
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>cudatrace: {}</title>\n<style>\n{}</style></head><body>\n",
        escape(title),
        include_str!("page.css")
    );
    let _ = writeln!(out, "<h1>GPU memory of <code>{}</code></h1>", escape(title));
    if let Some(h) = &index.header {
        let _ = writeln!(
            out,
            "<p class=\"note\">traced on {} by cudatrace {}; {}, {}.</p>",
            escape(&h.host),
            escape(&h.tracer_version),
            count(index.processes.len() as u64, "process", "processes"),
            count(index.memory_events, "event", "events")
        );
    }
    out
}

/// What the trace lacks, first: it changes every answer below.
fn incomplete_html(index: &TraceIndex, summary: &Summary) -> String {
    let mut out = String::new();
    let lost = summary.lost_events(index);
    if lost > 0 || !index.complete || index.damage.is_some() {
        let _ = writeln!(
            out,
            "<p><b>This trace is incomplete:</b> it lacks {}{}.</p>",
            count(lost, "event", "events"),
            if index.complete { "" } else { " and has no footer" }
        );
    }
    if let Some(line) = unrecorded_line(&index.unrecorded) {
        let _ = writeln!(out, "<p><b>This trace is incomplete:</b> {}.</p>", escape(&line));
    }
    if let Some(line) = switch_lines::paused_line(index) {
        let _ = writeln!(out, "<p><b>Paused:</b> {}.</p>", escape(&line));
    }
    if let Some(line) = crate::wording::fold_lines::detail_span(index) {
        let _ = writeln!(out, "<p><b>Folded:</b> {}.</p>", escape(&line));
    }
    out
}

/// The memory limit's verdict (`run --limit`), as the text report opens
/// with it; nothing when the job ran without a limit.
fn limit_html(index: &TraceIndex, summary: &Summary) -> String {
    let verdicts = cudatrace_analysis::limit_verdicts(index, summary);
    if verdicts.is_empty() {
        return String::new();
    }
    let mut out = String::from("<h2>Memory limit</h2>\n<ul class=\"limit\">\n");
    for verdict in &verdicts {
        let _ = writeln!(
            out,
            "<li>pid {}, {}: {}</li>",
            index.processes[verdict.process].start.pid,
            escape(&crate::wording::device_label(verdict.device)),
            escape(&crate::wording::limit_lines::verdict_line(index, verdict))
        );
    }
    out += "</ul>\n";
    out
}

/// Every out-of-memory failure and refusal of the run, in time order;
/// nothing when nothing failed.
fn failures_html(index: &TraceIndex, summary: &Summary) -> String {
    let lines = oom_lines::opening_lines(index, summary);
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("<h2>Out of memory</h2>\n<ul class=\"failures\">\n");
    for line in lines {
        let _ = writeln!(out, "<li>{}</li>", escape(&line));
    }
    out + "</ul>\n"
}

/// Each process's call sites that keep growing, with the steps (or low
/// points) they were measured at; nothing where no process has either.
fn growth_html(index: &TraceIndex, summary: &Summary, frames: FramesShown) -> String {
    let processes: String = index
        .processes
        .iter()
        .zip(&summary.processes)
        .map(|(info, process)| growing_html(index, info, process, frames))
        .collect();
    if processes.is_empty() {
        return String::new();
    }
    format!("<h2>What keeps growing</h2>\n{processes}")
}

/// One row per process image: pid, parent, command, exit and events.
fn processes_html(index: &TraceIndex, summary: &Summary) -> String {
    let mut out = String::from("<h2>Processes</h2>\n<table><tr><th>pid</th><th>parent</th><th>image</th><th>command</th><th>exit</th><th>events</th></tr>\n");
    for (info, process) in index.processes.iter().zip(&summary.processes) {
        let s = &info.start;
        let exit = escape(&crate::wording::image_end_text(info.end.as_ref()));
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td class=\"num\">{}</td></tr>",
            s.pid,
            s.ppid,
            s.image,
            escape(&s.argv.join(" ")),
            exit,
            process.memory.events
        );
    }
    out + "</table>\n"
}

/// Per process and device: where the driver's memory went, as a table and
/// a chart by owner and category.
fn footprints_html(index: &TraceIndex, summary: &Summary, charts: &PageCharts) -> String {
    let mut out = String::new();
    for (process, (info, footprints)) in index.processes.iter().zip(&summary.footprints).enumerate() {
        for footprint in footprints {
            let tensors = summary.processes[process]
                .tensors
                .devices
                .get(&cudatrace_analysis::DeviceKey::Gpu(footprint.device));
            let _ = writeln!(
                out,
                "<h2>Where the memory went: pid {}, {}</h2>",
                info.start.pid,
                escape(&crate::outputs::footprint_table::device_name(
                    footprint.device,
                    footprint.info.as_ref()
                ))
            );
            out += &crate::outputs::footprint_table::html(footprint, index.start_ns(), tensors, escape);
            let chart = charts.owners[process].get(&footprint.device);
            if let (Some(chart), Some(peak)) = (chart, footprint.at_peak.as_ref()) {
                out += &chart_html(
                    chart,
                    "chart owners",
                    peak.reference.bytes,
                    peak.reference.time_ns,
                    // The driver-used peak can come before any allocation
                    // (a context alone): the chart then opens at the peak.
                    charts.first_memory_ns[process].map(|first| first.min(peak.reference.time_ns)),
                    &step_starts(&summary.processes[process]),
                );
            }
        }
    }
    out
}

/// Per process and device: its tensors where PyTorch's were recorded, then
/// the driver's memory by call site over time, at the peak and at exit,
/// and its out-of-memory failures.
fn devices_html(index: &TraceIndex, summary: &Summary, charts: &PageCharts, frames: FramesShown) -> String {
    let mut out = String::new();
    for (number, (info, process)) in index.processes.iter().zip(&summary.processes).enumerate() {
        let first_ns = charts.first_memory_ns[number];
        let steps = step_starts(process);
        for (device, stats) in &process.devices {
            let _ = writeln!(
                out,
                "<h2>pid {} — {}</h2>\n<p>{}, {}; peak {}, live at exit {}.</p>",
                info.start.pid,
                device_label(*device),
                count(stats.allocations, "allocation", "allocations"),
                count(stats.frees, "free", "frees"),
                bytes(stats.peak),
                bytes(stats.current)
            );
            let chart = charts.sites[number].get(device);
            // Where PyTorch's tensors were recorded, they answer first: the
            // driver's view below is mostly PyTorch's cache.
            if let (Some(tensors), Some(chart)) = (process.tensors.devices.get(device), chart) {
                out += &tensors_html(index, info, tensors, chart, first_ns, &steps, frames);
                out += "<h3>All driver memory (PyTorch's segments by the call that reserved them)</h3>\n";
            }
            if let Some(chart) = chart {
                out += &chart_html(chart, "chart", stats.peak, stats.peak_time_ns, first_ns, &steps);
            }
            let at_peak = format!("Memory at the peak of {}", bytes(stats.peak));
            out += &sites_table(index, info, frames, &at_peak, &stats.peak_by_stack);
            out += &sites_table(index, info, frames, "Memory live at exit (leaks)", &stats.live_by_stack);
            if !stats.ooms.is_empty() {
                out += "<h3>Out-of-memory failures</h3>\n<table class=\"ooms\"><tr><th>when</th><th>asked for</th><th>free</th><th>total</th><th>API</th><th>held then</th><th>stack</th></tr>\n";
                for oom in stats.ooms.iter().take(OOMS_ON_THE_PAGE) {
                    let held = oom
                        .held
                        .as_ref()
                        .map_or_else(oom_state_not_kept, |held| match &held.tensors {
                            Some((now, _)) => format!("{}; {}", bytes(held.live_bytes), torch_bytes_text(now)),
                            None => bytes(held.live_bytes),
                        });
                    let _ = writeln!(
                        out,
                        "<tr><td class=\"num\">{:.3} s</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        oom.time_ns.saturating_sub(index.start_ns()) as f64 / 1e9,
                        bytes(oom.requested_bytes),
                        bytes(oom.device_free),
                        bytes(oom.device_total),
                        if oom.by_limit {
                            format!("{} (refused by the memory limit: free is what it had left, total the limit)", oom.api)
                        } else {
                            oom.api.to_string()
                        },
                        escape(&held),
                        stack_html(index, info, oom.stack, frames)
                    );
                }
                out += "</table>\n";
                let total = stats.oom_sites.total();
                if total > OOMS_ON_THE_PAGE as u64 {
                    out += &oom_sites_html(index, info, frames, total, &stats.oom_sites);
                }
                // What held the device at the first failure, by call site.
                if let Some(held) = stats.ooms.first().and_then(|oom| oom.held.as_ref()) {
                    let (tensors, by_stack) = held.listed();
                    let title = if tensors {
                        "Tensors live at the first out-of-memory failure"
                    } else {
                        "Memory live at the first out-of-memory failure"
                    };
                    out += &sites_table(index, info, frames, title, by_stack);
                }
            }
        }
    }
    out
}

/// Each step's number and start, for the charts' marks.
/// Failures a device's table lists on the page: a program that retries
/// in a loop fails millions of times, and a page of each would not open.
const OOMS_ON_THE_PAGE: usize = 100;

/// Every failure of a device counted by call site, below the table of the
/// first ones, most frequent first.
fn oom_sites_html(
    index: &TraceIndex,
    info: &ProcessIndex,
    frames: FramesShown,
    total: u64,
    sites: &OomSites,
) -> String {
    let mut out = format!(
        "<p>The first {OOMS_ON_THE_PAGE} of {total} failures are listed above (`cudatrace report --all-ooms` \
         lists each); every one, by call site:</p>\n<table class=\"ooms\"><tr><th>failures</th><th>asked for</th>\
         <th>first</th><th>last</th><th>API</th><th>stack</th></tr>\n"
    );
    let sites = sites.most_frequent_first();
    let seconds = |ns: u64| ns.saturating_sub(index.start_ns()) as f64 / 1e9;
    for site in sites {
        let asked = if site.smallest == site.largest {
            bytes(site.smallest)
        } else {
            format!("{} to {}", bytes(site.smallest), bytes(site.largest))
        };
        let api = if site.by_limit {
            format!("{} (refused by the memory limit)", site.api)
        } else {
            site.api.to_string()
        };
        let _ = writeln!(
            out,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.3} s</td><td class=\"num\">{:.3} s</td><td>{}</td><td>{}</td></tr>",
            site.count,
            escape(&asked),
            seconds(site.first_ns),
            seconds(site.last_ns),
            escape(&api),
            stack_html(index, info, site.stack, frames)
        );
    }
    out + "</table>\n"
}

fn step_starts(process: &ProcessSummary) -> Vec<(u64, u64)> {
    process.steps.as_ref().map_or_else(Vec::new, |steps| {
        steps.records.iter().map(|r| (r.first, r.start_ns)).collect()
    })
}

/// A process's call sites that keep growing from one step to the next:
/// where a leak is.
fn growing_html(index: &TraceIndex, info: &ProcessIndex, process: &ProcessSummary, frames: FramesShown) -> String {
    let growing = growing_sites(index, info, process);
    let name = format!("pid {}", info.start.pid);
    let Some(heading) = steps_text::growth_heading(&name, process, !growing.is_empty()) else {
        return String::new();
    };
    let mut out = format!("<p class=\"growth\">{}</p>\n", escape(heading.trim_end()));
    if growing.is_empty() {
        return out;
    }
    out += "<table class=\"growing\"><tr><th>growing</th><th>device</th><th>rate</th><th>measured</th><th>bytes, first to last</th><th>stack</th></tr>\n";
    for site in &growing {
        let [rate, over, last] = steps_text::growing_figures(site);
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(&site.call_site),
            device_label(site.device),
            escape(&rate),
            escape(&over),
            escape(&last),
            stack_html(index, info, site.stack, frames)
        );
    }
    out + "</table>\n"
}

/// What does not change the answer, last: children that left no spool, and
/// the footprint tables' notes (how NVML was read, what a figure rests on).
fn notes_html(index: &TraceIndex, summary: &Summary) -> String {
    let mut notes = Vec::new();
    if let Some(line) = silent_children_line(
        &silent_children(index),
        &cudatrace_analysis::unnamed_children(&index.unrecorded),
    ) {
        notes.push(line);
    }
    for (info, footprints) in index.processes.iter().zip(&summary.footprints) {
        for footprint in footprints {
            for note in &footprint.notes {
                let note = crate::wording::note_text(note);
                notes.push(format!("pid {}, device {}: {note}", info.start.pid, footprint.device));
            }
        }
    }
    if notes.is_empty() {
        return String::new();
    }
    let mut out = String::from("<h2>Notes</h2>\n<ul class=\"notes\">\n");
    for note in notes {
        let _ = writeln!(out, "<li>{}.</li>", escape(note.trim_end_matches('.')));
    }
    out + "</ul>\n"
}
