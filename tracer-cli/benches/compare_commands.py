#!/usr/bin/env python3
"""Times every whole command of two builds of `cudatrace` on one trace, in
turn (old, new, old, new, ...), and prints each command's median wall time
and the median of the pairs' ratios: a change that must not slow any
command is checked with it.

    CUDATRACE_BENCH_TRACE=/tmp/bench10m.trace CUDATRACE_BENCH_ONLY=none \\
        cargo bench -p cudatrace-cli --bench report_large     # the trace
    tracer-cli/benches/compare_commands.py OLD/cudatrace NEW/cudatrace /tmp/bench10m.trace

Each run is pinned to one processor (`--cpu`, default 0) when `taskset` is
there, or runs on every core with `--unpinned` (the commands decode on the
other cores), with one warm-up run of each build first. Each round also
times `md5sum` of the trace, the floor of reading it, and the table gives
each build's median as a multiple of md5sum's. Results go in
docs/performance.md.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def commands(trace, out):
    """Every command that reads a whole trace, with its output in `out`."""
    return [
        ("report", ["report", trace]),
        ("report --json", ["report", "--json", trace]),
        ("snapshot", ["snapshot", trace, "-o", os.path.join(out, "s"), "--force"]),
        ("perfetto", ["perfetto", trace, "-o", os.path.join(out, "p.pftrace"), "--force"]),
        ("html", ["html", trace, "-o", os.path.join(out, "h.html"), "--force"]),
        ("flamegraph", ["flamegraph", trace, "-o", os.path.join(out, "f.svg"), "--force"]),
        ("export", ["export", "-o", os.path.join(out, "x"), "--force", trace]),
        ("diff", ["diff", trace, trace]),
        ("merge", ["merge", "-o", os.path.join(out, "m.trace"), "--force", trace]),
        ("dump", ["dump", trace]),
    ]


def timed(argv, pin):
    """Wall seconds of one whole run; its output thrown away."""
    if pin is not None:
        argv = ["taskset", "-c", str(pin)] + argv
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"compare_commands: {' '.join(argv)} exited with {done.returncode}")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("trace")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cpu", type=int, default=0)
    parser.add_argument("--unpinned", action="store_true", help="run on every core")
    parser.add_argument("--only", default="", help="commands to time, comma-separated")
    args = parser.parse_args()
    for path in (args.old, args.new, args.trace):
        if not os.path.exists(path):
            sys.exit(f"compare_commands: {path} does not exist")
    pin = args.cpu if shutil.which("taskset") and not args.unpinned else None
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    where = "on every core" if pin is None else f"pinned to cpu {pin}"
    print(f"{args.runs} runs of each build in turn, {where}; old = {args.old}, new = {args.new}")
    print()
    print("| command | old median (s) | new median (s) | new / old (median of pairs) | range of pairs "
          "| md5sum median (s) | old / md5sum | new / md5sum |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as out:
        for name, tail in commands(args.trace, out):
            if wanted and name not in wanted:
                continue
            old_argv, new_argv = [args.old] + tail, [args.new] + tail
            timed(old_argv, pin)
            timed(new_argv, pin)
            old, new, floor = [], [], []
            for _ in range(args.runs):
                old.append(timed(old_argv, pin))
                new.append(timed(new_argv, pin))
                floor.append(timed(["md5sum", args.trace], pin))
            ratios = [n / o for o, n in zip(old, new)]
            md5 = statistics.median(floor)
            print(
                f"| {name} | {statistics.median(old):.2f} | {statistics.median(new):.2f} | "
                f"{statistics.median(ratios):.3f} | {min(ratios):.3f}–{max(ratios):.3f} | "
                f"{md5:.2f} | {statistics.median(old) / md5:.1f}× | {statistics.median(new) / md5:.1f}× |",
                flush=True,
            )


if __name__ == "__main__":
    main()
