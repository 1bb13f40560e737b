#!/usr/bin/env bash
# Seed 000's leak (examples/leak_zero_grad.py) on the GPU: the text report's
# tensor call sites live at exit, and the flamegraph's largest stacks at exit.
#
#   tests/gpu/dev/answers.sh CUDATRACE_BIN [KEEP_DIR]
#
# With KEEP_DIR, the trace, the text report, the HTML page and the SVG
# flamegraph are kept there, to be looked at (the GPU machine has no browser).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$1
keep=${2:-}
dir=$(mktemp -d)
"$bin" run -o "$dir/leak.trace" -- python3 "$root/examples/leak_zero_grad.py" >/dev/null
"$bin" report "$dir/leak.trace" | sed -n '/call sites of tensors live at exit/,/call sites of tensors at the allocated peak/p' | head -40
"$bin" flamegraph "$dir/leak.trace" --at exit --folded -o "$dir/leak.folded"
echo "flamegraph at exit: $(wc -l < "$dir/leak.folded") stacks; the five largest, innermost 2 frames:"
sort -k2 -t' ' -n -r "$dir/leak.folded" | awk '{n=split($1, f, ";"); print $NF, f[n-1], f[n]}' | sort -n -r | head -5
"$bin" flamegraph "$dir/leak.trace" --at exit -o "$dir/leak.svg" >/dev/null
grep -o 'leak_zero_grad.py:[0-9]* [a-z_]*' "$dir/leak.svg" | sort | uniq -c | head
if [ -n "$keep" ]; then
    mkdir -p "$keep"
    "$bin" report "$dir/leak.trace" > "$keep/leak.txt"
    "$bin" html "$dir/leak.trace" -o "$keep/leak.html" >/dev/null 2>&1
    cp "$dir/leak.trace" "$dir/leak.svg" "$keep/"
    echo "the text report opens with:"
    head -24 "$keep/leak.txt"
fi
rm -rf "$dir"
