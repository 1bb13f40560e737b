//! The HTML report's charts, for every kind of fake-driver run: the y-axis
//! labels, the peak marker and the legend say what `cudatrace report`
//! says, the curve peaks where the marker is, and each page is looked at in
//! headless Chromium, its screenshot kept under the test's target folder
//! (`html-screenshots/`).

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

/// One chart as the page holds it.
#[derive(Debug)]
struct SeenChart {
    class: String,
    peak_bytes: u64,
    peak_bin: usize,
    /// The bin the chart opens on: its process's first memory event.
    first_bin: usize,
    /// Where the plot's view starts, in SVG units, and how wide it is.
    view_x: String,
    view_width: f64,
    /// What it opens on: `steps`, or `first-event` (the process's first
    /// memory event).
    opens_on: String,
    /// The grey lines' words, such as "every 2nd of 358 step starts".
    steps_said: Option<String>,
    /// The page offers the whole run beside the opening view.
    whole_run_button: bool,
    ticks: Vec<u64>,
    tick_labels: Vec<(u64, String)>,
    /// (name, bytes at the peak) per legend entry.
    legend: Vec<(String, u64)>,
    /// (name, value per bin, value at the end) per series.
    series: Vec<(String, Vec<u64>, u64)>,
    /// Each bin's start, in seconds since the trace's start.
    times: Vec<f64>,
}

fn attribute<'a>(text: &'a str, name: &str) -> &'a str {
    let start = text.find(&format!("{name}=\"")).unwrap_or_else(|| panic!("no {name}")) + name.len() + 2;
    &text[start..start + text[start..].find('"').unwrap()]
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

fn charts_of(html: &str) -> Vec<SeenChart> {
    html.split("<div class=\"chart")
        .skip(1)
        .map(|chart| {
            let chart = &chart[..chart.find("</script></div>").expect("a chart's end")];
            let class = format!("chart{}", &chart[..chart.find('"').unwrap()]);
            let tick_labels = chart
                .split("<span class=\"ytick\" ")
                .skip(1)
                .map(|tick| {
                    let label = &tick[tick.find('>').unwrap() + 1..tick.find("</span>").unwrap()];
                    (attribute(tick, "data-bytes").parse().unwrap(), label.to_string())
                })
                .collect();
            let legend_html = &chart[chart.find("<div class=\"legend\">").unwrap()..];
            let legend = legend_html
                .split("<span data-bytes-at-peak=\"")
                .skip(1)
                .map(|entry| {
                    let bytes = entry[..entry.find('"').unwrap()].parse().unwrap();
                    let name = &entry[entry.find("<b>").unwrap() + 3..entry.find("</b>").unwrap()];
                    (unescape(name), bytes)
                })
                .collect();
            let data: Value =
                serde_json::from_str(&chart[chart.find("class=\"data\">").unwrap() + 13..].replace("<\\/", "</"))
                    .unwrap();
            let series = data["series"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let values = s["values"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap());
                    (
                        s["name"].as_str().unwrap().to_string(),
                        values.collect(),
                        s["at_end"].as_u64().unwrap(),
                    )
                })
                .collect();
            SeenChart {
                class,
                peak_bytes: attribute(chart, "data-peak-bytes").parse().unwrap(),
                peak_bin: attribute(chart, "data-peak-bin").parse().unwrap(),
                first_bin: attribute(chart, "data-first-bin").parse().unwrap(),
                view_x: attribute(&chart[chart.find("<svg class=\"plot\"").unwrap()..], "viewBox")
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_string(),
                view_width: attribute(&chart[chart.find("<svg class=\"plot\"").unwrap()..], "viewBox")
                    .split(' ')
                    .nth(2)
                    .unwrap()
                    .parse()
                    .unwrap(),
                opens_on: if chart.contains("data-opens-on=\"") {
                    attribute(chart, "data-opens-on").to_string()
                } else {
                    "first-event".to_string()
                },
                steps_said: chart
                    .find("grey lines: ")
                    .map(|at| chart[at + 12..].split(';').next().unwrap().to_string()),
                whole_run_button: chart.contains("<button type=\"button\" class=\"whole\">show the whole run</button>"),
                ticks: attribute(chart, "data-y-ticks")
                    .split(',')
                    .map(|t| t.parse().unwrap())
                    .collect(),
                tick_labels,
                legend,
                series,
                times: data["times"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_f64().unwrap())
                    .collect(),
            }
        })
        .collect()
}

impl SeenChart {
    fn total(&self, bin: usize) -> u64 {
        self.series.iter().map(|(_, values, _)| values[bin]).sum()
    }

    /// The bin a chart that opens at `seconds` (since the trace's start)
    /// opens on: the one the moment falls in, but never one of the last
    /// two, which the page keeps in view.
    fn bin_at(&self, seconds: f64) -> usize {
        let bin = self.times.iter().rposition(|&start| start <= seconds).unwrap_or(0);
        bin.min(self.times.len() - 2)
    }

    /// The span in view when the chart opens, in seconds since the
    /// trace's start (the plot is 900 units wide over the whole run).
    fn view_seconds(&self) -> (f64, f64) {
        let end = *self.times.last().unwrap();
        let from: f64 = self.view_x.parse().unwrap();
        (from / 900.0 * end, (from + self.view_width) / 900.0 * end)
    }

    /// The bins that start within `from..to` seconds.
    fn bins_within(&self, from: f64, to: f64) -> usize {
        self.times.iter().filter(|&&t| from <= t && t < to).count()
    }

    fn highest_total(&self) -> u64 {
        let bins = self.series.first().map_or(0, |(_, values, _)| values.len());
        (0..bins).map(|bin| self.total(bin)).max().unwrap_or(0)
    }
}

/// The call sites the text report lists under `heading` for each process
/// and device, in order: (bytes, name).
fn text_call_sites(text: &str, heading: &str) -> Vec<Vec<(String, String)>> {
    let mut lists = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.starts_with(&format!("    call sites {heading}")) {
            continue;
        }
        let mut list = Vec::new();
        while let Some(site) = lines.peek() {
            if !site.starts_with("      ") {
                break;
            }
            let site = lines.next().unwrap();
            if site.starts_with("        ") || site.starts_with("      ... and") {
                continue;
            }
            let (bytes, name) = site.trim().split_once(" in ").unwrap();
            let name = name.split_once(": ").unwrap().1;
            list.push((bytes.to_string(), name.to_string()));
        }
        lists.push(list);
    }
    lists
}

/// Every process's entries under `key` (a list) of the JSON report, in order.
fn of_every_process<'a>(report: &'a Value, key: &str) -> Vec<&'a Value> {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.pointer(key).and_then(Value::as_array))
        .flatten()
        .collect()
}

/// Each process's first memory event, in seconds since the trace's start
/// (the header's start, or the first process's if that came first), by the
/// process's number in the trace.
fn first_memory_events(trace: &Path) -> Vec<Option<f64>> {
    let dump = stdout(&cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap());
    let mut starts = Vec::new();
    let mut first: Vec<Option<u64>> = Vec::new();
    for line in dump.lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        for start in ["/header/start_monotonic_ns", "/process/start_monotonic_ns"] {
            starts.extend(record.pointer(start).and_then(Value::as_u64));
        }
        let op = record["op"].as_str().and_then(cudatrace_events::Op::from_name);
        if !op.is_some_and(|op| op.is_memory_event()) {
            continue;
        }
        let process = record["process"].as_u64().unwrap() as usize;
        if first.len() <= process {
            first.resize(process + 1, None);
        }
        let time_ns = record["time_ns"].as_u64().unwrap();
        first[process] = Some(first[process].map_or(time_ns, |f| f.min(time_ns)));
    }
    let origin = starts.into_iter().min().unwrap();
    first
        .into_iter()
        .map(|time_ns| time_ns.map(|t| t.saturating_sub(origin) as f64 / 1e9))
        .collect()
}

/// Every chart of `html` against the report of `trace`.
fn check_charts(label: &str, trace: &Path, html: &str) {
    let (report, _) = report_json_with_stacks(trace);
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    let charts = charts_of(html);
    assert!(!charts.is_empty(), "{label}: no chart");
    for chart in &charts {
        // The y-axis: from 0 in equal steps to at least the highest point,
        // each label the bytes it stands at.
        assert_eq!(chart.ticks[0], 0, "{label}: {chart:?}");
        let step = chart.ticks[1] - chart.ticks[0];
        assert!(
            chart.ticks.windows(2).all(|w| w[1] - w[0] == step),
            "{label}: {:?}",
            chart.ticks
        );
        assert!(chart.ticks.len() <= 8, "{label}: {:?}", chart.ticks);
        let drawn: Vec<u64> = chart.tick_labels.iter().map(|(bytes, _)| *bytes).collect();
        assert_eq!(drawn, chart.ticks, "{label}");
        for (bytes, shown) in &chart.tick_labels {
            assert_eq!(shown, &human_bytes(*bytes), "{label}");
        }
        assert!(
            *chart.ticks.last().unwrap() >= chart.highest_total(),
            "{label}: {chart:?}"
        );
        assert!(*chart.ticks.last().unwrap() >= chart.peak_bytes, "{label}");
        // Without steps, the chart opens at its process's first memory
        // event, the whole run one click away; the plot is 900 units wide
        // over 600 even bins.
        if chart.opens_on == "first-event" {
            assert_eq!(chart.times.len(), 600, "{label}");
            assert_eq!(
                chart.view_x,
                format!("{:.1}", chart.first_bin as f64 * 900.0 / 599.0),
                "{label}"
            );
            assert_eq!(chart.whole_run_button, chart.first_bin > 0, "{label}");
        }
        // Each legend entry is a drawn series, with its bytes at the peak's bin.
        assert_eq!(chart.legend.len(), chart.series.len(), "{label}");
        for ((name, at_peak), (series, values, _)) in chart.legend.iter().zip(&chart.series) {
            assert_eq!(name, series, "{label}");
            assert_eq!(*at_peak, values[chart.peak_bin], "{label}: {name}");
        }
    }
    // Call-site charts: one per process and device, peaking at the
    // report's peak, where the marker is, their legend the report's call
    // sites at the peak.
    let site_charts: Vec<&SeenChart> = charts.iter().filter(|c| c.class == "chart").collect();
    // Every chart opens at its process's first memory event, not at the
    // trace's start: charts come per process in the report's order, and
    // within one, per device.
    let first_events = first_memory_events(trace);
    let owners_of = |key: &str, keep: fn(&Value) -> bool| -> Vec<usize> {
        let processes = report["processes"].as_array().unwrap().iter().enumerate();
        processes
            .flat_map(|(number, p)| {
                let items = p
                    .pointer(key)
                    .and_then(Value::as_array)
                    .map_or(0, |items| items.iter().filter(|item| keep(item)).count());
                std::iter::repeat_n(number, items)
            })
            .collect()
    };
    for (class, key, keep) in [
        ("chart", "/devices", (|_: &Value| true) as fn(&Value) -> bool),
        ("chart owners", "/footprint", |f: &Value| !f["at_peak"].is_null()),
        ("chart tensors", "/tensors/devices", |_: &Value| true),
    ] {
        let of_class: Vec<&SeenChart> = charts.iter().filter(|c| c.class == class).collect();
        let processes = owners_of(key, keep);
        assert_eq!(of_class.len(), processes.len(), "{label}: {class}");
        for (chart, process) in of_class.iter().zip(processes) {
            let steps = report["processes"][process]["steps"]["steps"].as_array();
            if let Some(steps) = steps.filter(|steps| !steps.is_empty()) {
                check_steps_view(label, chart, steps);
                continue;
            }
            assert_eq!(chart.opens_on, "first-event", "{label}: {class} of process {process}");
            let first = first_events[process].expect("a charted process has a memory event");
            // An owner chart whose peak comes first opens at its peak, so
            // that the marked peak is in view.
            let opening = chart.bin_at(first).min(chart.peak_bin);
            assert_eq!(chart.first_bin, opening, "{label}: {class} of process {process}");
            assert!(chart.first_bin <= chart.peak_bin, "{label}: the peak out of view");
        }
    }
    let devices = of_every_process(&report, "/devices");
    assert_eq!(site_charts.len(), devices.len(), "{label}");
    // The text lists the call sites at the peak for each process and
    // device with stacks, as every fake run here has.
    let listed = text_call_sites(&text, "at the peak of");
    assert_eq!(listed.len(), site_charts.len(), "{label}: {text}");
    for ((chart, device), sites) in site_charts.iter().zip(&devices).zip(&listed) {
        let peak = device["peak_bytes"].as_u64().unwrap();
        assert_eq!(chart.peak_bytes, peak, "{label}");
        assert_eq!(
            chart.highest_total(),
            peak,
            "{label}: the curve peaks at the report's peak"
        );
        assert_eq!(
            chart.total(chart.peak_bin),
            peak,
            "{label}: the marker is where the curve peaks"
        );
        let ended: u64 = chart.series.iter().map(|(_, _, end)| end).sum();
        assert_eq!(
            ended,
            device["live_bytes_at_exit"].as_u64().unwrap(),
            "{label}: the end state"
        );
        assert!(!sites.is_empty(), "{label}");
        let legend: Vec<(String, String)> = chart
            .legend
            .iter()
            .filter(|(name, _)| name != "other call sites")
            .take(sites.len())
            .map(|(name, bytes)| (human_bytes(*bytes), name.clone()))
            .collect();
        assert_eq!(&legend, sites, "{label}: the legend is the report's call sites");
    }
    // Owner charts: one per process and device with a footprint, peaking
    // at the footprint's peak.
    let owner_charts: Vec<&SeenChart> = charts.iter().filter(|c| c.class == "chart owners").collect();
    let footprints: Vec<&Value> = of_every_process(&report, "/footprint")
        .into_iter()
        .filter(|f| !f["at_peak"].is_null())
        .collect();
    assert_eq!(owner_charts.len(), footprints.len(), "{label}");
    for (chart, footprint) in owner_charts.iter().zip(&footprints) {
        let peak = &footprint["at_peak"];
        assert_eq!(chart.peak_bytes, peak["reference_bytes"].as_u64().unwrap(), "{label}");
        if peak["unexplained_bytes"].as_i64().unwrap() >= 0 {
            assert_eq!(chart.total(chart.peak_bin), chart.peak_bytes, "{label}: {footprint:#}");
            assert_eq!(chart.highest_total(), chart.peak_bytes, "{label}: {footprint:#}");
        }
    }
    // Tensor charts: allocated bytes peak at PyTorch's allocated peak.
    let tensor_charts: Vec<&SeenChart> = charts.iter().filter(|c| c.class == "chart tensors").collect();
    let tensor_devices = of_every_process(&report, "/tensors/devices");
    assert_eq!(tensor_charts.len(), tensor_devices.len(), "{label}");
    for (chart, tensors) in tensor_charts.iter().zip(&tensor_devices) {
        let peak = tensors["allocated_peak_bytes"].as_u64().unwrap();
        assert_eq!(chart.peak_bytes, peak, "{label}");
        let allocated = &chart.series[0];
        assert_eq!(allocated.0, "allocated (tensors)");
        assert_eq!(allocated.1[chart.peak_bin], peak, "{label}");
        assert_eq!(allocated.1.iter().max(), Some(&peak), "{label}");
        assert_eq!(
            allocated.2,
            tensors["allocated_bytes_at_exit"].as_u64().unwrap(),
            "{label}"
        );
    }
}

/// A chart of a process with steps (`steps`, the report's) opens on them,
/// the whole run one click away: its view holds every step's start and
/// every complete step's end, with at least 8 bins a step (and 600 in
/// all); and it is no wider than the steps and a mean step each side.
fn check_steps_view(label: &str, chart: &SeenChart, steps: &[Value]) {
    assert_eq!(chart.opens_on, "steps", "{label}");
    assert!(chart.whole_run_button, "{label}");
    let spans: Vec<(f64, f64, bool)> = steps
        .iter()
        .map(|step| {
            let start = step["start_s"].as_f64().unwrap();
            let end = start + step["duration_s"].as_f64().unwrap();
            (start, end, step["complete"].as_bool().unwrap())
        })
        .collect();
    let (from, to) = chart.view_seconds();
    let (first, last_start) = (spans[0].0, spans[spans.len() - 1].0);
    let loop_end = spans.iter().filter(|s| s.2).map(|s| s.1).fold(last_start, f64::max);
    assert!(
        from <= first && last_start <= to && loop_end <= to,
        "{label}: {from}..{to} {spans:?}"
    );
    let last_end = spans[spans.len() - 1].1.max(loop_end);
    let mean_step = (last_end - first) / spans.len() as f64;
    assert!(
        first - from <= mean_step && to - last_end <= mean_step,
        "{label}: {from}..{to} {spans:?}"
    );
    // The view's ends are written with four digits of its width.
    let within = (to - from) * 1e-4;
    assert!(
        chart.bins_within(from - within, to - within) >= (8 * spans.len()).max(600),
        "{label}"
    );
    // The view starts where the bin it opens on starts.
    let opening = chart.times[chart.first_bin];
    assert!(
        (opening - from).abs() <= (to - from) / 1000.0,
        "{label}: {opening} {from}"
    );
}

/// The page in headless Chromium: its script runs without an error, and
/// its screenshot is kept as `html-screenshots/<label>.png`.
fn look_at(label: &str, page: &Path) {
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-screenshots");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join(format!("{label}.png"));
    let profile = scratch_dir(&format!("chromium-{label}"));
    let headless = |extra: &[&str]| {
        Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1150,3200",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(format!("file://{}", page.display()))
            .output()
            .unwrap()
    };
    let dom = headless(&["--dump-dom", "--virtual-time-budget=2000"]);
    assert!(dom.status.success(), "{label}");
    let errors: Vec<String> = String::from_utf8_lossy(&dom.stderr)
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .map(str::to_string)
        .collect();
    assert!(errors.is_empty(), "{label}: {errors:?}");
    assert!(
        String::from_utf8_lossy(&dom.stdout).contains("data-ready=\"1\""),
        "{label}"
    );
    let screenshot = headless(&[&format!("--screenshot={}", shot.display())]);
    assert!(screenshot.status.success(), "{label}: {}", stderr(&screenshot));
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "{label}: {}",
        shot.display()
    );
}

fn html_of(trace: &Path) -> (PathBuf, String) {
    let page = trace.with_extension("html");
    let out = cudatrace(&["html", trace.to_str().unwrap(), "--force"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    (page, html)
}

/// A scenario of the fake program `scenarios`, checked and looked at.
fn scenario(name: &str) {
    let (output, trace) = run_scenario(&format!("charts-{name}"), name, &[]);
    assert!(output.status.success(), "{name}: {}", stderr(&output));
    let (page, html) = html_of(&trace);
    check_charts(name, &trace, &html);
    look_at(name, &page);
}

#[test]
fn runtime_charts_read_true() {
    scenario("runtime");
}

#[test]
fn driver_charts_read_true() {
    scenario("driver");
}

#[test]
fn vmm_charts_read_true() {
    scenario("vmm");
}

#[test]
fn oom_charts_read_true() {
    scenario("oom");
}

#[test]
fn fork_charts_read_true() {
    scenario("fork");
}

#[test]
fn footprint_charts_read_true_with_an_unexplained_band() {
    // First launches unmeasured: memory the driver holds that nothing
    // measures, drawn as the band.
    let (mut command, trace) = run_program("charts-explain", &fake_cuda::program("explain"), &["--no-launch-hooks"]);
    let nvml = trace.with_file_name("nvml");
    std::fs::create_dir(&nvml).unwrap();
    let out = command
        .env("FAKE_NVML_DIR", &nvml)
        .env("FAKE_CUDA_CAPACITY", (8192 * MIB).to_string())
        .env("FAKE_CUDA_CONTEXT_BYTES", (300 * MIB).to_string())
        .env("FAKE_CUDA_MODULE_BYTES", (20 * MIB).to_string())
        .env("FAKE_CUDA_KERNEL_BYTES", (5 * MIB).to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let (page, html) = html_of(&trace);
    check_charts("explain", &trace, &html);
    assert_eq!(charts_of(&html).iter().filter(|c| c.class == "chart owners").count(), 1);
    let owners = charts_of(&html)
        .into_iter()
        .find(|c| c.class == "chart owners")
        .unwrap();
    let band = owners
        .series
        .iter()
        .find(|(name, _, _)| name == "unexplained (driver-used less all measured)")
        .expect("the unexplained band");
    let (report, _) = report_json_with_stacks(&trace);
    let at_exit = &report["processes"][0]["footprint"][0]["at_exit"];
    let unexplained = at_exit["unexplained_bytes"].as_u64().unwrap();
    // Without launch hooks nothing measures the three kernels' first
    // launches (5 MiB each), nor reads the graph memory node's 4 MiB (a
    // launch past the rate limit takes that reading).
    assert_eq!(
        unexplained,
        3 * 5 * MIB + 4 * MIB,
        "first launches and graph node unmeasured: {at_exit:#}"
    );
    assert_eq!(band.2, unexplained);
    look_at("explain", &page);
}

#[test]
fn tensor_charts_read_true() {
    let (mut command, trace) = run_program("charts-tensors", &fake_cuda::program("torch_like"), &[]);
    let out = command
        .arg(fake_cuda::torch_library("211"))
        .arg("all")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let (page, html) = html_of(&trace);
    check_charts("tensors", &trace, &html);
    assert_eq!(
        charts_of(&html).iter().filter(|c| c.class == "chart tensors").count(),
        1
    );
    look_at("tensors", &page);
}

#[test]
fn charts_with_step_marks_and_a_growing_table_read_true() {
    let (mut command, trace) = run_program("charts-steps", &fake_cuda::program("torch_like"), &[]);
    let out = command
        .arg(fake_cuda::torch_library("211"))
        .arg("training")
        .env("FAKE_TORCH_LEAK", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let (page, html) = html_of(&trace);
    check_charts("steps", &trace, &html);
    // Every chart marks the 8 steps; the page lists the growing output.
    assert_eq!(html.matches("<line class=\"step\"").count(), 3 * 8);
    assert_eq!(html.matches("<table class=\"growing\">").count(), 1);
    look_at("steps", &page);
}

/// `cudatrace run -- python3 SCRIPT ARGS` over the fake driver, then its
/// page, checked and looked at as `label`: (the trace, the page, the
/// report).
fn python_charts(label: &str, script: &Path, args: &[&str]) -> (PathBuf, String, Value) {
    let (mut command, trace) = run_program(&format!("charts-{label}"), Path::new("python3"), &[]);
    let out = command.arg(script).args(args).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let (page, html) = html_of(&trace);
    check_charts(label, &trace, &html);
    look_at(label, &page);
    let report = report_json_with_stacks(&trace).0;
    (trace, html, report)
}

/// The demo's memory events, in ns after the trace's start, as an idle
/// machine times them: after 300 ms of start-up, five steps of a 64 MiB
/// allocation, an 8 MiB one 8 us later and the first one's free 4 us after
/// that; the first step lasts 160 us (its calls load the runtime), the
/// others 16 us.
fn demo_times() -> Vec<u64> {
    [300_000_000, 300_160_000, 300_176_000, 300_192_000, 300_208_000]
        .into_iter()
        .flat_map(|start| [start, start + 8_000, start + 12_000])
        .collect()
}

#[test]
fn charts_open_on_steps_that_are_a_sliver_of_the_run() {
    // The no-GPU demo: its five steps take a fraction of a millisecond
    // after Python's start-up, all in one of 600 even bins. Each of its
    // charts opens on them.
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/no_gpu_demo.py");
    let (trace, html, report) = python_charts("demo", &demo, &[]);
    assert_eq!(report["processes"][0]["steps"]["count"], 5);
    let charts = charts_of(&html);
    assert_eq!(charts.len(), 2, "the owner chart and the call-site chart");
    for chart in &charts {
        assert_eq!(chart.opens_on, "steps");
        assert_eq!(chart.steps_said.as_deref(), Some("the starts of 5 steps"));
    }
    // The bins a step gets follow its length, and the run's lengths follow
    // the machine's load (a step the scheduler preempts lasts milliseconds):
    // the bins are counted on the run's trace with an idle machine's times.
    let copy = trace.with_file_name("retimed.trace");
    common::retimed::retimed(&trace, &copy, &demo_times(), 310_000_000);
    let (_, html) = html_of(&copy);
    check_charts("demo-retimed", &copy, &html);
    let (report, _) = report_json(&copy);
    let steps: Vec<(f64, f64)> = report["processes"][0]["steps"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| (step["start_s"].as_f64().unwrap(), step["duration_s"].as_f64().unwrap()))
        .collect();
    // The last step ends with its last event, the free.
    let lengths = [160e-6, 16e-6, 16e-6, 16e-6, 12e-6];
    let starts = [0.3, 0.30016, 0.300176, 0.300192, 0.300208];
    assert_eq!(steps, starts.into_iter().zip(lengths).collect::<Vec<_>>());
    let charts = charts_of(&html);
    assert_eq!(charts.len(), 2);
    for chart in &charts {
        // The view: the steps, from the first one's start to the loop's
        // last allocation (216 us), and half a mean step (21.6 us) each
        // side, in 600 bins of 432 ns; outside it the even bins of 310 ms
        // over 599, 580 before and 19 after.
        assert_eq!(chart.times.len(), 580 + 600 + 19);
        assert_eq!(chart.first_bin, 580);
        let fine: Vec<f64> = (0..600).map(|bin| (299_978_400 + 432 * bin) as f64 / 1e9).collect();
        assert_eq!(chart.times[580..1180], fine[..]);
        assert_eq!(chart.times[579], (310_000_000u64 * 579 / 599) as f64 / 1e9);
        assert_eq!(chart.times[1180], (310_000_000u64 * 581 / 599) as f64 / 1e9);
        // Each step is drawn with bins of its own.
        let bins: Vec<usize> = steps
            .iter()
            .map(|&(start, length)| chart.bins_within(start, start + length))
            .collect();
        assert_eq!(bins, [371, 37, 37, 37, 28]);
    }
}

#[test]
fn a_long_loop_marks_every_2nd_step_and_opens_on_its_steps() {
    // 358 steps of the demo's kind (ctypes calls to the fake runtime):
    // more step starts than the charts mark one by one.
    let dir = scratch_dir("charts-loop-script");
    let script = dir.join("loop.py");
    std::fs::write(
        &script,
        "import ctypes, sys\n\
         cudart = ctypes.CDLL('libcudart.so.13')\n\
         cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]\n\
         cudart.cudaFree.argtypes = [ctypes.c_void_p]\n\
         kept = []\n\
         for step in range(int(sys.argv[1])):\n\
         \x20   work, grads = ctypes.c_void_p(), ctypes.c_void_p()\n\
         \x20   assert cudart.cudaMalloc(ctypes.byref(work), 1 << 20) == 0\n\
         \x20   assert cudart.cudaMalloc(ctypes.byref(grads), 4096) == 0\n\
         \x20   kept.append(grads)\n\
         \x20   assert cudart.cudaFree(work) == 0\n",
    )
    .unwrap();
    let (_, html, report) = python_charts("loop", &script, &["358"]);
    assert_eq!(report["processes"][0]["steps"]["count"], 358);
    let charts = charts_of(&html);
    assert_eq!(charts.len(), 2);
    for chart in &charts {
        assert_eq!(chart.steps_said.as_deref(), Some("every 2nd of 358 step starts"));
    }
    assert_eq!(html.matches("<line class=\"step\"").count(), 2 * 179);
}
