#!/usr/bin/env bash
# The two walkthroughs of docs/usage.md on a GPU, for their figures:
# "my memory grows: find the leak" and "my job ran out of memory: what
# held it", both on examples/leak_validation_loss.py (a validation loop
# that sums its losses with autograd on).
#
#   tests/gpu/walkthroughs.sh CUDATRACE_BIN [KEEP_DIR]
#
# Prints a table of what each step showed, then the report excerpts the
# walkthroughs quote. With KEEP_DIR the traces and reports are kept there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$1
dir=${2:-$(mktemp -d)}
mkdir -p "$dir"
example=$root/examples/leak_validation_loss.py
"$bin" run --force -o "$dir/short.trace" -- python3 "$example" --batches 2 >"$dir/short.out" 2>&1
"$bin" run --force -o "$dir/long.trace" -- python3 "$example" --batches 8 >"$dir/long.out" 2>&1
"$bin" diff "$dir/short.trace" "$dir/long.trace" >"$dir/diff.txt"
set +e
"$bin" run --force -o "$dir/oom.trace" -- python3 "$example" --batches 100000 >"$dir/oom.out" 2>&1
oom_status=$?
set -e
"$bin" report "$dir/long.trace" >"$dir/long.txt"
"$bin" report "$dir/oom.trace" >"$dir/oom.txt"
printf '| step | result |\n| --- | --- |\n'
printf '| 2 batches | %s |\n' "$(grep -c '^batch' "$dir/short.out") batches, last: $(grep '^batch' "$dir/short.out" | tail -1)"
printf '| 8 batches | %s |\n' "$(grep -c '^batch' "$dir/long.out") batches, last: $(grep '^batch' "$dir/long.out" | tail -1)"
printf '| until OOM | exit %s after %s batches; %s |\n' "$oom_status" "$(grep -c '^batch' "$dir/oom.out")" \
    "$(grep -c 'OUT OF MEMORY' "$dir/oom.txt") OUT OF MEMORY lines in the report"
echo
echo "== diff, first 30 lines"
head -30 "$dir/diff.txt"
echo "== long: call sites of tensors at the allocated peak, and live at exit (40 lines)"
sed -n '/call sites of tensors live at exit/,$p' "$dir/long.txt" | head -40
echo "== oom: the process's section (60 lines from the pid line)"
sed -n '/^pid /,$p' "$dir/oom.txt" | head -60
echo "== oom: the footprint table"
sed -n '/^where the memory went/,/^$/p' "$dir/oom.txt" | head -24
