#!/usr/bin/env bash
# Instructions our library executes per cudaMallocAsync + cudaFreeAsync pair,
# counted by valgrind's callgrind over the fake CUDA runtime and driver:
# scenario z's loop (tests/gpu/dev/fake_hook_cost.c), traced with
# the given stack setting. A count, not a time: it does not move from run
# to run, so a change to the hot path shows here exactly even where timings
# cannot tell it apart. Under valgrind the library finds no invariant TSC
# and takes its clock's fallback path for each record: some 70 instructions
# a pair that a machine with an invariant TSC does not run (clock_gettime
# itself is libc's, not counted). The count mixes the loop's pairs 1 and 32
# frames deep. Results go in docs/performance.md.
#
#   benches/hook_instructions.sh [STACKS] [LIB]
#
# STACKS: none (default), native, python or all. LIB: the library to count
# (default target/release/libcudatrace.so; run `cargo build --release`
# first). The fake stack is FAKE_CUDA_OUT, else the newest one cargo built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stacks=${1:-none}
lib=$(realpath "${2:-$root/target/release/libcudatrace.so}")
command -v valgrind >/dev/null || { echo "hook_instructions: valgrind is missing (apt-get install valgrind)" >&2; exit 2; }
[ -f "$lib" ] || { echo "hook_instructions: $lib missing: run cargo build --release" >&2; exit 2; }
fake=${FAKE_CUDA_OUT:-$(ls -td "$root"/target/*/build/fake-cuda-*/out 2>/dev/null | head -1)}
[ -f "$fake/lib/libcudart.so.13" ] || { echo "hook_instructions: no fake CUDA build: run cargo build --release" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -fno-omit-frame-pointer -o "$work/loop" "$root/tests/gpu/dev/fake_hook_cost.c" \
    -L"$fake/lib" -lcudart -Wl,-rpath,"$fake/lib"
mkdir "$work/spool"
# 2,000 + 2,000 warm-up pairs, then 2 repetitions of 20,000 at each of two depths.
pairs=84000
LD_LIBRARY_PATH="$fake/lib" CUDATRACE_DIR="$work/spool" CUDATRACE_STACKS="$stacks" LD_PRELOAD="$lib" \
    valgrind --tool=callgrind --callgrind-out-file="$work/out" "$work/loop" 20000 2 >/dev/null 2>&1
python3 - "$work/out" "$(basename "$lib")" "$pairs" "$stacks" <<'PY'
import re, sys
path, library, pairs, stacks = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# Sums the self cost of every line whose object is the library: "ob=" names
# the current object (numbered, named at first use, also through "cob="),
# and the line after a "calls=" line is the call's inclusive cost, skipped.
names, current, total, skip = {}, None, 0, False
for line in open(path):
    match = re.match(r"(c?ob)=\((\d+)\)(?: (.*))?", line)
    if match:
        if match.group(3):
            names[match.group(2)] = match.group(3).strip()
        if match.group(1) == "ob":
            current = names.get(match.group(2), "")
        continue
    if line.startswith("calls="):
        skip = True
        continue
    if re.match(r"[0-9+\-*]", line):
        if skip:
            skip = False
        elif current and current.endswith(library):
            total += int(line.split()[-1])
print(f"{library}, --stacks {stacks}: {total / pairs:.0f} instructions a cudaMallocAsync + cudaFreeAsync pair")
PY
