#!/usr/bin/env bash
# Checks the pip package end to end, without a GPU:
#  1. builds the wheel with packaging/python/build-wheel.sh;
#  2. installs it with pip into a fresh virtual environment;
#  3. traces examples/no_gpu_demo.py over the test suite's fake CUDA driver
#     through the installed `cudatrace run` (which must find the installed
#     libcudatrace.so by itself), and through a plain
#     LD_PRELOAD=<venv>/bin/libcudatrace.so (which must find the installed
#     `cudatrace` to collect the trace);
#  4. checks the exact figures of `cudatrace report`.
# Exits non-zero, saying what differed, on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source tests/prerequisites.sh
require tests/wheel/check.sh python3:python3 cc:gcc objdump:binutils \
    '{d=$(mktemp -d) && python3 -m venv "$d/v"; s=$?; rm -rf "$d"; exit $s}:python3-venv'

fail() {
    echo "tests/wheel/check.sh: FAILED: $*" >&2
    exit 1
}
say() { echo "tests/wheel/check.sh: $*" >&2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cudatrace-wheel-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

wheel=$(bash packaging/python/build-wheel.sh "$tmp/wheels" | tail -1)
[ -f "$wheel" ] || fail "build-wheel.sh printed no wheel ($wheel)"
case $(basename "$wheel") in
    cudatrace-0.1.0-py3-none-manylinux_2_34_x86_64.whl) ;;
    *) fail "unexpected wheel name $(basename "$wheel")" ;;
esac
say "built $(basename "$wheel")"

venv=$tmp/venv
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --no-index "$wheel" || fail "pip install $wheel"
for file in cudatrace libcudatrace.so; do
    [ -f "$venv/bin/$file" ] || fail "pip did not install bin/$file: $(ls "$venv/bin")"
done
say "installed into $venv/bin: $(cd "$venv/bin" && ls -l cudatrace libcudatrace.so | awk '{print $1, $NF}' | paste -sd' ')"
"$venv/bin/cudatrace" --version | grep -qx 'cudatrace 0.1.0' || fail "cudatrace --version: $("$venv/bin/cudatrace" --version)"

# The fake driver and runtime of the test suite.
fake_lib=$(cargo run -q --release --locked -p fake-cuda --bin fake-cuda-paths)
[ -f "$fake_lib/libcudart.so.13" ] || fail "no fake runtime in $fake_lib"

demo=$root/examples/no_gpu_demo.py
line_of() { grep -n -F "$1" "$demo" | cut -d: -f1; }
leak_line=$(line_of 'ctypes.byref(gradients)')
step_line=$(line_of 'ctypes.byref(activations)')
[ -n "$leak_line" ] && [ -n "$step_line" ] || fail "cannot find the cudaMalloc lines of $demo"

expect_report() { # TRACE LABEL
    local report
    report=$("$venv/bin/cudatrace" report "$1") || fail "$2: cudatrace report $1 failed"
    for line in \
        "  growing: no_gpu_demo.py:$leak_line keep_gradients +8.0 MiB a step from the end of step 1 to the end of step 4 (8.0 MiB to 32.0 MiB)" \
        "  GPU 0: 10 allocations, 5 frees, peak 104.0 MiB, live at exit 40.0 MiB in 5 allocations" \
        "      40.0 MiB in 5 allocations: no_gpu_demo.py:$leak_line keep_gradients" \
        "      64.0 MiB in 1 allocation: no_gpu_demo.py:$step_line forward"; do
        grep -q -x -F -- "$line" <<<"$report" || fail "$2: the report lacks the line
$line
--- report:
$report"
    done
    say "$2: the report has the expected figures (10 allocations, 5 frees, peak 104.0 MiB, 40.0 MiB leaked at no_gpu_demo.py:$leak_line, growing 8.0 MiB a step)"
}

# Everything from the environment, nothing from the checkout but the fake
# driver: no --preload, no CUDATRACE_PRELOAD or CUDATRACE_CLI.
work=$tmp/work
mkdir -p "$work"
cd "$work"
unset CUDATRACE_PRELOAD CUDATRACE_CLI CUDATRACE_OUT CUDATRACE_DIR
export LD_LIBRARY_PATH=$fake_lib
"$venv/bin/cudatrace" run -o "$work/run.trace" -- "$venv/bin/python" "$demo" \
    || fail "the installed cudatrace run failed"
expect_report "$work/run.trace" "cudatrace run"

# Plain LD_PRELOAD of the installed library: it starts the installed
# cudatrace beside it, which writes the trace once the process is gone.
CUDATRACE_OUT=$work/plain.trace LD_PRELOAD=$venv/bin/libcudatrace.so "$venv/bin/python" "$demo" \
    || fail "python under LD_PRELOAD=$venv/bin/libcudatrace.so failed"
complete() {
    [ -f "$work/plain.trace" ] &&
        "$venv/bin/cudatrace" report --json "$work/plain.trace" 2>/dev/null |
        "$venv/bin/python" -c 'import json, sys; sys.exit(0 if json.load(sys.stdin).get("complete") else 1)' 2>/dev/null
}
for _ in $(seq 300); do
    complete && break
    sleep 0.1
done
[ -f "$work/plain.trace" ] || fail "plain LD_PRELOAD wrote no trace at $work/plain.trace"
complete || fail "the plain LD_PRELOAD trace $work/plain.trace was not complete after 30 s"
expect_report "$work/plain.trace" "plain LD_PRELOAD"
say "passed"
