//! Paths to the fake CUDA driver and runtime, and to the C programs that use
//! them, all compiled by this crate's build script. The fakes behave like the
//! real libraries in the ways the tracer depends on (see `c/fake_driver.c`).

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
/// (statically linked runtime), `bench_calls`, or `deny_syscall` (runs a
/// program with one system call failing with a chosen errno).
pub fn program(name: &str) -> PathBuf {
    root().join("bin").join(name)
}
