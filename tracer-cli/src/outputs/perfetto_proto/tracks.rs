//! Tracks: each is given a uuid the first time something is drawn on it,
//! and its `TrackDescriptor` is written then, before anything on it.
//!
//! - uuid 1, the recording track: the marks where recording was paused and
//!   resumed (the sequence's default track);
//! - a process track per process image, named and labelled as the JSON
//!   names them;
//! - under each process, a counter track (in bytes) per counter name, and
//!   the lanes of its allocations, all the lanes of a place named alike;
//! - a thread track per thread that started a process or was refused memory.

use super::messages::{CounterDescriptor, ProcessDescriptor, ThreadDescriptor, TrackDescriptor, UNIT_SIZE_BYTES};
use crate::outputs::perfetto_scene::lanes::Lane;
use crate::outputs::perfetto_scene::Process;
use foldhash::HashMap;

/// The recording track's uuid.
pub const RECORDING_TRACK: u64 = 1;

/// The recording track's name.
const RECORDING_NAME: &str = "recording";

/// The uuids given so far.
pub struct Tracks {
    /// The uuid the next new track gets.
    next: u64,
    /// Each process's track, by process number.
    processes: HashMap<usize, u64>,
    /// Each process's counter tracks, by name.
    counters: HashMap<usize, HashMap<String, u64>>,
    lanes: HashMap<(usize, Lane), u64>,
    threads: HashMap<(usize, u32), u64>,
}

impl Default for Tracks {
    fn default() -> Tracks {
        Tracks {
            next: RECORDING_TRACK + 1,
            processes: HashMap::default(),
            counters: HashMap::default(),
            lanes: HashMap::default(),
            threads: HashMap::default(),
        }
    }
}

/// A pid as `ProcessDescriptor` and `ThreadDescriptor` hold it (an
/// `int32`): an image number past 511 would not fit, and is cut.
fn pid32(pid: u64) -> i32 {
    (pid & i32::MAX as u64) as i32
}

impl Tracks {
    fn new_uuid(&mut self) -> u64 {
        self.next += 1;
        self.next - 1
    }

    /// The recording track's descriptor.
    pub fn recording(&self) -> TrackDescriptor {
        TrackDescriptor {
            uuid: Some(RECORDING_TRACK),
            name: Some(RECORDING_NAME.to_string()),
            ..Default::default()
        }
    }

    /// `process`'s track; its descriptor goes to `new` if it is new.
    pub fn process(&mut self, process: Process, new: &mut Vec<TrackDescriptor>) -> u64 {
        if let Some(&uuid) = self.processes.get(&process.number) {
            return uuid;
        }
        let uuid = self.new_uuid();
        self.processes.insert(process.number, uuid);
        new.push(TrackDescriptor {
            uuid: Some(uuid),
            process: Some(ProcessDescriptor {
                pid: Some(pid32(process.track_pid())),
                process_name: Some(process.name()),
                process_labels: vec![process.label()],
            }),
            ..Default::default()
        });
        uuid
    }

    /// A new track under `process`'s, named `name`: a counter track of
    /// bytes if `counter`, else a lane.
    fn child(&mut self, process: Process, name: String, counter: bool, new: &mut Vec<TrackDescriptor>) -> u64 {
        let parent = self.process(process, new);
        let uuid = self.new_uuid();
        new.push(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            name: Some(name),
            counter: counter.then_some(CounterDescriptor {
                unit: Some(UNIT_SIZE_BYTES),
            }),
            ..Default::default()
        });
        uuid
    }

    /// `process`'s counter track named `name` (see [`Tracks::process`] for `new`).
    pub fn counter(&mut self, process: Process, name: &str, new: &mut Vec<TrackDescriptor>) -> u64 {
        if let Some(&uuid) = self.counters.get(&process.number).and_then(|c| c.get(name)) {
            return uuid;
        }
        let uuid = self.child(process, name.to_string(), true, new);
        self.counters
            .entry(process.number)
            .or_default()
            .insert(name.to_string(), uuid);
        uuid
    }

    /// `process`'s track of `lane` (see [`Tracks::process`] for `new`).
    pub fn lane(&mut self, process: Process, lane: Lane, new: &mut Vec<TrackDescriptor>) -> u64 {
        if let Some(&uuid) = self.lanes.get(&(process.number, lane)) {
            return uuid;
        }
        let uuid = self.child(process, lane.place.track_name(), false, new);
        self.lanes.insert((process.number, lane), uuid);
        uuid
    }

    /// The track of thread `tid` of `process` (see [`Tracks::process`] for `new`).
    pub fn thread(&mut self, process: Process, tid: u32, new: &mut Vec<TrackDescriptor>) -> u64 {
        if let Some(&uuid) = self.threads.get(&(process.number, tid)) {
            return uuid;
        }
        self.process(process, new);
        let uuid = self.new_uuid();
        self.threads.insert((process.number, tid), uuid);
        new.push(TrackDescriptor {
            uuid: Some(uuid),
            thread: Some(ThreadDescriptor {
                pid: Some(pid32(process.track_pid())),
                tid: Some(i64::from(tid)),
            }),
            ..Default::default()
        });
        uuid
    }
}
