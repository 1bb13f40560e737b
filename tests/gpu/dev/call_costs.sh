#!/usr/bin/env bash
# The tracer's own time per ResNet-50 step, measured inside the process.
#
# ResNet-50 bs32 steps under `cudatrace run` with the call-timing build
# (`git apply tests/gpu/dev/call-timing.patch`, `cargo build
# --release`, copy the library away; never commit it): the build times each
# PyTorch tracker call and each hook's bookkeeping with one timer pair, in
# per-thread counters, and takes the timer's own cost off. resnet_steps.py
# marks the measured steps. Process-to-process noise in the step time (10%
# and more) does not touch these figures: they are the time spent in our
# code, per step, over plain's median step.
#
# Not counted: a hook's entry and forwarding outside its bookkeeping (some
# tens of ns a call: the fake driver's bench and scenario z measure it), and
# what PyTorch spends building a TraceEntry for an attached tracker.
#
# With several builds (NAME=LIB), each traced variant runs under each build,
# interleaved, and the rows are named after the build. VARIANTS picks the
# traced variants by number (default all): 1-4 caching allocator (tensors
# with stacks all, python, none; tensors off with stacks all), 5-6 the
# cudaMallocAsync backend (stacks all, none).
#
#   tests/gpu/dev/call_costs.sh ROUNDS CLI NAME=LIB [NAME=LIB ...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=$1 cli=$2
shift 2
variants=${VARIANTS:-1 2 3 4 5 6}
work=$(mktemp -d)
one() { # NAME ALLOC_CONF TRACED STACKS TENSORS [LIB]
    local name=$1 conf=$2 traced=$3 stacks=$4 tensors=$5 lib=${6:-} dir
    dir=$(mktemp -d)
    if [ "$traced" = 1 ]; then
        env PYTORCH_CUDA_ALLOC_CONF="$conf" CALLS_OUT="$dir/calls" RESNET_STEPS=30 TMPDIR="$dir" \
            "$cli" run --force --preload "$lib" --stacks "$stacks" --tensors "$tensors" -o "$dir/t.trace" -- \
            python3 "$here/workloads/resnet_steps.py" "$dir/out.json" plain >/dev/null 2>&1
    else
        env PYTORCH_CUDA_ALLOC_CONF="$conf" RESNET_STEPS=30 python3 "$here/workloads/resnet_steps.py" "$dir/out.json" plain
    fi
    printf '%s|%s|%s\n' "$name" \
        "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step_ms_median"])' "$dir/out.json")" \
        "$(cat "$dir/calls" 2>/dev/null || true)" >>"$work/rows"
    rm -rf "$dir"
}
async=backend:cudaMallocAsync
for round in $(seq "$rounds"); do
    echo "round $round of $rounds" >&2
    one "caching, plain" "" 0 - -
    one "async, plain" "$async" 0 - -
    for variant in $variants; do
        for build in "$@"; do
            name=${build%%=*} lib=${build#*=}
            [ $# -gt 1 ] && prefix="$name: " || prefix=""
            case $variant in
                1) one "caching, ${prefix}tensors, stacks all" "" 1 all on "$lib" ;;
                2) one "caching, ${prefix}tensors, stacks python" "" 1 python on "$lib" ;;
                3) one "caching, ${prefix}tensors, stacks none" "" 1 none on "$lib" ;;
                4) one "caching, ${prefix}tensors off, stacks all" "" 1 all off "$lib" ;;
                5) one "async, ${prefix}stacks all" "$async" 1 all off "$lib" ;;
                6) one "async, ${prefix}stacks none" "$async" 1 none off "$lib" ;;
            esac
        done
    done
done
python3 - "$work/rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, step, calls = line.rstrip("\n").split("|")
    words = calls.split()
    fields = {words[i]: float(words[i + 1]) for i in range(1, len(words) - 1, 2)} if calls else {}
    rows.setdefault(name, []).append((float(step), fields))
def med(values):
    return statistics.median(values) if values else float("nan")
plain = {mode: med([s for s, _ in rows.get(f"{mode}, plain", [])]) for mode in ("caching", "async")}
print(f"plain steps: caching {plain['caching']:.2f} ms, async {plain['async']:.2f} ms (medians of {len(rows['caching, plain'])} processes)")
print("| variant | step ms | tracker calls a step | ns a tracker call | ns an allocation call | hook sections a step | "
      "ns a hook section | our us a step | share of plain's step |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for name, values in rows.items():
    if name.endswith("plain"):
        continue
    f = lambda key: med([v[key] for _, v in values if key in v])
    ours = f("tensor_us_per_step") + f("hooks_us_per_step")
    base = plain[name.split(",")[0]]
    shares = [(v["tensor_us_per_step"] + v["hooks_us_per_step"]) / (base * 1e3) * 100 for _, v in values if v]
    print(f"| {name} | {med([s for s, _ in values]):.2f} | {f('tensor_calls_per_step'):.0f} | {f('tensor_ns_per_call'):.0f} | "
          f"{f('tensor_alloc_ns_per_call'):.0f} | {f('hooks_calls_per_step'):.0f} | {f('hooks_ns_per_call'):.0f} | {ours:.0f} | "
          f"{med(shares):.2f}% ({min(shares):.2f}–{max(shares):.2f}%) |")
PY
