//! [`StackCatalog`]: the stack records of each process, gathered while a
//! trace is written, then symbolized into `String` and `Symbols` records.

use super::native_symbols::NativeSymbols;
use super::text_frames::{marker, python_frame, NO_PYTHON_TEXT, TRUNCATED_TEXT};
use cudatrace_events::stacks::{blob_kind, frame_kind, BlobAssembler, BlobPiece, CodeInfo, ModuleInfo, StackNode};
use cudatrace_events::Event;
use cudatrace_trace::{NodeSymbols, Record, SymbolFrame};
use std::collections::{BTreeMap, HashMap};

/// The stack records of one process image.
#[derive(Default)]
struct ProcessStacks {
    nodes: Vec<StackNode>,
    blobs: BlobAssembler,
    modules: Vec<ModuleInfo>,
    code: HashMap<u64, CodeInfo>,
}

/// Stack nodes and their descriptions, gathered while a trace is written.
#[derive(Default)]
pub struct StackCatalog {
    processes: BTreeMap<u32, ProcessStacks>,
}

impl StackCatalog {
    /// Takes note of the stack records among `events` of trace process `process`.
    pub fn observe(&mut self, process: u32, events: &[Event]) {
        for event in events.iter().filter(|e| !e.op.is_memory_event()) {
            let stacks = self.processes.entry(process).or_default();
            if let Some(node) = StackNode::from_event(event) {
                stacks.nodes.push(node);
            } else if let Some(piece) = BlobPiece::from_event(event) {
                let Some((kind, key, bytes)) = stacks.blobs.add(&piece) else {
                    continue;
                };
                match kind {
                    blob_kind::MODULE => stacks.modules.extend(ModuleInfo::decode(&bytes)),
                    blob_kind::CODE => {
                        if let Some(code) = CodeInfo::decode(&bytes) {
                            stacks.code.insert(key, code);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Symbolizes every node: `String` records, then one `Symbols` record per process.
    pub fn into_records(self) -> Vec<Record> {
        let mut native = NativeSymbols::default();
        let mut strings: HashMap<String, u64> = HashMap::new();
        let mut string_records = Vec::new();
        let mut intern = |text: &str, records: &mut Vec<Record>| -> u64 {
            if text.is_empty() {
                return 0;
            }
            if let Some(&id) = strings.get(text) {
                return id;
            }
            let id = strings.len() as u64 + 1;
            strings.insert(text.to_owned(), id);
            records.push(Record::String {
                id,
                text: text.to_owned(),
            });
            id
        };
        let mut symbol_records = Vec::new();
        for (process, stacks) in &self.processes {
            let mut nodes = Vec::with_capacity(stacks.nodes.len());
            for node in &stacks.nodes {
                let frames = match node.kind {
                    frame_kind::NATIVE => native.frames(&stacks.modules, node.value),
                    frame_kind::PYTHON => vec![python_frame(stacks.code.get(&node.value), node)],
                    frame_kind::NO_PYTHON => vec![marker(NO_PYTHON_TEXT)],
                    frame_kind::TRUNCATED => vec![marker(TRUNCATED_TEXT)],
                    _ => vec![marker("[unknown frame kind]")],
                };
                let frames = frames
                    .iter()
                    .map(|f| SymbolFrame {
                        function: intern(&f.function, &mut string_records),
                        file: intern(&f.file, &mut string_records),
                        line: f.line,
                        module: intern(&f.module, &mut string_records),
                    })
                    .collect();
                nodes.push(NodeSymbols { node: node.id, frames });
            }
            symbol_records.push(Record::Symbols {
                process: *process,
                nodes,
            });
        }
        string_records.extend(symbol_records);
        string_records
    }
}
