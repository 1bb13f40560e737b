//! `cudatrace report`: per process and device, what was allocated, the peak,
//! what was still live at exit, and every out-of-memory failure.
//!
//! The trace is read as a stream; memory use grows with the number of
//! allocations live at once, not with the length of the trace.

use crate::cli::ReportArgs;
use crate::terminal::Stdout;
use crate::wording::{bytes, count};
use crate::Failure;
use cudatrace_events::stacks::StackNode;
use cudatrace_events::{Api, Event, Kind, Op};
use cudatrace_trace::{Damage, DamagedSpool, Header, ProcessEnd, ProcessStart, Record, SymbolFrame, TraceReader};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Live allocations the text report lists per device, largest first.
const LARGEST_SHOWN: usize = 5;
/// Frames of one stack shown in the text report.
const FRAMES_SHOWN: usize = 16;
/// Longest parent chain followed (guards against a damaged node table).
const MAX_STACK_NODES: usize = 4096;

/// One source frame of a resolved stack.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Frame {
    function: String,
    file: Option<String>,
    line: Option<u32>,
    module: Option<String>,
}

impl Frame {
    fn json(&self) -> Value {
        json!({"function": self.function, "file": self.file, "line": self.line, "module": self.module})
    }

    fn text(&self) -> String {
        let mut out = self.function.clone();
        if let Some(file) = &self.file {
            out += &format!(" ({file}");
            if let Some(line) = self.line {
                out += &format!(":{line}");
            }
            out += ")";
        }
        if let Some(module) = &self.module {
            let name = module.rsplit('/').next().unwrap_or(module);
            if name != crate::symbolize::PYTHON_MODULE && !out.contains(name) {
                out += &format!(" [{name}]");
            }
        }
        out
    }
}

/// Call sites, largest first: (stack, bytes, allocations).
fn largest_call_sites(by_stack: &ByStack) -> Vec<(u32, u64, u64)> {
    let mut sites: Vec<(u32, u64, u64)> = by_stack.iter().map(|(&s, &(b, n))| (s, b, n)).collect();
    sites.sort_by_key(|&(stack, bytes, _)| (std::cmp::Reverse(bytes), stack));
    sites
}

/// A device as the report groups memory: an ordinal, or unknown (the
/// tracer could not learn which device an allocation was on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum DeviceKey {
    Gpu(u8),
    Unknown,
}

impl DeviceKey {
    fn of(device: Option<u8>) -> DeviceKey {
        device.map_or(DeviceKey::Unknown, DeviceKey::Gpu)
    }

    fn json(self) -> Value {
        match self {
            DeviceKey::Gpu(ordinal) => json!(ordinal),
            DeviceKey::Unknown => Value::Null,
        }
    }

    fn label(self) -> String {
        match self {
            DeviceKey::Gpu(ordinal) => format!("GPU {ordinal}"),
            DeviceKey::Unknown => "unknown device".to_string(),
        }
    }
}

/// One allocation still live.
#[derive(Clone, Debug)]
struct Live {
    size: u64,
    api: Api,
    kind: Kind,
    device: Option<u8>,
    stack: u32,
}

/// Physical memory behind a VMM handle: gone once released and unmapped.
#[derive(Clone, Debug)]
struct Physical {
    size: u64,
    device: Option<u8>,
    api: Api,
    mappings: u32,
    released: bool,
    stack: u32,
}

#[derive(Clone, Debug)]
struct Oom {
    requested_bytes: u64,
    api: Api,
    device_free: u64,
    device_total: u64,
    stack: u32,
}

/// Bytes and allocations live per call stack (innermost node id).
type ByStack = HashMap<u32, (u64, u64)>;

#[derive(Clone, Debug, Default)]
struct DeviceStats {
    allocations: u64,
    frees: u64,
    bytes_allocated: u64,
    current: u64,
    peak: u64,
    ooms: Vec<Oom>,
    live_by_stack: ByStack,
    /// What was live when the peak was reached.
    peak_by_stack: ByStack,
    /// The peak was raised and not yet copied into `peak_by_stack`: copied
    /// when memory first goes down again (or at the end), so that a climb
    /// costs one copy, not one per allocation.
    peak_pending: bool,
}

impl DeviceStats {
    fn add(&mut self, size: u64, stack: u32) {
        self.allocations += 1;
        self.bytes_allocated += size;
        self.current += size;
        let entry = self.live_by_stack.entry(stack).or_default();
        entry.0 += size;
        entry.1 += 1;
        if self.current > self.peak {
            self.peak = self.current;
            self.peak_pending = true;
        }
    }

    fn remove(&mut self, size: u64, stack: u32) {
        self.settle_peak();
        self.frees += 1;
        self.current = self.current.saturating_sub(size);
        if let Some(entry) = self.live_by_stack.get_mut(&stack) {
            entry.0 = entry.0.saturating_sub(size);
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                self.live_by_stack.remove(&stack);
            }
        }
    }

    fn settle_peak(&mut self) {
        if self.peak_pending {
            self.peak_by_stack = self.live_by_stack.clone();
            self.peak_pending = false;
        }
    }
}

#[derive(Clone, Debug, Default)]
struct HostStats {
    allocations: u64,
    frees: u64,
    current: u64,
    peak: u64,
}

impl HostStats {
    fn add(&mut self, size: u64) {
        self.allocations += 1;
        self.current += size;
        self.peak = self.peak.max(self.current);
    }
}

/// Everything known about one process image.
#[derive(Default)]
struct ProcessReport {
    start: Option<ProcessStart>,
    end: Option<ProcessEnd>,
    events: u64,
    /// One past the highest sequence number seen.
    next_seq: u64,
    /// Sequence numbers skipped so far.
    gaps: u64,
    /// Allocations at an address already live: their free was never seen.
    reused_without_free: u64,
    devices: BTreeMap<DeviceKey, DeviceStats>,
    host: HostStats,
    /// Device-kind allocations, keyed by (is an array handle, address).
    live: HashMap<(bool, u64), Live>,
    live_host: HashMap<u64, u64>,
    physical: HashMap<u64, Physical>,
    /// VMM mappings: start -> (length, handle).
    mappings: BTreeMap<u64, (u64, u64)>,
    /// Stack nodes by id.
    stack_nodes: HashMap<u32, StackNode>,
    /// Source frames of each stack node, from the trace's symbols.
    stack_symbols: HashMap<u32, Vec<SymbolFrame>>,
}

impl ProcessReport {
    /// The frames of stack `stack`, innermost first; empty for 0.
    fn stack(&self, stack: u32, strings: &HashMap<u64, String>) -> Vec<Frame> {
        let text = |id: u64| (id != 0).then(|| strings.get(&id).cloned().unwrap_or_else(|| format!("<string {id}>")));
        let mut frames = Vec::new();
        let mut node = stack;
        for _ in 0..MAX_STACK_NODES {
            if node == 0 {
                break;
            }
            let known = self.stack_nodes.get(&node);
            match self.stack_symbols.get(&node) {
                Some(symbols) => frames.extend(symbols.iter().map(|f| Frame {
                    function: text(f.function).unwrap_or_else(|| "<unknown>".into()),
                    file: text(f.file),
                    line: (f.line != 0).then_some(f.line),
                    module: text(f.module),
                })),
                None => frames.push(Frame {
                    function: known.map_or_else(
                        || format!("<stack node {node} missing from the trace>"),
                        |n| format!("0x{:x}", n.value),
                    ),
                    file: None,
                    line: None,
                    module: None,
                }),
            }
            match known {
                Some(n) => node = n.parent,
                None => break,
            }
        }
        frames
    }

    fn device(&mut self, device: Option<u8>) -> &mut DeviceStats {
        self.devices.entry(DeviceKey::of(device)).or_default()
    }

    /// Physical memory goes back only once released and no longer mapped:
    /// that is when it counts as freed.
    fn drop_physical(&mut self, handle: u64) {
        if let Some(physical) = self.physical.remove(&handle) {
            match physical.device {
                Some(_) => self.device(physical.device).remove(physical.size, physical.stack),
                None => {
                    self.host.frees += 1;
                    self.host.current = self.host.current.saturating_sub(physical.size);
                }
            }
        }
    }

    /// Events lost: gaps in the sequence numbers, and those the process
    /// handed out after the last one in the trace.
    fn lost_events(&self) -> u64 {
        let trailing = self
            .end
            .as_ref()
            .map_or(0, |end| end.reserved_events.saturating_sub(self.next_seq));
        self.gaps + trailing
    }

    fn apply(&mut self, event: &Event) {
        self.gaps += event.seq.saturating_sub(self.next_seq);
        self.next_seq = self.next_seq.max(event.seq + 1);
        if !event.op.is_memory_event() {
            if let Some(node) = StackNode::from_event(event) {
                self.stack_nodes.insert(node.id, node);
            }
            return;
        }
        self.events += 1;
        match (event.op, event.kind) {
            (_, Kind::IpcImport) | (Op::Reserve | Op::Unreserve | Op::Failed, _) => {}
            (Op::Oom, _) => {
                let oom = Oom {
                    requested_bytes: event.size,
                    api: event.api,
                    device_free: event.arg1,
                    device_total: event.arg2,
                    stack: event.stack,
                };
                self.device(event.device).ooms.push(oom);
            }
            (Op::Alloc, Kind::HostPinned) => {
                if let Some(size) = self.live_host.insert(event.address, event.size) {
                    self.reused_without_free += 1;
                    self.host.frees += 1;
                    self.host.current = self.host.current.saturating_sub(size);
                }
                self.host.add(event.size);
            }
            (Op::Free, Kind::HostPinned) => {
                if let Some(size) = self.live_host.remove(&event.address) {
                    self.host.frees += 1;
                    self.host.current = self.host.current.saturating_sub(size);
                }
            }
            (Op::Alloc, Kind::VmmPhysical) => {
                let physical = Physical {
                    size: event.size,
                    device: event.device,
                    api: event.api,
                    mappings: 0,
                    released: false,
                    stack: event.stack,
                };
                if self.physical.contains_key(&event.address) {
                    self.reused_without_free += 1;
                    self.drop_physical(event.address);
                }
                match event.device {
                    Some(_) => self.device(event.device).add(event.size, event.stack),
                    None => self.host.add(event.size),
                }
                self.physical.insert(event.address, physical);
            }
            (Op::Free, Kind::VmmPhysical) => {
                let Some(physical) = self.physical.get_mut(&event.address) else {
                    return;
                };
                physical.released = true;
                if physical.mappings == 0 {
                    self.drop_physical(event.address);
                }
            }
            (Op::Map, _) => {
                self.mappings.insert(event.address, (event.size, event.arg1));
                if let Some(physical) = self.physical.get_mut(&event.arg1) {
                    physical.mappings += 1;
                }
            }
            (Op::Unmap, _) => {
                let end = event.address.saturating_add(event.size);
                let removed: Vec<u64> = self
                    .mappings
                    .range(event.address..end)
                    .map(|(&start, _)| start)
                    .collect();
                for start in removed {
                    let Some((_, handle)) = self.mappings.remove(&start) else {
                        continue;
                    };
                    let Some(physical) = self.physical.get_mut(&handle) else {
                        continue;
                    };
                    physical.mappings = physical.mappings.saturating_sub(1);
                    if physical.released && physical.mappings == 0 {
                        self.drop_physical(handle);
                    }
                }
            }
            (Op::Alloc, kind) if kind.counts_as_device_memory() => {
                let live = Live {
                    size: event.size,
                    api: event.api,
                    kind,
                    device: event.device,
                    stack: event.stack,
                };
                if let Some(old) = self.live.insert((kind == Kind::Array, event.address), live) {
                    self.reused_without_free += 1;
                    self.device(old.device).remove(old.size, old.stack);
                }
                self.device(event.device).add(event.size, event.stack);
            }
            (Op::Free, kind) if kind.counts_as_device_memory() => {
                if let Some(live) = self.live.remove(&(kind == Kind::Array, event.address)) {
                    self.device(live.device).remove(live.size, live.stack);
                }
            }
            _ => {}
        }
    }

    /// Device-memory allocations live at the end, per device, sorted by address.
    fn live_at_exit(&self) -> BTreeMap<DeviceKey, Vec<(u64, Live)>> {
        let mut by_device: BTreeMap<DeviceKey, Vec<(u64, Live)>> = BTreeMap::new();
        for (&(_, address), live) in &self.live {
            by_device
                .entry(DeviceKey::of(live.device))
                .or_default()
                .push((address, live.clone()));
        }
        for (&handle, physical) in &self.physical {
            if let Some(device) = physical.device {
                let live = Live {
                    size: physical.size,
                    api: physical.api,
                    kind: Kind::VmmPhysical,
                    device: Some(device),
                    stack: physical.stack,
                };
                by_device
                    .entry(DeviceKey::Gpu(device))
                    .or_default()
                    .push((handle, live));
            }
        }
        by_device
            .values_mut()
            .for_each(|list| list.sort_by_key(|(address, _)| *address));
        by_device
    }
}

/// The whole report.
pub struct Report {
    header: Option<Header>,
    processes: Vec<ProcessReport>,
    index_of: HashMap<u32, usize>,
    refused: Vec<cudatrace_trace::Refusal>,
    damaged_spools: Vec<DamagedSpool>,
    /// Whether the trace ended with its footer.
    pub complete: bool,
    /// Where reading stopped early, if it did.
    pub damage: Option<Damage>,
    /// Damaged frames that were skipped, reading on after each.
    pub skipped: Vec<Damage>,
    /// Records read.
    pub records: u64,
    /// Interned texts of stack frames.
    strings: HashMap<u64, String>,
}

impl Report {
    /// Reads the trace at `path`.
    pub fn read(path: &Path) -> Result<Report, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let reader = TraceReader::new(std::io::BufReader::with_capacity(1 << 20, file))
            .map_err(|damage| format!("{}: {}", path.display(), damage.reason))?;
        let mut report = Report {
            header: None,
            processes: Vec::new(),
            index_of: HashMap::new(),
            refused: Vec::new(),
            damaged_spools: Vec::new(),
            complete: false,
            damage: None,
            skipped: Vec::new(),
            records: 0,
            strings: HashMap::new(),
        };
        for record in reader {
            let record = match record {
                Ok(record) => record,
                Err(damage) if damage.skipped => {
                    report.skipped.push(damage);
                    continue;
                }
                Err(damage) => {
                    report.damage = Some(damage);
                    break;
                }
            };
            report.records += 1;
            match record {
                Record::Header(header) => report.header = Some(header),
                Record::Process(start) => {
                    report.index_of.insert(start.process, report.processes.len());
                    report.processes.push(ProcessReport {
                        start: Some(start),
                        ..Default::default()
                    });
                }
                Record::Events { process, events } => {
                    if let Some(&index) = report.index_of.get(&process) {
                        events.iter().for_each(|event| report.processes[index].apply(event));
                    }
                }
                Record::ProcessEnd(end) => {
                    if let Some(&index) = report.index_of.get(&end.process) {
                        report.processes[index].end = Some(end);
                    }
                }
                Record::Refused(refusal) => report.refused.push(refusal),
                Record::DamagedSpool(spool) => report.damaged_spools.push(spool),
                Record::Footer(_) => report.complete = true,
                Record::String { id, text } => {
                    report.strings.insert(id, text);
                }
                Record::Symbols { process, nodes } => {
                    if let Some(&index) = report.index_of.get(&process) {
                        let symbols = &mut report.processes[index].stack_symbols;
                        symbols.extend(nodes.into_iter().map(|n| (n.node, n.frames)));
                    }
                }
                Record::Unknown { .. } => {}
            }
        }
        for process in &mut report.processes {
            process.devices.values_mut().for_each(DeviceStats::settle_peak);
        }
        Ok(report)
    }

    fn dropped_events(&self) -> u64 {
        self.processes
            .iter()
            .filter_map(|p| p.end.as_ref())
            .map(|end| end.dropped_records)
            .sum()
    }

    /// Events that happened but are not in the trace.
    pub fn lost_events(&self) -> u64 {
        self.processes.iter().map(ProcessReport::lost_events).sum()
    }

    /// The report as JSON (the documented shape; keys may be added, never removed).
    pub fn to_json(&self) -> Value {
        let processes: Vec<Value> = self
            .processes
            .iter()
            .map(|process| {
                let start = process.start.as_ref().expect("every process report has a start");
                let end = process.end.clone().unwrap_or_default();
                let live = process.live_at_exit();
                let stack_json =
                    |stack: u32| -> Value { process.stack(stack, &self.strings).iter().map(Frame::json).collect() };
                let devices: Vec<Value> = process
                    .devices
                    .iter()
                    .map(|(&device, stats)| {
                        let live_list: Vec<Value> = live
                            .get(&device)
                            .map(|list| {
                                list.iter()
                                    .map(|(address, l)| json!({"address": address, "size": l.size, "api": l.api.name(), "kind": l.kind.name(), "stack": stack_json(l.stack)}))
                                    .collect()
                            })
                            .unwrap_or_default();
                        let ooms: Vec<Value> = stats
                            .ooms
                            .iter()
                            .map(|o| json!({"requested_bytes": o.requested_bytes, "api": o.api.name(), "device_free": o.device_free, "device_total": o.device_total, "stack": stack_json(o.stack)}))
                            .collect();
                        let sites = |by_stack: &ByStack| -> Vec<Value> {
                            largest_call_sites(by_stack)
                                .into_iter()
                                .map(|(stack, bytes, allocations)| json!({"bytes": bytes, "allocations": allocations, "stack": stack_json(stack)}))
                                .collect()
                        };
                        json!({
                            "device": device.json(),
                            "allocations": stats.allocations,
                            "frees": stats.frees,
                            "bytes_allocated": stats.bytes_allocated,
                            "peak_bytes": stats.peak,
                            "live_bytes_at_exit": stats.current,
                            "live_at_exit": live_list,
                            "live_at_exit_by_call_site": sites(&stats.live_by_stack),
                            "peak_by_call_site": sites(&stats.peak_by_stack),
                            "ooms": ooms,
                        })
                    })
                    .collect();
                let exit_time = end
                    .exit_time_ns
                    .filter(|&t| t >= start.start_monotonic_ns)
                    .map(|t| start.start_realtime_ns + (t - start.start_monotonic_ns));
                json!({
                    "pid": start.pid,
                    "start_time_ns": start.start_realtime_ns,
                    "exit_time_ns": exit_time,
                    "ppid": start.ppid,
                    "image": start.image,
                    "argv": start.argv,
                    "exit_status": end.exit_status,
                    "still_running": end.still_running,
                    "events": process.events,
                    "lost_events": process.lost_events(),
                    "dropped_events": end.dropped_records,
                    "drop_reason": end.drop_errno.map(crate::errno::describe),
                    "unfinished_records": end.unfinished_records,
                    "damaged_records": end.damaged_records,
                    "unknown_frees": end.unknown_frees,
                    "reused_without_free": process.reused_without_free,
                    "devices": devices,
                    "host_pinned": {
                        "allocations": process.host.allocations,
                        "frees": process.host.frees,
                        "peak_bytes": process.host.peak,
                        "live_bytes_at_exit": process.host.current,
                    },
                })
            })
            .collect();
        let refused: Vec<Value> = self
            .refused
            .iter()
            .map(|r| json!({"path": r.path, "uid": r.uid, "reason": r.reason}))
            .collect();
        let damaged_spools: Vec<Value> = self
            .damaged_spools
            .iter()
            .map(|d| json!({"pid": d.pid, "image": d.image, "path": d.path, "reason": d.reason}))
            .collect();
        let skipped: Vec<Value> = self.skipped.iter().map(|d| json!(d.to_string())).collect();
        json!({
            "format_version": self.header.as_ref().map_or(cudatrace_trace::FORMAT_VERSION, |h| h.format_version),
            "lost_events": self.lost_events(),
            "dropped_events": self.dropped_events(),
            "complete": self.complete,
            "damage": self.damage.as_ref().map(ToString::to_string),
            "skipped_damage": skipped,
            "refused_spools": refused,
            "damaged_spools": damaged_spools,
            "processes": processes,
        })
    }

    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let events: u64 = self.processes.iter().map(|p| p.events).sum();
        if let Some(h) = &self.header {
            out += &format!(
                "trace of `{}` on {} (cudatrace {}): {}, {}\n",
                h.command.join(" "),
                h.host,
                h.tracer_version,
                count(self.processes.len() as u64, "process", "processes"),
                count(events, "event", "events")
            );
        }
        for process in &self.processes {
            let start = process.start.as_ref().expect("every process report has a start");
            let end = process.end.clone().unwrap_or_default();
            let exit = match (end.exit_status, end.still_running) {
                (_, true) => "still running at the end".to_string(),
                (Some(status), _) if status > 128 => format!("killed by signal {} (status {status})", status - 128),
                (Some(status), _) => format!("exit {status}"),
                (None, _) => "exit status unknown".to_string(),
            };
            out += &format!(
                "\npid {} (parent {}) {} — {exit}\n",
                start.pid,
                start.ppid,
                start.argv.join(" ")
            );
            let live = process.live_at_exit();
            for (device, stats) in &process.devices {
                let live_list = live.get(device).map(Vec::as_slice).unwrap_or_default();
                out += &format!(
                    "  {}: {}, {}, peak {}, live at exit {} in {}\n",
                    device.label(),
                    count(stats.allocations, "allocation", "allocations"),
                    count(stats.frees, "free", "frees"),
                    bytes(stats.peak),
                    bytes(stats.current),
                    count(live_list.len() as u64, "allocation", "allocations")
                );
                let mut largest: Vec<&(u64, Live)> = live_list.iter().collect();
                largest.sort_by_key(|(_, l)| std::cmp::Reverse(l.size));
                for (address, l) in largest.iter().take(LARGEST_SHOWN) {
                    out += &format!("    live {:>10} {} {} at {address:#x}\n", bytes(l.size), l.api, l.kind);
                }
                if largest.len() > LARGEST_SHOWN {
                    out += &format!(
                        "    ... and {} more (all in `cudatrace report --json`)\n",
                        largest.len() - LARGEST_SHOWN
                    );
                }
                out += &self.call_sites_text(process, "live at exit", &stats.live_by_stack);
                out += &self.call_sites_text(
                    process,
                    &format!("at the peak of {}", bytes(stats.peak)),
                    &stats.peak_by_stack,
                );
                for oom in &stats.ooms {
                    out += &format!(
                        "    OUT OF MEMORY: {} asked for {} with {} free of {}\n",
                        oom.api,
                        bytes(oom.requested_bytes),
                        bytes(oom.device_free),
                        bytes(oom.device_total)
                    );
                    out += &self.stack_text(process, oom.stack, "      ");
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
            out += &process.lost_text(&end);
        }
        let lost = self.lost_events();
        if lost > 0 {
            out += &format!("\nthe trace lacks {} in all\n", count(lost, "event", "events"));
        }
        for refusal in &self.refused {
            out += &format!("\nrefused {} (uid {}): {}\n", refusal.path, refusal.uid, refusal.reason);
        }
        for spool in &self.damaged_spools {
            out += &format!(
                "\npid {} (image {}): spool {} could not be read: {}\n",
                spool.pid, spool.image, spool.path, spool.reason
            );
        }
        out
    }

    /// The largest call sites of `by_stack`, each with its stack.
    fn call_sites_text(&self, process: &ProcessReport, what: &str, by_stack: &ByStack) -> String {
        let sites = largest_call_sites(by_stack);
        if sites.is_empty() || sites.iter().all(|&(stack, _, _)| stack == 0) {
            return String::new();
        }
        let mut out = format!("    call sites {what}:\n");
        for &(stack, size, allocations) in sites.iter().take(LARGEST_SHOWN) {
            out += &format!(
                "      {} in {}\n",
                bytes(size),
                count(allocations, "allocation", "allocations")
            );
            out += &self.stack_text(process, stack, "        ");
        }
        if sites.len() > LARGEST_SHOWN {
            out += &format!("      ... and {} more call sites\n", sites.len() - LARGEST_SHOWN);
        }
        out
    }

    fn stack_text(&self, process: &ProcessReport, stack: u32, indent: &str) -> String {
        let frames = process.stack(stack, &self.strings);
        if frames.is_empty() {
            return format!("{indent}(no call stack recorded)\n");
        }
        let mut out = String::new();
        for frame in frames.iter().take(FRAMES_SHOWN) {
            out += &format!("{indent}{}\n", frame.text());
        }
        if frames.len() > FRAMES_SHOWN {
            out += &format!("{indent}... {} more frames\n", frames.len() - FRAMES_SHOWN);
        }
        out
    }

    /// Reads `args.trace` and prints the report; 1 if the trace is damaged.
    pub fn print(&self, args: &ReportArgs) -> Result<u8, Failure> {
        let text = if args.json {
            format!("{}\n", self.to_json())
        } else {
            self.to_text()
        };
        let mut out = Stdout::new();
        if !out.write(&text)? || !out.finish()? {
            return Ok(0);
        }
        let path = args.trace.display();
        let mut code = 0;
        if !self.skipped.is_empty() {
            crate::terminal::say(&format!(
                "cudatrace: {path} has {}, skipped (the first {}); the events they held are counted as lost",
                count(self.skipped.len() as u64, "damaged frame", "damaged frames"),
                self.skipped[0]
            ));
            code = 1;
        }
        if let Some(damage) = &self.damage {
            crate::terminal::say(&format!(
                "cudatrace: {path} is damaged {damage}; the report covers the {} records before it",
                self.records
            ));
            code = 1;
        } else if !self.complete {
            crate::terminal::say(&format!(
                "cudatrace: {path} has no footer: it is still being written, or its writer was stopped"
            ));
        }
        Ok(code)
    }
}

impl ProcessReport {
    /// The lines saying what the trace lacks of this process, and why.
    fn lost_text(&self, end: &ProcessEnd) -> String {
        let lost = self.lost_events();
        if lost == 0 {
            return String::new();
        }
        let mut reasons = Vec::new();
        if end.dropped_records > 0 {
            let why = end
                .drop_errno
                .map_or_else(|| "unknown reason".into(), crate::errno::describe);
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
}

/// `cudatrace report`.
pub fn command(args: ReportArgs) -> Result<u8, Failure> {
    Report::read(&args.trace)?.print(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, op: Op, kind: Kind, address: u64, size: u64) -> Event {
        Event {
            pid: 1,
            tid: 1,
            seq,
            time_ns: seq,
            device: if kind == Kind::HostPinned { None } else { Some(0) },
            stream: 0,
            api: Api::CuMemAllocV2,
            op,
            kind,
            address,
            size,
            arg1: 0,
            arg2: 0,
            stack: 0,
        }
    }

    /// Allocations minus frees, against the allocations live at the end, per device.
    fn balance(p: &ProcessReport) -> Vec<(DeviceKey, u64, usize)> {
        let live = p.live_at_exit();
        p.devices
            .iter()
            .map(|(&device, stats)| {
                (
                    device,
                    stats.allocations - stats.frees,
                    live.get(&device).map_or(0, Vec::len),
                )
            })
            .collect()
    }

    const GPU0: DeviceKey = DeviceKey::Gpu(0);

    #[test]
    fn vmm_memory_is_freed_at_its_last_unmap_after_release() {
        let mut p = ProcessReport::default();
        let handle = 0x10;
        p.apply(&event(0, Op::Alloc, Kind::VmmPhysical, handle, 100));
        let mut map = event(1, Op::Map, Kind::VirtualAddress, 0x1000, 100);
        map.arg1 = handle;
        p.apply(&map);
        let mut second = event(2, Op::Map, Kind::VirtualAddress, 0x2000, 100);
        second.arg1 = handle;
        p.apply(&second);
        p.apply(&event(3, Op::Alloc, Kind::Device, 0x9000, 50));
        assert_eq!(p.devices[&GPU0].current, 150);
        assert_eq!(p.devices[&GPU0].peak, 150);
        // Released while still mapped: neither gone nor freed.
        p.apply(&event(4, Op::Free, Kind::VmmPhysical, handle, 100));
        assert_eq!(p.devices[&GPU0].current, 150);
        assert_eq!((p.devices[&GPU0].allocations, p.devices[&GPU0].frees), (2, 0));
        assert_eq!(balance(&p), vec![(GPU0, 2, 2)]);
        // One unmap covering both mappings frees it.
        p.apply(&event(5, Op::Unmap, Kind::VirtualAddress, 0x1000, 0x1100));
        assert_eq!(p.devices[&GPU0].current, 50);
        assert_eq!((p.devices[&GPU0].allocations, p.devices[&GPU0].frees), (2, 1));
        assert_eq!(p.devices[&GPU0].peak, 150);
        assert_eq!(balance(&p), vec![(GPU0, 1, 1)]);
        // Unmapped first, then released: freed at the release.
        p.apply(&event(6, Op::Alloc, Kind::VmmPhysical, 0x20, 64));
        p.apply(&event(7, Op::Free, Kind::VmmPhysical, 0x20, 64));
        assert_eq!((p.devices[&GPU0].allocations, p.devices[&GPU0].frees), (3, 2));
        assert_eq!(balance(&p), vec![(GPU0, 1, 1)]);
        assert_eq!(p.lost_events(), 0);
    }

    #[test]
    fn memory_on_an_unknown_device_is_not_counted_as_device_0() {
        let mut p = ProcessReport::default();
        p.apply(&event(0, Op::Alloc, Kind::Device, 0x1000, 10));
        let mut unknown = event(1, Op::Alloc, Kind::Device, 0x2000, 20);
        unknown.device = None;
        p.apply(&unknown);
        let mut freed = event(2, Op::Free, Kind::Device, 0x2000, 20);
        freed.device = None;
        p.apply(&freed);
        let mut again = event(3, Op::Alloc, Kind::Pool, 0x3000, 30);
        again.device = None;
        p.apply(&again);
        assert_eq!(p.devices[&GPU0].current, 10);
        assert_eq!(p.devices[&DeviceKey::Unknown].current, 30);
        assert_eq!(p.devices[&DeviceKey::Unknown].allocations, 2);
        assert_eq!(balance(&p), vec![(GPU0, 1, 1), (DeviceKey::Unknown, 1, 1)]);
        assert_eq!(DeviceKey::Unknown.json(), Value::Null);
        assert_eq!(DeviceKey::Unknown.label(), "unknown device");
    }

    #[test]
    fn lost_events_are_the_gaps_in_sequence_numbers_and_what_came_after_the_last() {
        let mut p = ProcessReport::default();
        for seq in [0, 1, 4, 5, 9] {
            p.apply(&event(seq, Op::Alloc, Kind::Device, 0x1000 * (seq + 1), 8));
        }
        assert_eq!(p.lost_events(), 5);
        p.end = Some(ProcessEnd {
            reserved_events: 12,
            ..Default::default()
        });
        assert_eq!(p.lost_events(), 7);
    }

    #[test]
    fn an_address_allocated_twice_frees_the_first_allocation() {
        let mut p = ProcessReport::default();
        p.apply(&event(0, Op::Alloc, Kind::Device, 0x1000, 10));
        p.apply(&event(1, Op::Alloc, Kind::Device, 0x1000, 30));
        assert_eq!(p.reused_without_free, 1);
        assert_eq!(p.devices[&GPU0].current, 30);
        assert_eq!(balance(&p), vec![(GPU0, 1, 1)]);
    }

    #[test]
    fn failed_calls_change_nothing() {
        let mut p = ProcessReport::default();
        p.apply(&event(0, Op::Alloc, Kind::Device, 0x1000, 10));
        p.apply(&event(1, Op::Failed, Kind::Device, 0x1000, 0));
        assert_eq!((p.devices[&GPU0].allocations, p.devices[&GPU0].frees), (1, 0));
        assert_eq!(p.devices[&GPU0].current, 10);
        assert_eq!((p.events, p.lost_events()), (2, 0));
    }

    #[test]
    fn host_pinned_and_ipc_memory_stay_out_of_device_totals() {
        let mut p = ProcessReport::default();
        p.apply(&event(0, Op::Alloc, Kind::HostPinned, 0x5000, 64));
        p.apply(&event(1, Op::Alloc, Kind::IpcImport, 0x6000, 0));
        p.apply(&event(2, Op::Free, Kind::HostPinned, 0x5000, 64));
        assert!(p.devices.is_empty());
        assert_eq!(
            (p.host.allocations, p.host.frees, p.host.peak, p.host.current),
            (1, 1, 64, 0)
        );
    }
}
