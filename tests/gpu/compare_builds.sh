#!/usr/bin/env bash
# Compares builds of libcudatrace.so on the real driver, side by side on one
# machine: the hook-cost loop (scenario z's C program, cudaMallocAsync +
# cudaFreeAsync pairs 1 and 32 frames deep) pinned to one core, the builds
# interleaved round by round, plain runs among them; prints a table of
# medians, ns per pair, and for diagnosis the cost a call against each
# process's own cudaStreamQuery time (see hook_cost_table.py). Optionally (RESNET=1) one ResNet-50 process per build
# with the async allocator, reporting its step time.
#
#   tests/gpu/compare_builds.sh ROUNDS STACKS NAME=LIB[:CLI] [NAME=LIB[:CLI] ...]
# With a CLI (the `cudatrace` of the same build), the build's loop runs
# under `CLI run`, whose collector empties the spool as it goes; without,
# with plain LD_PRELOAD and the spools kept in a folder.
# A diagnostic build (`git apply tests/gpu/dev/phase-timing.patch`,
# then `cargo build --release` and copy the library away; never commit it)
# prints each phase's mean ns per event at exit: its "PHASES" lines are
# printed after the table, under the build's name.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=$1 stacks=$2
shift 2
build=$(mktemp -d)
nvcc -O2 -o "$build/hook_cost" "$here/workloads/hook_cost.cu" -cudart shared
core=2
results=$(mktemp)
phases=${OUT:-$build}/phases.txt
for round in $(seq "$rounds"); do
    echo "plain $(taskset -c $core "$build/hook_cost" 20000 5 | tr '\n' ' ')" >>"$results"
    for pair in "$@"; do
        name=${pair%%=*} lib=${pair#*=} cli=
        case $lib in *:*) cli=${lib#*:} lib=${lib%%:*} ;; esac
        dir=$(mktemp -d)
        echo "$name, hook-cost loop, stacks $stacks:" >>"$phases"
        if [ -n "$cli" ]; then
            # Under `cudatrace run`: the collector empties the spool as it goes.
            line=$(PHASES_OUT=$phases TMPDIR=$dir "$cli" run --force --preload "$lib" --stacks "$stacks" \
                -o "$dir/t.trace" -- taskset -c $core "$build/hook_cost" 20000 5 2>/dev/null | tr '\n' ' ')
        else
            line=$(PHASES_OUT=$phases CUDATRACE_DIR=$dir CUDATRACE_STACKS=$stacks LD_PRELOAD=$lib \
                taskset -c $core "$build/hook_cost" 20000 5 | tr '\n' ' ')
        fi
        echo "$name $line" >>"$results"
        rm -rf "$dir"
    done
done
python3 "$here/hook_cost_table.py" "$results"
if [ "${RESNET:-0}" = 1 ]; then
    for pair in "$@"; do
        name=${pair%%=*} lib=${pair#*=}
        dir=$(mktemp -d)
        echo "$name, ResNet-50 (${RESNET_ALLOC_CONF-backend:cudaMallocAsync}), stacks $stacks:" >>"$phases"
        PHASES_OUT=$phases CUDATRACE_DIR=$dir CUDATRACE_STACKS=$stacks LD_PRELOAD=$lib RESNET_STEPS=20 \
            PYTORCH_CUDA_ALLOC_CONF=${RESNET_ALLOC_CONF-backend:cudaMallocAsync} python3 "$here/workloads/resnet_steps.py" "$dir/out.json" plain
        echo "ResNet-50 (${RESNET_ALLOC_CONF-backend:cudaMallocAsync}) $name: $(cat "$dir/out.json")"
        rm -rf "$dir"
    done
fi
[ -f "$phases" ] && grep -B1 PHASES "$phases" | grep -v "^--" | sed 's/^/  /' || true
rm -f "$phases"
