//! The library that owns an allocation: the innermost module of its stack
//! that is not CUDA itself, cudatrace, libffi or the Python interpreter.
//! PyTorch's caching allocator is `libc10_cuda.so`, NCCL's buffers are
//! `libnccl.so.2`'s, and a `ctypes` call belongs to the Python file that
//! made it.

use super::paused_spans::PAUSED_SITE;
use super::stack_frames::Frame;
use crate::symbolize::PYTHON_MODULE;
use cudatrace_events::naming;

/// What an allocation is owned by when no frame of its stack decides: it
/// has no stack, or only frames of CUDA, the interpreter and the like.
pub const UNKNOWN_OWNER: &str = "unknown caller";

/// Whether frames of the module at `path` are passed over: they carry a
/// call on to CUDA rather than decide to make it.
pub(super) fn passes_calls_on(path: &str) -> bool {
    let file = naming::file_name_of(path);
    let is_python_executable = file.starts_with("python") && !file.contains(".so");
    naming::is_cuda_library(file)
        || file.starts_with("libcudatrace.so")
        || file.starts_with("libffi.so")
        || file.starts_with("libpython")
        || file.starts_with("_ctypes.")
        || path.contains("/lib-dynload/")
        || is_python_executable
}

/// A module's name as reports show it: inside a Python package, the package
/// and the file within it (`cupy (cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so)`);
/// elsewhere, the file name.
pub fn module_label(path: &str) -> String {
    match installed_package(path) {
        Some((package, inside)) if inside.contains('/') => format!("{package} ({inside})"),
        Some((_, inside)) => inside.to_string(),
        None => naming::file_name_of(path).to_string(),
    }
}

/// For a file inside an installed Python package: the package's name and
/// the file's path within `site-packages` (or `dist-packages`).
pub(super) fn installed_package(path: &str) -> Option<(&str, &str)> {
    for marker in ["/site-packages/", "/dist-packages/"] {
        if let Some(at) = path.rfind(marker) {
            let inside = &path[at + marker.len()..];
            return Some((inside.split('/').next().unwrap_or(inside), inside));
        }
    }
    None
}

/// The owner of an allocation made with stack `frames` (innermost first);
/// one recorded while paused is owned by that mark, not by an unknown caller.
pub fn owner_of(frames: &[Frame]) -> String {
    if let [only] = frames {
        if only.module.is_none() && only.function == PAUSED_SITE {
            return PAUSED_SITE.to_string();
        }
    }
    for frame in frames {
        let Some(module) = frame.module.as_deref() else {
            continue;
        };
        if module == PYTHON_MODULE {
            return match frame.file.as_deref() {
                Some(file) => module_label(file),
                None => frame.function.clone(),
            };
        }
        if !passes_calls_on(module) {
            return module_label(module);
        }
    }
    UNKNOWN_OWNER.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(module: &str) -> Frame {
        Frame {
            function: "f".into(),
            file: None,
            line: None,
            module: Some(module.into()),
        }
    }

    fn python(file: &str) -> Frame {
        Frame {
            function: "g".into(),
            file: Some(file.into()),
            line: Some(3),
            module: Some(PYTHON_MODULE.into()),
        }
    }

    #[test]
    fn the_innermost_module_that_decides_owns_the_allocation() {
        let torch = "/usr/lib/python3/dist-packages/torch/lib/libc10_cuda.so";
        let frames = [
            native("/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
            native("/opt/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"),
            native(torch),
            native("/usr/bin/python3.12"),
        ];
        assert_eq!(owner_of(&frames), "torch (torch/lib/libc10_cuda.so)");
        assert_eq!(
            owner_of(&[native("/usr/lib/libnccl.so.2"), native("/opt/app/main")]),
            "libnccl.so.2"
        );
        assert_eq!(owner_of(&[native("/opt/app/main")]), "main");
    }

    #[test]
    fn a_ctypes_call_belongs_to_its_python_file() {
        let frames = [
            native("/usr/local/cuda/lib64/libcudart.so.13"),
            native("/usr/lib/x86_64-linux-gnu/libffi.so.8"),
            native("/usr/lib/python3.12/lib-dynload/_ctypes.cpython-312-x86_64-linux-gnu.so"),
            native("/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"),
            python("/home/me/job/alloc.py"),
            python("/home/me/job/train.py"),
        ];
        assert_eq!(owner_of(&frames), "alloc.py");
        assert_eq!(
            owner_of(&[python("/venv/lib/python3.11/site-packages/cupy/_core/core.py")]),
            "cupy (cupy/_core/core.py)"
        );
    }

    #[test]
    fn no_deciding_frame_is_unknown() {
        assert_eq!(owner_of(&[]), UNKNOWN_OWNER);
        assert_eq!(owner_of(&[native("/usr/lib/libcuda.so.1")]), UNKNOWN_OWNER);
    }
}
