//! Stacks in words: a frame as one line, a folded run of framework frames
//! as "… N frames in a, b".

use crate::analysis::{stack_lines, Frame, FramesShown, Place, StackLine};
use crate::symbolize::PYTHON_MODULE;

/// A frame as one line: `function (file:line) [library]`, the library left
/// out for Python frames and where the rest already names it.
pub fn frame_text(frame: &Frame) -> String {
    let mut out = frame.function.clone();
    if let Some(file) = &frame.file {
        out += &format!(" ({file}");
        if let Some(line) = frame.line {
            out += &format!(":{line}");
        }
        out += ")";
    }
    if let Some(name) = frame.module_name() {
        if name != PYTHON_MODULE && !out.contains(name) {
            out += &format!(" [{name}]");
        }
    }
    out
}

/// Where a folded frame lives.
fn place_text(place: &Place) -> String {
    match place {
        Place::PythonPackage(package) => format!("{package} (Python)"),
        Place::PythonFile(name) | Place::Library(name) => name.clone(),
        Place::Unknown => "unknown code".to_string(),
    }
}

/// A stack's lines (see [`stack_lines`]), each frame named by `name`.
pub fn stack_names(frames: &[Frame], shown: FramesShown, name: impl Fn(&Frame) -> String) -> Vec<String> {
    stack_lines(frames, shown)
        .iter()
        .map(|line| match line {
            StackLine::Frame(frame) => name(frame),
            StackLine::Folded { frames, places } => {
                let places: Vec<String> = places.iter().map(place_text).collect();
                format!("… {frames} frames in {}", places.join(", "))
            }
        })
        .collect()
}

/// A stack's lines, each frame as [`frame_text`] words it.
pub fn stack_texts(frames: &[Frame], shown: FramesShown) -> Vec<String> {
    stack_names(frames, shown, frame_text)
}
