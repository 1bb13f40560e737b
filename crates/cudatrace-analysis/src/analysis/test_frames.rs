//! Call stacks for tests (the `testing` feature): frames as the
//! symbolizer gives them, and the stack of a tensor PyTorch made from a
//! model's forward, which the call-site and wording tests both read.

use super::stack_frames::Frame;
use crate::symbolize::PYTHON_MODULE;

/// A native frame: `function` in `module`, with no line.
pub fn native(function: &str, module: &str) -> Frame {
    Frame {
        function: function.into(),
        file: None,
        line: None,
        module: Some(module.into()),
    }
}

/// A Python frame: `function` at `file`:`line`.
pub fn python(function: &str, file: &str, line: u32) -> Frame {
    Frame {
        function: function.into(),
        file: Some(file.into()),
        line: Some(line),
        module: Some(PYTHON_MODULE.into()),
    }
}

/// A tensor made by PyTorch from a model's forward, innermost frame
/// first: the CUDA runtime, 3 frames of c10, 23 of ATen, the Python
/// binding and 4 of the interpreter, then PyTorch's `_conv_forward`, the
/// model's `forward`, the script, and libc's start.
pub fn pytorch_stack() -> Vec<Frame> {
    let mut frames = vec![native("cudaMalloc", "/usr/lib/libcudart.so.13")];
    frames.extend((0..3).map(|i| native(&format!("c10::alloc{i}"), "/sp/torch/lib/libc10_cuda.so")));
    frames.extend((0..23).map(|i| native(&format!("at::op{i}"), "/sp/torch/lib/libtorch_cuda.so")));
    frames.push(native("torch::autograd::f", "/sp/torch/lib/libtorch_python.so"));
    frames.extend((0..4).map(|i| native(&format!("_PyEval{i}"), "/usr/bin/python3.12")));
    frames.push(python(
        "_conv_forward",
        "/venv/lib/python3.12/site-packages/torch/nn/modules/conv.py",
        456,
    ));
    frames.push(python("forward", "/home/me/model.py", 31));
    frames.push(python("<module>", "/home/me/train.py", 12));
    frames.push(native("__libc_start_call_main", "/usr/lib/libc.so.6"));
    frames
}
