//! Interning: every string the trace repeats (event names and categories,
//! argument names, text values, the frames and files of call stacks, whole
//! call stacks) is written once, in the `InternedData` of the first packet
//! that uses it, and referred to by its iid after that. Iids count from 1
//! in each table (0 means none to Perfetto).

use super::messages::{Callstack, InternedData, InternedString, NamedEntry, StackFrame};
use crate::outputs::perfetto_scene::{slice_name, Stack};
use crate::wording::frame_function_text;
use cudatrace_analysis::Allocation;
use cudatrace_events::Api;
use foldhash::HashMap;
use std::hash::Hash;

/// The sequence's interned tables, and the entries no packet has written yet.
#[derive(Default)]
pub struct Interner {
    categories: HashMap<&'static str, u64>,
    event_names: HashMap<String, u64>,
    /// Each allocation slice's name by its size and API, so that it is
    /// formatted once.
    slice_names: HashMap<(u64, Api), u64>,
    argument_names: HashMap<&'static str, u64>,
    strings: HashMap<String, u64>,
    functions: HashMap<String, u64>,
    source_paths: HashMap<String, u64>,
    /// Frames by function, file and line iids.
    frames: HashMap<(u64, Option<u64>, Option<u32>), u64>,
    /// Call stacks by their frames.
    callstacks: HashMap<Vec<u64>, u64>,
    /// The call stack of each stack of each process; `None` for one with no
    /// frames.
    stacks: HashMap<(usize, u32), Option<u64>>,
    /// Entries made since [`Interner::take_fresh`] last took them.
    fresh: InternedData,
}

/// The iid of `key` in `table`, adding it (and its entry, made by `entry`
/// from the new iid, to `fresh`) if it is new.
fn intern<K: Hash + Eq, E>(
    table: &mut HashMap<K, u64>,
    key: K,
    fresh: &mut Vec<E>,
    entry: impl FnOnce(u64) -> E,
) -> u64 {
    let next = table.len() as u64 + 1;
    *table.entry(key).or_insert_with(|| {
        fresh.push(entry(next));
        next
    })
}

fn named(iid: u64, name: &str) -> NamedEntry {
    NamedEntry {
        iid: Some(iid),
        name: Some(name.to_string()),
    }
}

fn text(iid: u64, text: &str) -> InternedString {
    InternedString {
        iid: Some(iid),
        str: Some(text.as_bytes().to_vec()),
    }
}

impl Interner {
    /// An event category.
    pub fn category(&mut self, name: &'static str) -> u64 {
        intern(&mut self.categories, name, &mut self.fresh.event_categories, |iid| {
            named(iid, name)
        })
    }

    /// An event name.
    pub fn event_name(&mut self, name: &str) -> u64 {
        if let Some(&iid) = self.event_names.get(name) {
            return iid;
        }
        intern(
            &mut self.event_names,
            name.to_string(),
            &mut self.fresh.event_names,
            |iid| named(iid, name),
        )
    }

    /// The name of an allocation's slice ([`slice_name`]).
    pub fn slice_name(&mut self, a: &Allocation) -> u64 {
        if let Some(&iid) = self.slice_names.get(&(a.size, a.api)) {
            return iid;
        }
        let iid = self.event_name(&slice_name(a));
        self.slice_names.insert((a.size, a.api), iid);
        iid
    }

    /// An argument's name.
    pub fn argument_name(&mut self, name: &'static str) -> u64 {
        intern(
            &mut self.argument_names,
            name,
            &mut self.fresh.debug_annotation_names,
            |iid| named(iid, name),
        )
    }

    /// A text value of an argument.
    pub fn string(&mut self, value: &str) -> u64 {
        if let Some(&iid) = self.strings.get(value) {
            return iid;
        }
        intern(
            &mut self.strings,
            value.to_string(),
            &mut self.fresh.debug_annotation_string_values,
            |iid| text(iid, value),
        )
    }

    /// The call stack of `stack` of process `process`: its top frames,
    /// outermost first; `None` for a stack with no frames.
    pub fn callstack(&mut self, process: usize, stack: &Stack) -> Option<u64> {
        if let Some(&iid) = self.stacks.get(&(process, stack.id)) {
            return iid;
        }
        let frames = stack.top_frames();
        let mut frame_ids = Vec::with_capacity(frames.len());
        for frame in frames.iter().rev() {
            let function = frame_function_text(frame);
            let function = match self.functions.get(&function) {
                Some(&iid) => iid,
                None => intern(
                    &mut self.functions,
                    function.clone(),
                    &mut self.fresh.function_names,
                    |iid| text(iid, &function),
                ),
            };
            let path = frame.file.as_ref().map(|file| match self.source_paths.get(file) {
                Some(&iid) => iid,
                None => intern(
                    &mut self.source_paths,
                    file.clone(),
                    &mut self.fresh.source_paths,
                    |iid| text(iid, file),
                ),
            });
            let line = frame.line.filter(|_| path.is_some());
            frame_ids.push(intern(
                &mut self.frames,
                (function, path, line),
                &mut self.fresh.frames,
                |iid| StackFrame {
                    iid: Some(iid),
                    function_name_id: Some(function),
                    source_path_iid: path,
                    line_number: line,
                },
            ));
        }
        let iid = (!frame_ids.is_empty()).then(|| match self.callstacks.get(&frame_ids) {
            Some(&iid) => iid,
            None => intern(
                &mut self.callstacks,
                frame_ids.clone(),
                &mut self.fresh.callstacks,
                |iid| Callstack {
                    iid: Some(iid),
                    frame_ids: frame_ids.clone(),
                },
            ),
        });
        self.stacks.insert((process, stack.id), iid);
        iid
    }

    /// The entries made since the last call, for the packet about to be
    /// written; `None` if there are none.
    pub fn take_fresh(&mut self) -> Option<InternedData> {
        (!self.fresh.is_empty()).then(|| std::mem::take(&mut self.fresh))
    }
}
