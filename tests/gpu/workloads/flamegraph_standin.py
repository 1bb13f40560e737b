#!/usr/bin/env python3
"""Stands in for flamegraph.pl, which torch.cuda._memory_viz downloads and
the GPU machines cannot: checks that every folded line is `stack count` and
writes a small SVG naming how many lines and bytes it read."""
import sys

lines = [line for line in sys.stdin.read().splitlines() if line]
total = 0
for line in lines:
    stack, _, count = line.rpartition(" ")
    if not stack or not count.isdigit():
        sys.exit(f"not a folded line: {line!r}")
    total += int(count)
print(f'<svg xmlns="http://www.w3.org/2000/svg"><text>{len(lines)} stacks, {total} bytes</text></svg>')
