//! Prints where this crate's build put the fake CUDA libraries and programs,
//! for shell scripts (the no-GPU demo, the wheel check):
//!
//! - `fake-cuda-paths` prints the folder to put on `LD_LIBRARY_PATH`
//!   (`libcuda.so.1`, `libcudart.so.13`, `libnvidia-ml.so.1`);
//! - `fake-cuda-paths PROGRAM` prints the path of a test program, such as
//!   `scenarios`.
//!
//! It exits with status 2 if the path it would print does not exist.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path: PathBuf = match args.as_slice() {
        [] => fake_cuda::library_dir(),
        [program] if !program.starts_with('-') => fake_cuda::program(program),
        _ => {
            eprintln!("usage: fake-cuda-paths [PROGRAM]");
            return ExitCode::from(2);
        }
    };
    if !path.exists() {
        eprintln!("fake-cuda-paths: {} does not exist", path.display());
        return ExitCode::from(2);
    }
    println!("{}", path.display());
    ExitCode::SUCCESS
}
