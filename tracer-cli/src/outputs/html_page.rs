//! The HTML report: one self-contained page, viewable with no
//! network: per process and device, a chart of live bytes over time
//! stacked by the top call sites with the peak marked, and tables of
//! memory at the peak, memory live at exit and OOMs, by call site.
//!
//! The charts are SVG drawn here; a little script of our own adds hover
//! and zoom. The figures come from the same replay as `cudatrace report`.

use crate::analysis::{
    call_sites, headline, headline_text, site_key, stack_lines, ByStack, Change, DeviceKey, Frame, FramesShown,
    ProcessIndex, Replay, Step, Summary, TensorStats, TraceIndex, NO_STACK,
};
use crate::system::progress::Progress;
use crate::system::wording::{bytes, count};
use owner_chart::OwnerChart;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io;

mod chart;
mod owner_chart;

use chart::{Chart, BINS, SERIES};

/// Chart size in SVG units.
const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 260.0;
/// Call sites listed per table.
const TABLE_ROWS: usize = 20;
/// Lines shown per stack, unless every frame is asked for.
const FRAMES_SHOWN: usize = 12;
const COLORS: [&str; SERIES + 5] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#bab0ac", "#9c755f",
    "#86bcb6", "#d37295", "#79706e",
];

/// The page for `index`, and the blocks of events that could not be read
/// again; `frames` says how much of each stack its tables show.
pub fn page(index: &TraceIndex, frames: FramesShown, progress: &Progress) -> io::Result<(String, Vec<String>)> {
    let summary = Summary::build(index, progress);
    progress.next_pass("html");
    let (charts, owner_charts) = fill_charts(index, &summary, progress)?;
    let page = page_html(index, &summary, &charts, &owner_charts, frames);
    Ok((page, summary.stream_errors))
}

/// Every chart's time axis: from the trace's start (the origin of every
/// time on the page) to the process's last event or exit.
fn time_axis(index: &TraceIndex, info: &ProcessIndex) -> (u64, u64) {
    let t0 = index.start_ns();
    let end = [info.last_time_ns, info.end.as_ref().and_then(|e| e.exit_time_ns)]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(t0);
    (t0, end.saturating_sub(t0))
}

/// Per process: charts by call site per device, and charts by owner and category per device ordinal.
type ProcessCharts = (Vec<BTreeMap<DeviceKey, Chart>>, Vec<BTreeMap<u8, OwnerChart>>);

/// The second pass: live bytes per top call site, and per owner and
/// category, per process and device.
fn fill_charts(index: &TraceIndex, summary: &Summary, progress: &Progress) -> io::Result<ProcessCharts> {
    // Per process and device: the series of each charted call site, by key.
    let mut site_series: Vec<BTreeMap<DeviceKey, HashMap<String, usize>>> =
        vec![BTreeMap::new(); index.processes.len()];
    let mut charts: Vec<BTreeMap<DeviceKey, Chart>> = index
        .processes
        .iter()
        .zip(&summary.processes)
        .enumerate()
        .map(|(process_number, (info, process))| {
            let (t0, span) = time_axis(index, info);
            process
                .devices
                .iter()
                .map(|(&device, stats)| {
                    let sites = call_sites(index, info, &stats.peak_by_stack);
                    let mut names = Vec::new();
                    let mut of_site = HashMap::new();
                    for site in sites.iter().take(SERIES) {
                        of_site.insert(site.key.clone(), names.len());
                        names.push(site.name.clone());
                    }
                    names.push("other call sites".to_string());
                    site_series[process_number].insert(device, of_site);
                    let chart = Chart {
                        series_of: HashMap::new(),
                        current: vec![0; names.len()],
                        names,
                        bins: vec![None; BINS],
                        t0,
                        span,
                        ranked_by: None,
                    };
                    (device, chart)
                })
                .collect()
        })
        .collect();
    let mut owner_charts: Vec<BTreeMap<u8, OwnerChart>> = index
        .processes
        .iter()
        .zip(&summary.footprints)
        .map(|(info, footprints)| {
            let (t0, span) = time_axis(index, info);
            footprints
                .iter()
                .map(|f| (f.device, OwnerChart::new(f, t0, span)))
                .collect()
        })
        .collect();
    let mut fill = |step: &Step| {
        let (process, info, event, changes) = (step.process, step.info, step.event, step.changes);
        for chart in owner_charts[process].values_mut() {
            chart.readings_until(event.time_ns.saturating_sub(1));
        }
        if event.op.is_measurement() {
            if let Some(chart) = event.device.and_then(|d| owner_charts[process].get_mut(&d)) {
                chart.measurement(event);
            }
        }
        for change in changes {
            if let Change::Allocated(a) | Change::Freed { allocation: a, .. } = change {
                if let Some(chart) = a
                    .device
                    .filter(|_| a.is_device_memory())
                    .and_then(|d| owner_charts[process].get_mut(&d))
                {
                    chart.change(index, info, change, event.time_ns);
                }
            }
        }
        for change in changes {
            let (sign, a) = match change {
                Change::Allocated(a) => (1i8, a),
                Change::Freed { allocation, .. } => (-1, allocation),
                _ => continue,
            };
            if !a.is_device_memory() {
                continue;
            }
            let Some(chart) = charts[process].get_mut(&DeviceKey::of(a.device)) else {
                continue;
            };
            let other = chart.names.len() - 1;
            let series = *chart.series_of.entry(a.stack).or_insert_with(|| {
                site_series[process]
                    .get(&DeviceKey::of(a.device))
                    .and_then(|sites| sites.get(&site_key(index, info, a.stack)))
                    .copied()
                    .unwrap_or(other)
            });
            let value = &mut chart.current[series];
            *value = if sign > 0 {
                value.saturating_add(a.size)
            } else {
                value.saturating_sub(a.size)
            };
            chart.record(event.time_ns);
        }
    };
    // The summary's replay already named any block that could not be read.
    Replay::new(index, progress).run(&mut [&mut fill])?;
    for chart in owner_charts.iter_mut().flat_map(|charts| charts.values_mut()) {
        chart.readings_until(u64::MAX);
    }
    Ok((charts, owner_charts))
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page_html(
    index: &TraceIndex,
    summary: &Summary,
    charts: &[BTreeMap<DeviceKey, Chart>],
    owner_charts: &[BTreeMap<u8, OwnerChart>],
    frames: FramesShown,
) -> String {
    let title = index
        .header
        .as_ref()
        .map_or_else(|| index.path.display().to_string(), |h| h.command.join(" "));
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>cudatrace: {}</title>\n<style>\n{}</style></head><body>\n",
        escape(&title),
        include_str!("html_page/page.css")
    );
    let _ = writeln!(out, "<h1>GPU memory of <code>{}</code></h1>", escape(&title));
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
    let lost = summary.lost_events(index);
    if lost > 0 || !index.complete || index.damage.is_some() {
        let _ = writeln!(
            out,
            "<p><b>This trace is incomplete:</b> it lacks {}{}.</p>",
            count(lost, "event", "events"),
            if index.complete { "" } else { " and has no footer" }
        );
    }
    if let Some(line) = crate::analysis::unrecorded_line(&index.unrecorded) {
        let _ = writeln!(out, "<p><b>This trace is incomplete:</b> {}.</p>", escape(&line));
    }
    if let Some(line) = crate::analysis::silent_children_line(&crate::analysis::silent_children(index)) {
        let _ = writeln!(out, "<p>{}.</p>", escape(&line));
    }
    out += "<h2>Processes</h2>\n<table><tr><th>pid</th><th>parent</th><th>image</th><th>command</th><th>exit</th><th>events</th></tr>\n";
    for (info, process) in index.processes.iter().zip(&summary.processes) {
        let s = &info.start;
        let exit = info
            .end
            .as_ref()
            .map_or("unknown".to_string(), |e| match (e.exit_status, e.still_running) {
                (_, true) => "still running".to_string(),
                (Some(status), _) => status.to_string(),
                (None, _) => "unknown".to_string(),
            });
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
    out += "</table>\n";
    for (((info, footprints), owner_charts), process) in index
        .processes
        .iter()
        .zip(&summary.footprints)
        .zip(owner_charts)
        .zip(&summary.processes)
    {
        for footprint in footprints {
            let tensors = process.tensors.devices.get(&DeviceKey::Gpu(footprint.device));
            let _ = writeln!(
                out,
                "<h2>Where the memory went: pid {}, device {}</h2>\n<pre class=\"footprint\">{}</pre>",
                info.start.pid,
                footprint.device,
                escape(&super::footprint_table::text(
                    info,
                    footprint,
                    index.start_ns(),
                    tensors
                ))
            );
            if let (Some(chart), Some(peak)) = (owner_charts.get(&footprint.device), footprint.at_peak.as_ref()) {
                out += &chart_html(
                    &chart.chart,
                    "chart owners",
                    peak.reference.bytes,
                    peak.reference.time_ns,
                );
            }
        }
    }
    for ((info, process), charts) in index.processes.iter().zip(&summary.processes).zip(charts) {
        for (device, stats) in &process.devices {
            let _ = writeln!(
                out,
                "<h2>pid {} — {}</h2>\n<p>{}, {}; peak {}, live at exit {}.</p>",
                info.start.pid,
                device.label(),
                count(stats.allocations, "allocation", "allocations"),
                count(stats.frees, "free", "frees"),
                bytes(stats.peak),
                bytes(stats.current)
            );
            // Where PyTorch's tensors were recorded, they answer first: the
            // driver's view below is mostly PyTorch's cache.
            if let (Some(tensors), Some(chart)) = (process.tensors.devices.get(device), charts.get(device)) {
                out += &tensors_html(index, info, tensors, chart, frames);
                out += "<h3>All driver memory (PyTorch's segments by the call that reserved them)</h3>\n";
            }
            if let Some(chart) = charts.get(device) {
                out += &chart_html(chart, "chart", stats.peak, stats.peak_time_ns);
            }
            out += &sites_table(
                index,
                info,
                frames,
                &format!("Memory at the peak of {}", bytes(stats.peak)),
                &stats.peak_by_stack,
            );
            out += &sites_table(index, info, frames, "Memory live at exit (leaks)", &stats.live_by_stack);
            if !stats.ooms.is_empty() {
                out += "<h3>Out-of-memory failures</h3>\n<table class=\"ooms\"><tr><th>when</th><th>asked for</th><th>free</th><th>total</th><th>API</th><th>stack</th></tr>\n";
                for oom in &stats.ooms {
                    let _ = writeln!(
                        out,
                        "<tr><td class=\"num\">{:.3} s</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
                        oom.time_ns.saturating_sub(index.start_ns()) as f64 / 1e9,
                        bytes(oom.requested_bytes),
                        bytes(oom.device_free),
                        bytes(oom.device_total),
                        oom.api,
                        stack_html(index, info, oom.stack, frames)
                    );
                }
                out += "</table>\n";
            }
        }
    }
    let _ = write!(
        out,
        "<script>\n{}</script>\n</body></html>\n",
        include_str!("html_page/page.js")
    );
    out
}

/// PyTorch's tensors on a device: allocated and inactive bytes over time,
/// on the time axis of the device's own chart, and their call sites.
fn tensors_html(
    index: &TraceIndex,
    info: &ProcessIndex,
    tensors: &TensorStats,
    device_chart: &Chart,
    frames: FramesShown,
) -> String {
    let mut chart = Chart {
        series_of: HashMap::new(),
        names: vec![
            "allocated (tensors)".to_string(),
            "reserved, not allocated (inactive)".to_string(),
        ],
        current: vec![0; 2],
        bins: vec![None; BINS],
        t0: device_chart.t0,
        span: device_chart.span,
        ranked_by: Some(0),
    };
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

/// Ticks of a y-axis that reaches at least `top` bytes: four to eight
/// steps of 1, 2 or 5 times a power of ten of one unit (B, KiB, MiB, …).
fn y_ticks(top: u64) -> Vec<u64> {
    let top = top.max(1);
    let mut unit = 1u64;
    while unit < (1 << 40) && top / unit >= 1024 {
        unit <<= 10;
    }
    let in_units = top as f64 / unit as f64;
    let mut step = 1u64;
    'search: for power in [1u64, 10, 100, 1000] {
        for factor in [1u64, 2, 5] {
            step = factor * power;
            if in_units / step as f64 <= 6.0 {
                break 'search;
            }
        }
    }
    // Under one unit (fewer than 1024 bytes), steps of whole bytes.
    let step = (step * unit).max(1);
    let steps = top.div_ceil(step);
    (0..=steps).map(|k| k.saturating_mul(step)).collect()
}

/// One chart: the series stacked over time with a y-axis in bytes, the
/// peak marked at its moment, and the state at the end beside it.
fn chart_html(chart: &Chart, class: &str, peak: u64, peak_time_ns: u64) -> String {
    let columns = chart.columns();
    let highest = columns
        .iter()
        .map(|c| c.iter().fold(0u64, |sum, v| sum.saturating_add(*v)))
        .max()
        .unwrap_or(0);
    let ticks = y_ticks(highest.max(peak));
    let axis_top = *ticks.last().unwrap_or(&1) as f64;
    let x = |bin: usize| bin as f64 * WIDTH / (BINS - 1) as f64;
    let y = |value: u64| HEIGHT - value as f64 / axis_top * HEIGHT;
    let mut svg = format!("<svg class=\"plot\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" preserveAspectRatio=\"none\" xmlns=\"http://www.w3.org/2000/svg\">");
    for &tick in &ticks[1..] {
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"0\" x2=\"{WIDTH}\" y1=\"{0:.1}\" y2=\"{0:.1}\" stroke=\"#e4e4e4\" vector-effect=\"non-scaling-stroke\"/>",
            y(tick)
        );
    }
    let mut exit_bar = format!("<svg class=\"exit\" viewBox=\"0 0 40 {HEIGHT}\" preserveAspectRatio=\"none\" xmlns=\"http://www.w3.org/2000/svg\">");
    let mut legend = String::new();
    let mut data_series = Vec::new();
    let mut below = vec![0u64; BINS];
    let mut below_at_exit = 0u64;
    let peak_offset = peak_time_ns.saturating_sub(chart.t0).min(chart.span);
    let peak_bin = chart.bin_of(peak_time_ns);
    for (series, name) in chart.names.iter().enumerate() {
        if columns.iter().all(|c| c[series] == 0) && chart.current[series] == 0 {
            continue;
        }
        let color = COLORS[series.min(COLORS.len() - 1)];
        let mut path = String::new();
        for (bin, column) in columns.iter().enumerate() {
            let _ = write!(
                path,
                "{}{:.1},{:.1}",
                if bin == 0 { "M" } else { "L" },
                x(bin),
                y(below[bin].saturating_add(column[series]))
            );
        }
        for bin in (0..BINS).rev() {
            let _ = write!(path, "L{:.1},{:.1}", x(bin), y(below[bin]));
        }
        path.push('Z');
        let _ = write!(
            svg,
            "<path class=\"series\" data-series=\"{series}\" fill=\"{color}\" fill-opacity=\"0.85\" d=\"{path}\"><title>{}</title></path>",
            escape(name)
        );
        let at_exit = chart.current[series];
        let _ = write!(
            exit_bar,
            "<rect x=\"4\" width=\"32\" y=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\" fill-opacity=\"0.85\"><title>{}: {} at the end</title></rect>",
            y(below_at_exit.saturating_add(at_exit)),
            y(below_at_exit) - y(below_at_exit.saturating_add(at_exit)),
            escape(name),
            bytes(at_exit)
        );
        below_at_exit = below_at_exit.saturating_add(at_exit);
        let at_peak = columns.get(peak_bin).map_or(0, |c| c[series]);
        let _ = write!(
            legend,
            "<span data-bytes-at-peak=\"{at_peak}\"><i style=\"background:{color}\"></i><b>{}</b> {} at the peak, {} at the end</span>",
            escape(name),
            bytes(at_peak),
            bytes(at_exit)
        );
        for (bin, column) in columns.iter().enumerate() {
            below[bin] = below[bin].saturating_add(column[series]);
        }
        data_series
            .push(serde_json::json!({"name": name, "values": columns.iter().map(|c| c[series]).collect::<Vec<u64>>(), "at_end": at_exit}));
    }
    let _ = write!(
        svg,
        "<line class=\"peak\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"0\" y2=\"{HEIGHT}\" stroke=\"#d00\" stroke-dasharray=\"4 3\" vector-effect=\"non-scaling-stroke\"><title>peak {1}</title></line><line class=\"peak-level\" x1=\"{2:.1}\" x2=\"{3:.1}\" y1=\"{4:.1}\" y2=\"{4:.1}\" stroke=\"#d00\" stroke-width=\"2\" vector-effect=\"non-scaling-stroke\"/></svg>",
        x(peak_bin),
        bytes(peak),
        (x(peak_bin) - 24.0).max(0.0),
        (x(peak_bin) + 24.0).min(WIDTH),
        y(peak)
    );
    exit_bar += "</svg>";
    let mut y_axis = String::new();
    for &tick in &ticks {
        let _ = write!(
            y_axis,
            "<span class=\"ytick\" data-bytes=\"{tick}\" style=\"bottom:{:.2}%\">{}</span>",
            tick as f64 / axis_top * 100.0,
            bytes(tick)
        );
    }
    let seconds = |ns: u64| ns as f64 / 1e9;
    let times: Vec<f64> = (0..BINS)
        .map(|bin| seconds(chart.span) * bin as f64 / (BINS - 1) as f64)
        .collect();
    let data = serde_json::json!({"width": WIDTH, "height": HEIGHT, "times": times, "series": data_series});
    // `</` inside a script would end it early.
    let data = data.to_string().replace("</", "<\\/");
    let ticks_text: Vec<String> = ticks.iter().map(u64::to_string).collect();
    format!(
        "<div class=\"{class}\" data-expected-series=\"{}\" data-peak-bytes=\"{peak}\" data-peak-bin=\"{peak_bin}\" data-y-ticks=\"{}\"><div class=\"plotrow\"><div class=\"yaxis\">{y_axis}</div>{svg}{exit_bar}</div><div class=\"axis\"><span>0 s (the trace's start)</span><span>peak {} at {} (red lines); drag to zoom, double-click to reset</span><span>{} (the bar on the right: the end)</span></div><div class=\"legend\">{legend}</div><div class=\"tip\"></div><script type=\"application/json\" class=\"data\">{data}</script></div>\n",
        data_series.len(),
        ticks_text.join(","),
        bytes(peak),
        duration(peak_offset),
        duration(chart.span)
    )
}

/// `1.234 s`, or `12.345 ms` under a second.
fn duration(ns: u64) -> String {
    if ns < 1_000_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.3} s", ns as f64 / 1e9)
    }
}

fn sites_table(
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
            super::parts_text(&site.parts).map_or_else(String::new, |parts| format!(
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
fn stack_html(index: &TraceIndex, info: &ProcessIndex, stack: u32, frames: FramesShown) -> String {
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
    let lines = stack_lines(resolved, frames);
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
