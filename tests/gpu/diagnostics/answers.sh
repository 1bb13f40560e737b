#!/usr/bin/env bash
# Seed 000's leak (examples/leak_zero_grad.py) on the GPU: the text report's
# tensor call sites live at exit, and the flamegraph's largest stacks at exit.
#
#   tests/gpu/diagnostics/answers.sh CUDATRACE_BIN
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$1
dir=$(mktemp -d)
"$bin" run -o "$dir/leak.trace" -- python3 "$root/examples/leak_zero_grad.py" >/dev/null
"$bin" report "$dir/leak.trace" | sed -n '/call sites of tensors live at exit/,/call sites of tensors at the allocated peak/p' | head -40
"$bin" flamegraph "$dir/leak.trace" --at exit --folded -o "$dir/leak.folded"
echo "flamegraph at exit: $(wc -l < "$dir/leak.folded") stacks; the five largest, innermost 2 frames:"
sort -k2 -t' ' -n -r "$dir/leak.folded" | awk '{n=split($1, f, ";"); print $NF, f[n-1], f[n]}' | sort -n -r | head -5
"$bin" flamegraph "$dir/leak.trace" --at exit -o "$dir/leak.svg" >/dev/null
grep -o 'leak_zero_grad.py:[0-9]* [a-z_]*' "$dir/leak.svg" | sort | uniq -c | head
rm -rf "$dir"
