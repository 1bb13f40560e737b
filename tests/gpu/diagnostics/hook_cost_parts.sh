#!/usr/bin/env bash
# Where the hook's cost per call goes on the real driver: scenario z's loop
# (cudaMallocAsync + cudaFreeAsync pairs, pinned to core 2) in variants,
# interleaved round by round, each process judged against its own
# cudaStreamQuery time (see workloads/hook_cost.cu); prints ns added a call
# at depth 1 / 32 and the raw medians.
#
#   tests/gpu/diagnostics/hook_cost_parts.sh ROUNDS LIB CLI [KNOCKOUT_LIB]
#
# Variants: plain; "off" (the library preloaded with recording off: its
# hooks only forward); "none" (`CLI run --stacks none`, as scenario z);
# "plain_under_run" (the plain loop under `CLI run`, the collector beside
# it); "none_in_folder" (spools kept in a folder, no collector). With
# KNOCKOUT_LIB (a build of `git apply tests/gpu/diagnostics/knockout.patch`,
# never committed), one variant for each piece of the record path skipped
# (CUDATRACE_KNOCKOUT=clock, write, seq, live, stack, prefetch, readings;
# runtime,stack; and all of them together). With FAKE_CUDA_OUT (the fake
# CUDA stack's build folder), also the same loop over the fake runtime and
# driver on this CPU (fake_hook_cost.c), plain and `--stacks none`, raw
# medians only.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=$1 lib=$2 cli=$3 knockout=${4:-}
build=$(mktemp -d)
nvcc -O2 -o "$build/hook_cost" "$here/workloads/hook_cost.cu" -cudart shared
loop=(taskset -c 2 "$build/hook_cost" 20000 5)
fake=${FAKE_CUDA_OUT:-}
if [ -n "$fake" ]; then
    gcc -O2 -fno-omit-frame-pointer -o "$build/fake_hook_cost" "$here/diagnostics/fake_hook_cost.c" \
        -L"$fake/lib" -lcudart -Wl,-rpath,"$fake/lib"
fi
fake_loop=(env LD_LIBRARY_PATH="$fake/lib" taskset -c 2 "$build/fake_hook_cost" 200000 5)
results=$build/results.txt
traced() { # NAME LIB [ENV...]: the loop under `cli run --stacks none`
    local name=$1 library=$2 dir
    shift 2
    dir=$(mktemp -d)
    echo "$name $(env "$@" TMPDIR="$dir" "$cli" run --force --preload "$library" --stacks none -o "$dir/t.trace" -- \
        "${loop[@]}" 2>/dev/null | tr '\n' ' ')" >>"$results"
    rm -rf "$dir"
}
knocked="clock write seq live stack prefetch readings runtime,stack clock,write,seq,live,stack,prefetch,readings"
for _ in $(seq "$rounds"); do
    echo "plain $("${loop[@]}" | tr '\n' ' ')" >>"$results"
    echo "off $(CUDATRACE_QUIET=1 CUDATRACE_DIR=/nonexistent LD_PRELOAD=$lib "${loop[@]}" | tr '\n' ' ')" >>"$results"
    traced none "$lib"
    dir=$(mktemp -d)
    echo "plain_under_run $(TMPDIR=$dir "$cli" run --force --preload "$lib" -o "$dir/t.trace" -- env -u LD_PRELOAD \
        "${loop[@]}" 2>/dev/null | tr '\n' ' ')" >>"$results"
    echo "none_in_folder $(CUDATRACE_DIR=$dir CUDATRACE_STACKS=none LD_PRELOAD=$lib "${loop[@]}" | tr '\n' ' ')" \
        >>"$results"
    rm -rf "$dir"
    if [ -n "$fake" ]; then
        echo "fake:plain $("${fake_loop[@]}" | tr '\n' ' ') query_ns 1" >>"$results"
        dir=$(mktemp -d)
        echo "fake:none $(TMPDIR=$dir "$cli" run --force --preload "$lib" --stacks none -o "$dir/t.trace" -- \
            "${fake_loop[@]}" 2>/dev/null | tr '\n' ' ') query_ns 1" >>"$results"
        rm -rf "$dir"
    fi
    if [ -n "$knockout" ]; then
        for pieces in $knocked; do
            traced "without:$pieces" "$knockout" CUDATRACE_KNOCKOUT="$pieces"
        done
    fi
done
python3 "$here/hook_cost_table.py" "$results"
