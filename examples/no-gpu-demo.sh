#!/usr/bin/env bash
# A cudatrace report on a machine WITHOUT a GPU.
#
# No real GPU or CUDA is used: the test suite's fake CUDA driver and runtime
# (tests/fake-cuda, C libraries that hand out addresses without allocating
# anything) stand in for them. The script builds cudatrace and the fakes,
# traces examples/no_gpu_demo.py (Python calling cudaMalloc and cudaFree
# through ctypes, leaking 8 MiB a step) with `cudatrace run`, and prints
# `cudatrace report`. The trace stays in OUT_DIR (default
# $CARGO_TARGET_DIR/no-gpu-demo, else target/no-gpu-demo), to open with the
# other commands (html, flamegraph, snapshot, perfetto).
#
#   examples/no-gpu-demo.sh [OUT_DIR]
#
# With CUDATRACE=/path/to/cudatrace it uses that command (an installed one,
# with its libcudatrace.so beside it) instead of building it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$root/$target ;; esac
out=${1:-$target/no-gpu-demo}

command -v cargo >/dev/null 2>&1 || { echo "no-gpu-demo: cargo is missing; install Rust (rustup) first" >&2; exit 2; }
command -v cc >/dev/null 2>&1 || { echo "no-gpu-demo: a C compiler is missing: sudo apt-get install -y gcc" >&2; exit 2; }
command -v python3 >/dev/null 2>&1 || { echo "no-gpu-demo: python3 is missing: sudo apt-get install -y python3" >&2; exit 2; }

if [ -n "${CUDATRACE:-}" ]; then
    cudatrace=$CUDATRACE
    echo "no-gpu-demo: building the fake CUDA driver (tests/fake-cuda)" >&2
    cargo build -q --release -p fake-cuda --bin fake-cuda-paths >&2
else
    echo "no-gpu-demo: building cudatrace, libcudatrace.so and the fake CUDA driver (tests/fake-cuda)" >&2
    cargo build -q --release -p cudatrace -p cudatrace-cli -p fake-cuda >&2
    cudatrace=$target/release/cudatrace
fi
fake_lib=$("$target/release/fake-cuda-paths")

mkdir -p "$out"
trace=$out/no-gpu-demo.trace
# The fake libcudart.so.13 and libcuda.so.1 come first on the library path.
export LD_LIBRARY_PATH=$fake_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$cudatrace" run --force -o "$trace" -- python3 examples/no_gpu_demo.py
echo
"$cudatrace" report "$trace"
