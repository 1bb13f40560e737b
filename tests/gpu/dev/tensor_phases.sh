#!/usr/bin/env bash
# Where a tensor action's time goes on the real driver. ResNet-50 bs32 with
# the caching allocator (WORKLOAD=gpt2: GPT-2 small, workloads/gpt2_steps.py),
# one process per variant per round, ROUNDS rounds
# interleaved, the diagnostic build (phase-timing.patch) preloaded with
# spools only (no collector). Prints each process's median step and the
# build's PHASES line (mean ns per record of each phase; tensor_callback is
# the whole tracker call, tensor_noop a call told to return at once).
#
# With a second library, compares two builds instead: each round runs plain,
# then stacks none, python and all (or those SETTINGS names) under LIB (A)
# and LIB_B (B) side by side.
#
#   tests/gpu/dev/tensor_phases.sh ROUNDS LIB [LIB_B]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=$1 lib=$2 lib_b=${3:-}
echo "clock source: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"
work=$(mktemp -d)
steps() { # NAME ENV...
    local name=$1
    shift
    local dir
    dir=$(mktemp -d)
    env "$@" CUDATRACE_DIR="$dir" PHASES_OUT="$dir/phases" RESNET_STEPS=30 \
        python3 "$here/workloads/${WORKLOAD:-resnet}_steps.py" "$dir/out.json" plain
    printf '%-22s %s %s\n' "$name" "$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["step_ms_median"], 3))' "$dir/out.json")" \
        "$(cat "$dir/phases" 2>/dev/null | sed 's/PHASES pid [0-9]* //')" | tee -a "$work/rows"
    rm -rf "$dir"
}
for round in $(seq "$rounds"); do
    echo "round $round"
    steps plain CUDATRACE_UNUSED=1
    if [ -n "$lib_b" ]; then
        for stacks in ${SETTINGS:-none python all}; do
            steps "A, stacks $stacks" LD_PRELOAD="$lib" CUDATRACE_STACKS=$stacks
            steps "B, stacks $stacks" LD_PRELOAD="$lib_b" CUDATRACE_STACKS=$stacks
        done
        continue
    fi
    steps "tensors off" LD_PRELOAD="$lib" CUDATRACE_TENSORS=off
    steps "tensors noop" LD_PRELOAD="$lib" PHASES_TENSOR_NOOP=1
    steps "tensors, stacks none" LD_PRELOAD="$lib" CUDATRACE_STACKS=none
    steps "tensors, stacks python" LD_PRELOAD="$lib" CUDATRACE_STACKS=python
    steps "tensors, stacks all" LD_PRELOAD="$lib" CUDATRACE_STACKS=all
done
python3 - "$work/rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, value = line[:22].strip(), float(line[23:].split()[0])
    rows.setdefault(name, []).append(value)
plain = statistics.median(rows["plain"])
print(f"{'variant':<24} {'median step ms':>15} {'against plain':>14}")
for name, values in rows.items():
    m = statistics.median(values)
    print(f"{name:<24} {m:>15.3f} {100 * (m / plain - 1):>+13.1f}%")
PY
