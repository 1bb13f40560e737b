//! Call stacks as source frames: stack node ids resolved through the
//! trace's symbols.

use super::paused_spans::PAUSED_SITE;
use super::trace_index::{ProcessIndex, TraceIndex};
use cudatrace_events::recording_switch::PAUSED_STACK;

/// Longest parent chain followed (guards against a damaged node table).
const MAX_STACK_NODES: usize = 4096;

/// One source frame of a resolved stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Function (demangled), Python qualified name, `module+0xoffset`, or
    /// a marker such as `<truncated>`.
    pub function: String,
    /// Source file.
    pub file: Option<String>,
    /// Line in `file`.
    pub line: Option<u32>,
    /// The shared object (or `python`).
    pub module: Option<String>,
}

impl Frame {
    /// The module's file name, without its folder.
    pub fn module_name(&self) -> Option<&str> {
        self.module.as_deref().map(|m| m.rsplit('/').next().unwrap_or(m))
    }
}

impl TraceIndex {
    /// The frames of stack `stack` of `process`, innermost first; empty for 0.
    /// A tensor's stack starts at the caller of PyTorch's allocator.
    pub fn frames(&self, process: &ProcessIndex, stack: u32) -> Vec<Frame> {
        let mut frames = self.all_frames(process, stack);
        // A tensor's stack starts inside PyTorch's allocator, which called
        // the tracker: its caller is where the tensor was made.
        let allocator = frames
            .iter()
            .take_while(|f| f.module.as_deref().is_some_and(is_caching_allocator))
            .count();
        if allocator < frames.len() {
            frames.drain(..allocator);
        }
        frames
    }

    /// Every frame of stack `stack` of `process`, innermost first. An event
    /// recorded while paused has one frame, named [`PAUSED_SITE`].
    pub fn all_frames(&self, process: &ProcessIndex, stack: u32) -> Vec<Frame> {
        if stack == PAUSED_STACK {
            return vec![Frame {
                function: PAUSED_SITE.to_string(),
                file: None,
                line: None,
                module: None,
            }];
        }
        let text = |id: u64| {
            (id != 0).then(|| {
                self.strings
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| format!("<string {id}>"))
            })
        };
        let mut frames = Vec::new();
        let mut node = stack;
        for _ in 0..MAX_STACK_NODES {
            if node == 0 {
                break;
            }
            let known = process.stack_nodes.get(&node);
            match process.stack_symbols.get(&node) {
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
}

/// Whether `module` is PyTorch's CUDA caching allocator's library.
pub(super) fn is_caching_allocator(module: &str) -> bool {
    module.rsplit('/').next() == Some("libc10_cuda.so")
}
