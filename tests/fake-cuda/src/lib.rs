//! Paths to the fake CUDA driver and runtime, and to the C programs that use
//! them, all compiled by this crate's build script. The fakes behave like the
//! real libraries in the ways the tracer depends on (see `c/fake_driver.c`).
//!
//! A fake of PyTorch's `libc10_cuda.so` caching allocator (`c/fake_torch.cpp`)
//! is built twice, each in a package folder with its `torch/version.py`:
//! with PyTorch 2.11.0+cu130's binary interface, and as a "2.99.0" of a
//! layout no tracer knows (see [`torch_library`]). The program `torch_like`
//! (`c/torch_like.cpp`) loads one as Python loads PyTorch and runs a
//! scenario of tensor allocations through it.

#![warn(missing_docs)]

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("FAKE_CUDA_DIR"))
}

/// Folder holding `libcuda.so.1` and `libcudart.so.13`: put it on `LD_LIBRARY_PATH`.
pub fn library_dir() -> PathBuf {
    root().join("lib")
}

/// A test program: `scenarios` (dynamic runtime), `scenarios_static`
/// (statically linked runtime), `bench_calls`, `deny_syscall` (runs a
/// program with one system call failing with a chosen errno), or
/// `torch_like` (`torch_like <libc10_cuda.so> <scenario>`: PyTorch-like
/// tensor allocations through the fake caching allocator; the scenarios,
/// output and environment are described at the top of `c/torch_like.cpp`).
pub fn program(name: &str) -> PathBuf {
    root().join("bin").join(name)
}

/// The fake `libc10_cuda.so` of a PyTorch package, at
/// `<package>/torch/lib/libc10_cuda.so` with the version in
/// `<package>/torch/version.py`:
/// - `"211"`: PyTorch 2.11.0+cu130's binary interface (136-byte
///   `TraceEntry`, `attachAllocatorTraceTracker` at vtable slot 44);
/// - `"other"`: version 2.99.0, with another `TraceEntry` layout and attach
///   at slot 45, which a tracer must refuse.
///
/// It finds the fake runtime and driver through its RUNPATH, without
/// `LD_LIBRARY_PATH`.
pub fn torch_library(version: &str) -> PathBuf {
    let folder = match version {
        "211" => "torch211",
        "other" => "torch_other",
        _ => panic!("no fake PyTorch {version:?}: \"211\" or \"other\""),
    };
    root().join(folder).join("torch").join("lib").join("libc10_cuda.so")
}

/// The `version.py` of the package [`torch_library`] belongs to
/// (`<library>/../../version.py`).
pub fn torch_version_file(version: &str) -> PathBuf {
    torch_library(version)
        .parent()
        .and_then(|lib| lib.parent())
        .map(|package| package.join("version.py"))
        .unwrap()
}
