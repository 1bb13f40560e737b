//! Drawing a filled chart: the series stacked as SVG paths over time with
//! a y-axis in bytes, the peak marked at its moment, the state at the end
//! in a bar beside it, and the figures as JSON for the page's script.

use super::chart::{Chart, SERIES};
use super::html_text::escape;
use crate::wording::bytes;
use std::fmt::Write as _;

/// Chart size in SVG units.
const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 260.0;
const COLORS: [&str; SERIES + 5] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#bab0ac", "#9c755f",
    "#86bcb6", "#d37295", "#79706e",
];

/// Ticks of a y-axis that reaches at least `top` bytes: four to eight
/// steps of 1, 2 or 5 times a power of ten of one unit (B, KiB, MiB, …).
pub(super) fn y_ticks(top: u64) -> Vec<u64> {
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

/// Step starts marked on one chart, at most: past that, every n-th step.
const STEP_MARKS_DRAWN: usize = 200;

/// One chart: the series stacked over time with a y-axis in bytes, the
/// peak marked at its moment, each step's start (`steps`: number and time)
/// marked with a grey line, and the state at the end beside it. It opens
/// on the process's steps where its axis has them, else on the span from
/// `first_ns` (the process's first memory event, within one bin) to the
/// end; the whole run is one click away.
pub(super) fn chart_html(
    chart: &Chart,
    class: &str,
    peak: u64,
    peak_time_ns: u64,
    first_ns: Option<u64>,
    steps: &[(u64, u64)],
) -> String {
    let columns = chart.columns();
    let highest = columns
        .iter()
        .map(|c| c.iter().fold(0u64, |sum, v| sum.saturating_add(*v)))
        .max()
        .unwrap_or(0);
    let ticks = y_ticks(highest.max(peak));
    let axis_top = *ticks.last().unwrap_or(&1) as f64;
    let time_axis = &chart.axis;
    let bins = time_axis.bins();
    let view = opening(chart, first_ns);
    let precision = view.precision;
    let x = |bin: usize| x_of(chart, bin);
    let y = |value: u64| y_of(value, axis_top);
    // The peak's level mark is as wide on screen however much is in view.
    let peak_level_half = 24.0 * (view.to_x - view.from_x) / WIDTH;
    let mut svg = format!(
        "<svg class=\"plot\" viewBox=\"{:.precision$} 0 {:.precision$} {HEIGHT}\" preserveAspectRatio=\"none\" xmlns=\"http://www.w3.org/2000/svg\">",
        view.from_x,
        view.to_x - view.from_x
    );
    for &tick in &ticks[1..] {
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"0\" x2=\"{WIDTH}\" y1=\"{0:.1}\" y2=\"{0:.1}\" stroke=\"#e4e4e4\" vector-effect=\"non-scaling-stroke\"/>",
            y(tick)
        );
    }
    let peak_offset = peak_time_ns.saturating_sub(time_axis.t0).min(time_axis.span);
    let peak_bin = chart.bin_of(peak_time_ns);
    let drawn = draw_series(chart, &columns, axis_top, peak_bin, precision);
    svg += &drawn.paths;
    let every = steps.len().div_ceil(STEP_MARKS_DRAWN).max(1);
    for &(number, time_ns) in steps.iter().step_by(every) {
        let _ = write!(
            svg,
            "<line class=\"step\" x1=\"{0:.precision$}\" x2=\"{0:.precision$}\" y1=\"0\" y2=\"{HEIGHT}\" stroke=\"#888\" stroke-opacity=\"0.6\" vector-effect=\"non-scaling-stroke\"><title>step {number}</title></line>",
            x(chart.bin_of(time_ns))
        );
    }
    let steps_said = match steps.len() {
        0 => String::new(),
        n if every == 1 => format!("; grey lines: the starts of {n} steps"),
        n => format!("; grey lines: every {} of {n} step starts", ordinal(every as u64)),
    };
    let (exit_bar, legend, data_series) = (drawn.exit_bar, drawn.legend, drawn.data);
    let _ = write!(
        svg,
        "<line class=\"peak\" x1=\"{0:.precision$}\" x2=\"{0:.precision$}\" y1=\"0\" y2=\"{HEIGHT}\" stroke=\"#d00\" stroke-dasharray=\"4 3\" vector-effect=\"non-scaling-stroke\"><title>peak {1}</title></line><line class=\"peak-level\" x1=\"{2:.precision$}\" x2=\"{3:.precision$}\" y1=\"{4:.1}\" y2=\"{4:.1}\" stroke=\"#d00\" stroke-width=\"2\" vector-effect=\"non-scaling-stroke\"/></svg>",
        x(peak_bin),
        bytes(peak),
        (x(peak_bin) - peak_level_half).max(0.0),
        (x(peak_bin) + peak_level_half).min(WIDTH),
        y(peak)
    );
    let mut y_axis = String::new();
    for &tick in &ticks {
        let _ = write!(
            y_axis,
            "<span class=\"ytick\" data-bytes=\"{tick}\" style=\"bottom:{:.2}%\">{}</span>",
            tick as f64 / axis_top * 100.0,
            bytes(tick)
        );
    }
    let times: Vec<f64> = (0..bins).map(|bin| time_axis.seconds_of(bin)).collect();
    let data = serde_json::json!({"width": WIDTH, "height": HEIGHT, "times": times, "series": data_series});
    // `</` inside a script would end it early.
    let data = data.to_string().replace("</", "<\\/");
    let ticks_text: Vec<String> = ticks.iter().map(u64::to_string).collect();
    let whole = if view.whole_run {
        ""
    } else {
        " <button type=\"button\" class=\"whole\">show the whole run</button>"
    };
    format!(
        "<div class=\"{class}\" data-expected-series=\"{}\" data-peak-bytes=\"{peak}\" data-peak-bin=\"{peak_bin}\" data-first-bin=\"{}\" data-opens-on=\"{}\" data-steps=\"{}\" data-y-ticks=\"{}\"><div class=\"plotrow\"><div class=\"yaxis\">{y_axis}</div>{svg}{exit_bar}</div><div class=\"axis\"><span class=\"from\">{}</span><span>peak {} at {} (red lines){steps_said}; drag to zoom, double-click to go back{whole}</span><span class=\"to\">{}</span></div><div class=\"legend\">{legend}</div><div class=\"tip\"></div><script type=\"application/json\" class=\"data\">{data}</script></div>\n",
        data_series.len(),
        view.first_bin,
        view.opens_on,
        steps.len(),
        ticks_text.join(","),
        escape(&view.from_said),
        bytes(peak),
        duration(peak_offset),
        escape(&view.to_said)
    )
}

/// What a chart opens on.
struct Opening {
    /// The bin it opens on.
    first_bin: usize,
    /// Where its view starts and ends across the plot, in SVG units.
    from_x: f64,
    to_x: f64,
    /// The view is the whole run: no button to show it.
    whole_run: bool,
    /// `steps` or `first-event`, for the page's script.
    opens_on: &'static str,
    /// Decimals of a place across the plot (SVG units): enough to tell
    /// the bins in view apart, however narrow a part of the run it is.
    precision: usize,
    /// The moments at the view's ends, in words.
    from_said: String,
    to_said: String,
}

/// The view a chart opens on: the process's steps where its axis has them
/// (with at least [`super::chart::BINS_A_STEP`] bins a step of the mean
/// length), else from
/// `first_ns`, the process's first memory event (within one bin), to the
/// end, at least two bins in view, so that the view is never empty.
fn opening(chart: &Chart, first_ns: Option<u64>) -> Opening {
    let axis = &chart.axis;
    let end_said = format!("{} (the bar on the right: the end)", duration(axis.span));
    if let Some(((from, to), steps)) = axis.steps_view {
        let (from_x, to_x) = (axis.place_at(from) * WIDTH, axis.place_at(to) * WIDTH);
        // Ten thousand places across the view, at least.
        let precision = (4.0 - (to_x - from_x).max(1e-9).log10()).ceil().clamp(1.0, 9.0) as usize;
        return Opening {
            first_bin: axis.bin_of(axis.t0 + from),
            from_x,
            to_x,
            precision,
            whole_run: from == 0 && to >= axis.span,
            opens_on: "steps",
            from_said: format!("{} (before step 1)", duration(from)),
            to_said: format!(
                "{} (after step {steps}; the bar on the right: the end of the run, at {})",
                duration(to),
                duration(axis.span)
            ),
        };
    }
    let first_bin = first_ns.map_or(0, |time_ns| chart.bin_of(time_ns)).min(axis.bins() - 2);
    let from_said = if first_bin == 0 {
        "0 s (the trace's start)".to_string()
    } else {
        format!("{} (the first memory event)", duration(axis.offset_of(first_bin)))
    };
    Opening {
        first_bin,
        from_x: x_of(chart, first_bin),
        to_x: WIDTH,
        whole_run: first_bin == 0,
        opens_on: "first-event",
        precision: 1,
        from_said,
        to_said: end_said,
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`: for "every 2nd of 358".
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The series of a chart, drawn: their stacked paths, the bar of the state
/// at the end, the legend and the figures for the page's script.
struct SeriesDrawing {
    paths: String,
    exit_bar: String,
    legend: String,
    data: Vec<serde_json::Value>,
}

/// Draws every series that is not zero throughout, stacked in order, on a
/// y-axis reaching `axis_top` bytes, places across with `precision`
/// decimals; the legend gives each at `peak_bin`.
fn draw_series(chart: &Chart, columns: &[Vec<u64>], axis_top: f64, peak_bin: usize, precision: usize) -> SeriesDrawing {
    let x = |bin: usize| x_of(chart, bin);
    let y = |value: u64| y_of(value, axis_top);
    let bins = chart.axis.bins();
    let mut paths = String::new();
    let mut exit_bar = format!("<svg class=\"exit\" viewBox=\"0 0 40 {HEIGHT}\" preserveAspectRatio=\"none\" xmlns=\"http://www.w3.org/2000/svg\">");
    let mut legend = String::new();
    let mut data_series = Vec::new();
    let mut below = vec![0u64; bins];
    let mut below_at_exit = 0u64;
    for (series, name) in chart.names.iter().enumerate() {
        if columns.iter().all(|c| c[series] == 0) && chart.current[series] == 0 {
            continue;
        }
        let color = COLORS[series.min(COLORS.len() - 1)];
        let mut path = String::new();
        for (bin, column) in columns.iter().enumerate() {
            let _ = write!(
                path,
                "{}{:.precision$},{:.1}",
                if bin == 0 { "M" } else { "L" },
                x(bin),
                y(below[bin].saturating_add(column[series]))
            );
        }
        for bin in (0..bins).rev() {
            let _ = write!(path, "L{:.precision$},{:.1}", x(bin), y(below[bin]));
        }
        path.push('Z');
        let _ = write!(
            paths,
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
    exit_bar += "</svg>";
    SeriesDrawing {
        paths,
        exit_bar,
        legend,
        data: data_series,
    }
}

/// Where `bin` of `chart` starts across the plot, in SVG units.
fn x_of(chart: &Chart, bin: usize) -> f64 {
    chart.axis.place_of(bin) * WIDTH
}

/// Where `value` bytes stand up the plot, in SVG units (0 at the top), on
/// an axis reaching `axis_top` bytes.
fn y_of(value: u64, axis_top: f64) -> f64 {
    HEIGHT - value as f64 / axis_top * HEIGHT
}

/// `1.234 s`, or `12.345 ms` under a second.
pub(super) fn duration(ns: u64) -> String {
    if ns < 1_000_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.3} s", ns as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_nth_step_reads_as_people_say_it() {
        let said: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 112]
            .map(super::ordinal)
            .to_vec();
        assert_eq!(
            said,
            ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "112th"]
        );
    }
}
