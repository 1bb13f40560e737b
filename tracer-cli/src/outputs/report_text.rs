//! `cudatrace report`: the report for people.

use crate::outputs::every_failure;
use crate::outputs::steps_text;
use crate::system::terminal::Stdout;
use crate::system::write_failure::WriteFailure;
use crate::wording::device_label;
use crate::wording::fold_lines;
use crate::wording::limit_lines;
use crate::wording::oom_lines;
use crate::wording::rank_lines;
use crate::wording::stack_texts;
use crate::wording::switch_lines;
use crate::wording::{bytes, count, tensor_status_line, torch_bytes_text, unrecorded_process_text};
use cudatrace_analysis::{
    call_sites, growing_sites, headline, headline_text, site_name, tensors_stopped_midway, ByStack, DeviceKey, Frame,
    FramesShown, HeldAtOom, Oom, ProcessIndex, ProcessSummary, RankTable, Summary, TraceIndex, NO_STACK,
};
use cudatrace_trace::ProcessEnd;

/// Live allocations the text report lists per device, largest first.
const LARGEST_SHOWN: usize = 5;
/// Lines of one stack shown, unless every frame is asked for.
const FRAMES_SHOWN: usize = 16;

/// The whole report as text, stacks shown as `frames` says; with
/// `all_ooms`, every out-of-memory failure, not only the first ones.
pub fn report(index: &TraceIndex, summary: &Summary, frames: FramesShown, all_ooms: bool) -> String {
    let mut out = String::new();
    let events: u64 = summary.processes.iter().map(|p| p.memory.events).sum();
    if let Some(h) = &index.header {
        out += &format!(
            "trace of `{}` on {} (cudatrace {}): {}, {}\n",
            h.command.join(" "),
            h.host,
            h.tracer_version,
            count(index.processes.len() as u64, "process", "processes"),
            count(events, "event", "events")
        );
    }
    if let Some(line) = switch_lines::paused_line(index) {
        out += &format!("{line}\n");
    }
    if let Some(line) = fold_lines::detail_span(index) {
        out += &format!("{line}\n");
    }
    // The answers open the report: whether the job fit under its memory
    // limit, then what ran out of memory or was refused, then what keeps
    // growing (where a leak is). The ranks compared come after them.
    out += &limit_lines::verdict_text(index, &cudatrace_analysis::limit_verdicts(index, summary));
    out += &failures_text(index, summary);
    out += &growth_text(index, summary, frames);
    if let Some(table) = RankTable::of(index, summary) {
        out += &rank_lines::table_text(&table, index.start_ns());
    }
    for ((info, footprints), process) in index.processes.iter().zip(&summary.footprints).zip(&summary.processes) {
        for footprint in footprints {
            out += "\n";
            let tensors = process.tensors.devices.get(&DeviceKey::Gpu(footprint.device));
            out += &super::footprint_table::text(info, footprint, index.start_ns(), tensors);
        }
    }
    for (info, process) in index.processes.iter().zip(&summary.processes) {
        out += &process_text(index, info, process, frames, all_ooms);
    }
    let lost = summary.lost_events(index);
    if lost > 0 {
        out += &format!("\nthe trace lacks {} in all\n", count(lost, "event", "events"));
    }
    for refusal in &index.refused {
        out += &format!("\nrefused {} (uid {}): {}\n", refusal.path, refusal.uid, refusal.reason);
    }
    for spool in &index.damaged_spools {
        out += &format!(
            "\npid {} (image {}): spool {} could not be read: {}\n",
            spool.pid, spool.image, spool.path, spool.reason
        );
    }
    if !index.unrecorded.is_empty() {
        out += &format!(
            "\n{} could not record; the trace has none of their events:\n",
            count(
                cudatrace_analysis::unrecorded_count(&index.unrecorded),
                "process",
                "processes"
            )
        );
        for process in &index.unrecorded {
            out += &format!("  {}\n", unrecorded_process_text(process));
        }
    }
    let unnamed = cudatrace_analysis::unnamed_children(&index.unrecorded);
    if let Some(line) = crate::wording::silent_children_line(&cudatrace_analysis::silent_children(index), &unnamed) {
        out += &format!("\n{line}\n");
    }
    out
}

fn process_text(
    index: &TraceIndex,
    info: &ProcessIndex,
    process: &ProcessSummary,
    frames: FramesShown,
    all_ooms: bool,
) -> String {
    let start = &info.start;
    let end = info.end.clone().unwrap_or_default();
    let exit = crate::wording::image_end_text(info.end.as_ref());
    let mut out = format!(
        "\npid {} (parent {}){} {} — {exit}\n",
        start.pid,
        start.ppid,
        rank_lines::place_text(&start.place, index.several_hosts()),
        start.argv.join(" ")
    );
    out += &step_tables_text(index, info, process);
    // Where PyTorch's tensors were recorded, they answer first: its
    // segments below are mostly cache.
    out += &tensors_text(index, info, process, frames);
    let live = process.live_at_exit();
    for (device, stats) in &process.devices {
        let live_list = live.get(device).map(Vec::as_slice).unwrap_or_default();
        out += &format!(
            "  {}: {}, {}, peak {}, live at exit {} in {}\n",
            device_label(*device),
            count(stats.allocations, "allocation", "allocations"),
            count(stats.frees, "free", "frees"),
            bytes(stats.peak),
            bytes(stats.current),
            count(live_list.len() as u64, "allocation", "allocations")
        );
        let mut largest = live_list.to_vec();
        largest.sort_by_key(|a| std::cmp::Reverse(a.size));
        for a in largest.iter().take(LARGEST_SHOWN) {
            out += &format!(
                "    live {:>10} {} {} at {:#x}\n",
                bytes(a.size),
                a.api,
                a.kind,
                a.address
            );
        }
        if largest.len() > LARGEST_SHOWN {
            out += &format!(
                "    ... and {} more (all in `cudatrace report --json`)\n",
                largest.len() - LARGEST_SHOWN
            );
        }
        out += &call_sites_text(index, info, frames, "live at exit", &stats.live_by_stack);
        out += &call_sites_text(
            index,
            info,
            frames,
            &format!("at the peak of {}", bytes(stats.peak)),
            &stats.peak_by_stack,
        );
        if all_ooms {
            // Every failure: written one at a time as the report goes out
            // (see `write_with_every_oom`), not held in this text.
            out += &format!("{}\n", every_failure::placeholder(stats));
        } else {
            for (n, oom) in stats.ooms.iter().enumerate() {
                if n == OOMS_DETAILED {
                    out += &format!(
                        "    ... and {} more out-of-memory failures (`report --all-ooms` lists each)\n",
                        stats.oom_sites.total() - n as u64
                    );
                    break;
                }
                out += &oom_text(index, info, oom, frames);
            }
        }
    }
    if process.host.allocations > 0 {
        out += &format!(
            "  pinned host memory: {}, {}, peak {}, live at exit {}\n",
            count(process.host.allocations, "allocation", "allocations"),
            count(process.host.frees, "free", "frees"),
            bytes(process.host.peak),
            bytes(process.host.current)
        );
    }
    out += &freed_with_driver_text(process.memory.freed_with_driver);
    out += &lost_text(process.lost_events(info.end.as_ref().map(|e| e.reserved_events)), &end);
    out
}

/// The line for allocations that went with the driver when the program
/// unloaded it: freed by no call of the program's, so said.
fn freed_with_driver_text((allocations, freed): (u64, u64)) -> String {
    if allocations == 0 {
        return String::new();
    }
    format!(
        "  freed with the driver: {} ({}) {} live when the program unloaded the driver (`dlclose`)\n",
        count(allocations, "allocation", "allocations"),
        bytes(freed),
        if allocations == 1 { "was" } else { "were" }
    )
}

/// Every out-of-memory failure and refusal of the run, in time order,
/// under its heading; nothing when nothing failed.
fn failures_text(index: &TraceIndex, summary: &Summary) -> String {
    let lines = oom_lines::opening_lines(index, summary);
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nout of memory:\n");
    for line in lines {
        out += &format!("  {line}\n");
    }
    out
}

/// Per process that allocated: its steps (or low points) and the call
/// sites that keep growing, each with its stack.
fn growth_text(index: &TraceIndex, summary: &Summary, frames: FramesShown) -> String {
    let mut out = String::new();
    for (info, process) in index.processes.iter().zip(&summary.processes) {
        let growing = growing_sites(index, info, process);
        let name = format!("pid {} {}", info.start.pid, info.start.argv.join(" "));
        let Some(heading) = steps_text::growth_heading(&name, process, !growing.is_empty()) else {
            continue;
        };
        out += "\n";
        out += &heading;
        let several_devices = process.devices.len().max(process.tensors.devices.len()) > 1;
        for site in &growing {
            out += &steps_text::growing_line(site, several_devices);
            out += &stack_lines_text(&index.frames(info, site.stack), frames, "      ");
        }
    }
    out
}

/// The process's step tables, where it has steps.
fn step_tables_text(index: &TraceIndex, info: &ProcessIndex, process: &ProcessSummary) -> String {
    let Some(steps) = &process.steps else {
        return String::new();
    };
    let marker_site = site_name(&index.frames(info, steps.marker.stack));
    steps_text::step_tables_text(index, steps, process, &marker_site)
}

/// PyTorch's tensors, per device: the allocator's split of its bytes,
/// the tensors live at exit and at the allocated peak by call site, and
/// the fragmentation at exit.
fn tensors_text(index: &TraceIndex, info: &ProcessIndex, process: &ProcessSummary, frames: FramesShown) -> String {
    let Some(status) = tensor_status_line(info) else {
        return String::new();
    };
    let mut out = format!("  {status}\n");
    for (device, stats) in &process.tensors.devices {
        out += &format!(
            "  tensors on {}: {}, {}; allocated {} at exit, peak {}; reserved {} at exit, peak {}; inactive {} at exit\n",
            device_label(*device),
            count(stats.allocations, "allocation", "allocations"),
            count(stats.frees, "free", "frees"),
            bytes(stats.now.allocated),
            bytes(stats.allocated_peak.allocated),
            bytes(stats.now.reserved),
            bytes(stats.reserved_peak),
            bytes(stats.now.inactive())
        );
        // A stream cut short leaves no end state to call leaks from.
        if !tensors_stopped_midway(info) {
            let live = stats.live_tensors();
            out += &format!("    {} live at exit\n", count(live.len() as u64, "tensor", "tensors"));
            out += &call_sites_text(index, info, frames, "of tensors live at exit", &stats.live_by_stack);
        }
        out += &call_sites_text(
            index,
            info,
            frames,
            &format!(
                "of tensors at the allocated peak of {}",
                bytes(stats.allocated_peak.allocated)
            ),
            &stats.peak_by_stack,
        );
        let [small, large] = stats.fragmentation();
        for (name, class) in [("small (up to 2 MiB)", small), ("large", large)] {
            if class.segments > 0 {
                out += &format!(
                    "    fragmentation at exit, {name} segments: {} reserved in {}, {} of it inactive\n",
                    bytes(class.reserved),
                    count(class.segments, "segment", "segments"),
                    bytes(class.inactive)
                );
            }
        }
        if stats.ooms > 0 {
            out += &format!(
                "    PyTorch reported {}\n",
                count(stats.ooms, "out-of-memory failure", "out-of-memory failures")
            );
        }
    }
    out
}

/// Out-of-memory failures of a device shown with what held the memory:
/// as many as the step table shows the steps around.
const OOMS_DETAILED: usize = steps_text::OOMS_WITH_STEPS_AROUND;

/// One failure: what was asked and what was left, its stack, and what held
/// the device then where that was kept.
fn oom_text(index: &TraceIndex, info: &ProcessIndex, oom: &Oom, frames: FramesShown) -> String {
    let mut out = format!("    {}\n", oom_lines::failure_text(oom));
    out += &stack_text(index, info, oom.stack, frames, "      ");
    if let Some(held) = &oom.held {
        out += &held_at_oom_text(index, info, held, frames);
    }
    out
}

/// Writes `text`, the report made with every failure (`report
/// --all-ooms`), to `out`, each device's failures made into text one at a
/// time as they are written (see [`every_failure`]). `false` when the
/// reader went away.
pub fn write_with_every_oom(
    index: &TraceIndex,
    summary: &Summary,
    text: &str,
    frames: FramesShown,
    out: &mut Stdout,
) -> Result<bool, WriteFailure> {
    // In text a placeholder is a line of its own.
    let lists = every_failure::lists(index, summary, |placeholder| format!("{placeholder}\n"));
    let length = |from: &str| from.find('\n').map_or(from.len(), |end| end + 1);
    every_failure::write_filled(text, every_failure::MARK, length, &lists, out, |(info, ooms), out| {
        for oom in ooms {
            if !out.write(&oom_text(index, info, oom, frames))? {
                return Ok(false);
            }
        }
        Ok(true)
    })
}

/// What held the device's memory when an allocation failed: the bytes, and
/// by call site the tensors (where PyTorch's are recorded) or else the
/// allocations live then.
fn held_at_oom_text(index: &TraceIndex, info: &ProcessIndex, held: &HeldAtOom, frames: FramesShown) -> String {
    let torch = held
        .tensors
        .as_ref()
        .map_or_else(String::new, |(now, _)| format!("; {}", torch_bytes_text(now)));
    let (tensors, by_stack) = held.listed();
    let what = if tensors {
        "of the tensors live then"
    } else {
        "live then"
    };
    format!(
        "      held then: {} of device memory in this process{torch}\n{}",
        bytes(held.live_bytes),
        nested(&call_sites_text(index, info, frames, what, by_stack))
    )
}

/// `text` two columns further in: a list that belongs to the line above it.
fn nested(text: &str) -> String {
    text.lines().map(|line| format!("  {line}\n")).collect()
}

/// The largest call sites of `by_stack`, each headed by its headline frame
/// and followed by the stack of its largest allocation.
fn call_sites_text(
    index: &TraceIndex,
    info: &ProcessIndex,
    frames: FramesShown,
    what: &str,
    by_stack: &ByStack,
) -> String {
    let sites = call_sites(index, info, by_stack);
    if sites.is_empty() || sites.iter().all(|site| site.stack == 0) {
        return String::new();
    }
    let mut out = format!("    call sites {what}:\n");
    for site in sites.iter().take(LARGEST_SHOWN) {
        let stacks = if site.stacks > 1 {
            format!(", {} stacks", site.stacks)
        } else {
            String::new()
        };
        out += &format!(
            "      {} in {}{stacks}: {}\n",
            bytes(site.bytes),
            count(site.allocations, "allocation", "allocations"),
            site.name
        );
        if let Some(parts) = crate::outputs::parts_text(&site.parts) {
            out += &format!("        {parts}\n");
        }
        out += &stack_lines_text(&index.frames(info, site.stack), frames, "        ");
    }
    if sites.len() > LARGEST_SHOWN {
        out += &format!("      ... and {} more call sites\n", sites.len() - LARGEST_SHOWN);
    }
    out
}

/// A stack headed by its headline frame (for lists without their own
/// heading line).
fn stack_text(index: &TraceIndex, info: &ProcessIndex, stack: u32, frames: FramesShown, indent: &str) -> String {
    let resolved = index.frames(info, stack);
    match headline(&resolved) {
        Some(at) => format!(
            "{indent}at {}\n{}",
            headline_text(&resolved[at], false),
            stack_lines_text(&resolved, frames, indent)
        ),
        None => format!("{indent}{NO_STACK}\n"),
    }
}

/// A stack's lines: folded and at most [`FRAMES_SHOWN`] of them, or every
/// frame.
fn stack_lines_text(resolved: &[Frame], frames: FramesShown, indent: &str) -> String {
    if resolved.is_empty() {
        return format!("{indent}{NO_STACK}\n");
    }
    let lines = stack_texts(resolved, frames);
    let shown = if frames == FramesShown::Full {
        lines.len()
    } else {
        FRAMES_SHOWN
    };
    let mut out = String::new();
    for line in lines.iter().take(shown) {
        out += &format!("{indent}{line}\n");
    }
    if lines.len() > shown {
        out += &format!(
            "{indent}... {} more lines (--frames full shows them)\n",
            lines.len() - shown
        );
    }
    out
}

/// The lines saying what the trace lacks of a process, and why.
fn lost_text(lost: u64, end: &ProcessEnd) -> String {
    if lost == 0 {
        return String::new();
    }
    let mut reasons = Vec::new();
    if end.dropped_records > 0 {
        let why = end
            .drop_errno
            .map_or_else(|| "unknown reason".into(), crate::system::errno::describe);
        reasons.push(format!("{} could not be stored ({why})", end.dropped_records));
    }
    if end.unfinished_records > 0 {
        let when = if end.still_running {
            "in flight when the trace ended"
        } else {
            "cut short by the process's death"
        };
        reasons.push(format!("{} {when}", count(end.unfinished_records, "was", "were")));
    }
    if end.damaged_records > 0 {
        reasons.push(format!(
            "{} damaged in the spool",
            count(end.damaged_records, "was", "were")
        ));
    }
    let explained = end.dropped_records + end.unfinished_records + end.damaged_records;
    if lost > explained {
        reasons.push(format!(
            "{} missing from the trace",
            count(lost - explained, "is", "are")
        ));
    }
    format!("  LOST {}: {}\n", count(lost, "event", "events"), reasons.join("; "))
}
