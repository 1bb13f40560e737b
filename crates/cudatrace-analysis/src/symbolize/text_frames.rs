//! Frames as texts before they are interned, and the names given to the
//! frames that are not code: Python's module name, and the markers of a
//! thread without Python frames and of a stack cut at the depth limit.

use super::python_lines::{line_at, LineTableFormat};
use cudatrace_events::stacks::{CodeInfo, StackNode};

/// Module name given to Python frames.
pub const PYTHON_MODULE: &str = "python";
/// Function name of the marker for threads without Python frames.
pub const NO_PYTHON_TEXT: &str = "[Python frames not available: this thread has no Python thread state]";
/// Function name of the marker for stacks cut at the depth limit.
pub const TRUNCATED_TEXT: &str = "[stack truncated at the depth limit]";

/// A frame before its text is interned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct TextFrame {
    pub(super) function: String,
    pub(super) file: String,
    pub(super) line: u32,
    pub(super) module: String,
}

/// A frame that only marks something (a cut, a missing Python stack).
pub(super) fn marker(text: &str) -> TextFrame {
    TextFrame {
        function: text.to_owned(),
        file: String::new(),
        line: 0,
        module: String::new(),
    }
}

/// A Python frame: its code object's function and file, and the line its
/// offset falls on (the first line where the table has none).
pub(super) fn python_frame(code: Option<&CodeInfo>, node: &StackNode) -> TextFrame {
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
