#!/usr/bin/env bash
# Where the hook's cost per call goes on the real driver: scenario z's loop
# (cudaMallocAsync + cudaFreeAsync pairs, pinned to core 2) in variants,
# interleaved round by round, each process judged against its own
# cudaStreamQuery time (see workloads/hook_cost.cu); prints ns added a call
# at depth 1 / 32 and the raw medians.
#
#   tests/gpu/dev/hook_cost_parts.sh ROUNDS LIB CLI [KNOCKOUT_LIB]
#
# Variants: plain; "off" (the library preloaded with recording off: its
# hooks only forward); "none" (`CLI run --stacks none`, as scenario z);
# "plain_under_run" (the plain loop under `CLI run`, the collector beside
# it); "none_in_folder" (spools kept in a folder, no collector). With
# KNOCKOUT_LIB (a build of `git apply tests/gpu/dev/knockout.patch`,
# never committed), one variant for each piece of the record path skipped
# (CUDATRACE_KNOCKOUT=clock, write, seq, live, stack, prefetch, readings;
# runtime,stack; and all of them together; KNOCKOUTS="a b,c ..." picks
# others: line64, a 64-byte record at a line of its own; nostore, the
# write without its stores; scratch, its stores into a per-thread buffer;
# the three leave a spool no reader can read). With FAKE_CUDA_OUT (the fake
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
    gcc -O2 -fno-omit-frame-pointer -o "$build/fake_hook_cost" "$here/dev/fake_hook_cost.c" \
        -L"$fake/lib" -lcudart -Wl,-rpath,"$fake/lib"
fi
fake_loop=(env LD_LIBRARY_PATH="$fake/lib" taskset -c 2 "$build/fake_hook_cost" 200000 5)
results=$build/results.txt
errors=$build/errors.txt
record() { # NAME COMMAND...: runs the loop's command, adds its figures under NAME
    local name=$1 line
    shift
    line=$("$@" 2>"$errors" | tr '\n' ' ') || true
    case $line in
    *depth1_ns*) echo "$name $line" >>"$results" ;;
    *)
        echo "hook_cost_parts: $name gave no figures: $(tail -c 300 "$errors")" >&2
        exit 1
        ;;
    esac
}
under_run() { # NAME LIB STACKS COMMAND...: COMMAND under `cli run`, the spools in a folder of its own
    local name=$1 library=$2 stacks=$3 dir
    shift 3
    dir=$(mktemp -d)
    record "$name" env TMPDIR="$dir" "$cli" run --force --preload "$library" --stacks "$stacks" -o "$dir/t.trace" -- "$@"
    rm -rf "$dir"
}
knocked=${KNOCKOUTS:-clock write seq live stack prefetch readings runtime,stack clock,write,seq,live,stack,prefetch,readings}
for _ in $(seq "$rounds"); do
    record plain "${loop[@]}"
    record off env CUDATRACE_QUIET=1 CUDATRACE_DIR=/nonexistent LD_PRELOAD="$lib" "${loop[@]}"
    under_run none "$lib" none "${loop[@]}"
    under_run plain_under_run "$lib" none env -u LD_PRELOAD "${loop[@]}"
    dir=$(mktemp -d)
    record none_in_folder env CUDATRACE_DIR="$dir" CUDATRACE_STACKS=none LD_PRELOAD="$lib" "${loop[@]}"
    rm -rf "$dir"
    if [ -n "$fake" ]; then
        # The fake runtime has no cudaStreamQuery: raw medians only.
        record fake:plain "${fake_loop[@]}"
        under_run fake:none "$lib" none "${fake_loop[@]}"
    fi
    if [ -n "$knockout" ]; then
        for pieces in $knocked; do
            under_run "without:$pieces" "$knockout" none env CUDATRACE_KNOCKOUT="$pieces" "${loop[@]}"
        done
    fi
done
python3 "$here/hook_cost_table.py" "$results"
