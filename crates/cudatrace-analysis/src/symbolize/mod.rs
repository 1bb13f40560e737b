//! Turning the stack nodes of a trace into source frames, once a run is
//! collected and while its binaries are still on this machine.
//!
//! Native addresses are symbolized with blazesym from the ELF files the
//! module map names (DWARF where present: function, file, line and
//! inlined frames; the symbol table otherwise; `module+0xoffset` without
//! either). Python frames come from the code-object descriptions the
//! process copied, with the line worked out from the line table. Each
//! distinct frame is symbolized once, however many events share it. The
//! results go into the trace as `String` and `Symbols` records, beside the
//! raw addresses and build ids, so a trace copied elsewhere still reads.

mod byte_names;
pub mod python_lines;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use cudatrace_events::stacks::{blob_kind, frame_kind, BlobAssembler, BlobPiece, CodeInfo, ModuleInfo, StackNode};
use cudatrace_events::Event;
use cudatrace_trace::{NodeSymbols, Record, SymbolFrame};
use python_lines::{line_at, LineTableFormat};
use std::collections::{BTreeMap, HashMap};

/// Module name given to Python frames.
pub const PYTHON_MODULE: &str = "python";
/// Function name of the marker for threads without Python frames.
pub const NO_PYTHON_TEXT: &str = "[Python frames not available: this thread has no Python thread state]";
/// Function name of the marker for stacks cut at the depth limit.
pub const TRUNCATED_TEXT: &str = "[stack truncated at the depth limit]";

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

/// A frame before its text is interned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TextFrame {
    function: String,
    file: String,
    line: u32,
    module: String,
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

fn marker(text: &str) -> TextFrame {
    TextFrame {
        function: text.to_owned(),
        file: String::new(),
        line: 0,
        module: String::new(),
    }
}

fn python_frame(code: Option<&CodeInfo>, node: &StackNode) -> TextFrame {
    let Some(code) = code else {
        return TextFrame {
            function: format!("<Python code object 0x{:x}>", node.value),
            file: String::new(),
            line: 0,
            module: PYTHON_MODULE.to_owned(),
        };
    };
    let line = LineTableFormat::for_version(code.major, code.minor)
        .and_then(|format| line_at(format, &code.line_table, code.first_line, node.offset))
        .filter(|&line| line > 0)
        .unwrap_or(code.first_line.max(0));
    TextFrame {
        function: code.qualname.clone(),
        file: code.filename.clone(),
        line: line as u32,
        module: PYTHON_MODULE.to_owned(),
    }
}

/// Native symbolization, cached per (module path, address in the file).
#[derive(Default)]
struct NativeSymbols {
    symbolizer: Option<Symbolizer>,
    /// For the frames blazesym refuses (a name that is not UTF-8).
    byte_names: byte_names::ByteNames,
    cache: HashMap<(String, u64), Vec<TextFrame>>,
}

impl NativeSymbols {
    /// The frames behind return address `address` (innermost first).
    fn frames(&mut self, modules: &[ModuleInfo], address: u64) -> Vec<TextFrame> {
        // A return address points past the call instruction.
        let lookup = address.saturating_sub(1);
        let Some(module) = modules.iter().find(|m| (m.start..m.end).contains(&lookup)) else {
            return vec![TextFrame {
                function: format!("0x{address:x}"),
                file: String::new(),
                line: 0,
                module: String::new(),
            }];
        };
        let file_address = lookup - module.bias;
        let key = (module.path.clone(), file_address);
        if let Some(frames) = self.cache.get(&key) {
            return frames.clone();
        }
        let frames = self.symbolize(module, file_address);
        self.cache.insert(key, frames.clone());
        frames
    }

    fn symbolize(&mut self, module: &ModuleInfo, file_address: u64) -> Vec<TextFrame> {
        let base_name = module.path.rsplit('/').next().unwrap_or(&module.path).to_owned();
        let fallback = vec![TextFrame {
            function: format!("{base_name}+0x{file_address:x}"),
            file: String::new(),
            line: 0,
            module: module.path.clone(),
        }];
        if module.path.is_empty()
            || module.path.starts_with("linux-vdso")
            || !std::path::Path::new(&module.path).exists()
        {
            return fallback;
        }
        let symbolizer = self.symbolizer.get_or_insert_with(|| {
            Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .build()
        });
        let source = Source::Elf(Elf::new(&module.path));
        let sym = match symbolizer.symbolize_single(&source, Input::VirtOffset(file_address)) {
            Ok(Symbolized::Sym(sym)) => sym,
            Ok(_) => return fallback,
            // blazesym refuses a frame whose name is not UTF-8, file and
            // line included: read them with the name as bytes.
            Err(_) => {
                return match self.byte_names.frame(&module.path, file_address) {
                    Some(frame) => vec![TextFrame {
                        function: frame.function,
                        file: frame.file,
                        line: frame.line,
                        module: module.path.clone(),
                    }],
                    None => fallback,
                }
            }
        };
        let location = |info: &Option<blazesym::symbolize::CodeInfo>| -> (String, u32) {
            info.as_ref().map_or((String::new(), 0), |info| {
                (info.to_path().to_string_lossy().into_owned(), info.line.unwrap_or(0))
            })
        };
        // blazesym lists inlined calls outermost first. The symbol's own
        // location is where it calls the first inlined function (or the
        // instruction, without inlining); each inlined function's location
        // lies inside it.
        let mut names: Vec<String> = vec![sym.name.to_string()];
        names.extend(sym.inlined.iter().map(|f| f.name.to_string()));
        let mut locations: Vec<(String, u32)> = vec![location(&sym.code_info.as_deref().cloned())];
        locations.extend(sym.inlined.iter().map(|f| location(&f.code_info)));
        names
            .into_iter()
            .zip(locations)
            .rev()
            .map(|(function, (file, line))| TextFrame {
                function,
                file,
                line,
                module: module.path.clone(),
            })
            .collect()
    }
}
