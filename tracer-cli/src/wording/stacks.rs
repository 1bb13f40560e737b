//! Stacks in words: a frame as one line, a folded run of framework frames
//! as "… N frames in a, b".

use cudatrace_analysis::PYTHON_MODULE;
use cudatrace_analysis::{stack_lines, Frame, FramesShown, Place, StackLine};

/// A frame as one line: `function (file:line) [library]`, the library left
/// out for Python frames and where the rest already names it.
pub fn frame_text(frame: &Frame) -> String {
    let mut out = function_and_place(frame);
    if let Some(name) = library_shown(frame, &out) {
        out += &format!(" [{name}]");
    }
    out
}

/// A frame's function as [`frame_text`] names it, without its place in the
/// source: `function [library]`, for formats that keep the file and line
/// apart.
pub fn frame_function_text(frame: &Frame) -> String {
    match library_shown(frame, &function_and_place(frame)) {
        Some(name) => format!("{} [{name}]", frame.function),
        None => frame.function.clone(),
    }
}

/// `function (file:line)`: the function, and its place in the source where known.
fn function_and_place(frame: &Frame) -> String {
    let mut out = frame.function.clone();
    if let Some(file) = &frame.file {
        out += &format!(" ({file}");
        if let Some(line) = frame.line {
            out += &format!(":{line}");
        }
        out += ")";
    }
    out
}

/// The library [`frame_text`] names after `text` (the frame's function and
/// place): none for Python frames, nor where `text` already names it.
fn library_shown<'a>(frame: &'a Frame, text: &str) -> Option<&'a str> {
    let name = frame.module_name()?;
    (name != PYTHON_MODULE && !text.contains(name)).then_some(name)
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

#[cfg(test)]
mod tests {
    use super::*;
    use cudatrace_analysis::test_frames::{native, pytorch_stack};

    #[test]
    fn runs_of_framework_frames_are_worded_as_one_line() {
        let frames = pytorch_stack();
        assert_eq!(
            stack_texts(&frames, FramesShown::Folded),
            vec![
                "… 33 frames in libcudart.so.13, libc10_cuda.so, libtorch_cuda.so, libtorch_python.so, python3.12, torch (Python)".to_string(),
                "forward (/home/me/model.py:31)".to_string(),
                "<module> (/home/me/train.py:12)".to_string(),
                "__libc_start_call_main [libc.so.6]".to_string(),
            ]
        );
        // A single plumbing frame between two of the program's is kept.
        let frames = vec![
            native("a", "/opt/libuser.so"),
            native("ffi_call", "/usr/lib/libffi.so.8"),
            native("b", "/opt/libuser.so"),
        ];
        assert_eq!(
            stack_texts(&frames, FramesShown::Folded),
            vec!["a [libuser.so]", "ffi_call [libffi.so.8]", "b [libuser.so]"]
        );
    }
}
