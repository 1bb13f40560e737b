#!/usr/bin/env python3
"""What a training step costs under cudatrace, measured within each
process, and the table of it (docs/performance.md; the full tables in docs/history/performance-2026-11.md,
"What a training step costs").

Each process runs blocks of steps with recording in several states
(workloads/step_blocks.py) under `cudatrace run --start-paused`. A state's
cost in one process is the median, over cycles, of its block against the
paused block of the same cycle; the table gives the median of those over
the processes, with a 95% bootstrap interval (processes resampled). Only
the process's own blocks are compared, so its speed, which varies from
process to process by 10-20% on these machines, cancels.

  tests/gpu/step_cost.py run CONFIG[,CONFIG...] [--unrecorded] [--processes N] [--results DIR]
  tests/gpu/step_cost.py table DIR...

With --unrecorded, the diagnostic build of tests/gpu/dev/
unrecorded-blocks.patch (target/release/libcudatrace-unrecorded.so) runs
instead, and each process also has blocks with nothing recorded at all:
those are the baseline, so a cost includes every record's fixed part and
what paused recording still does. The tracker attached to PyTorch's
allocator stays attached either way; its cost to PyTorch is measured by
the `tracker` configuration.

`run` runs N processes (default 8) of each configuration, writes each
one's JSON into DIR (default $OUT/step_cost, else /tmp/step_cost) and
prints the table of everything in DIR; `table` prints the table of
results already gathered, from several calls.

Configurations:
  caching      ResNet-50 bs32, caching allocator: paused, all, python, none, recorder
  tensors-off  the same with --tensors off: paused, all
  async        ResNet-50 bs32, PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: paused, all, none
  no-caching   ResNet-50 bs32, PYTORCH_NO_CUDA_MEMORY_CACHING=1: paused, all, none, recorder
  gpt2         GPT-2 small (transformers, bf16, AdamW): paused, all, python, recorder
  varying      a Transformer whose allocations change size from step to step
               (8 layers, bf16, AdamW, six sequence lengths from 64 to 512 in
               turn): paused, all, python, none, recorder
  async-none, no-caching-none, gpt2-all
               paused and one setting only, more blocks of it, pooled with
               the configuration above in the table
  ddp          ResNet-50 bs32 a rank under DistributedDataParallel, 2 ranks on
               2 GPUs (torch.distributed.run; each rank is a process of the
               table): paused, all, recorder
  tracker      PyTorch's allocator with a tracker that does nothing attached,
               against none (workloads/tracker_cost.cpp, no cudatrace)
"""
import glob
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKLOADS = os.path.join(HERE, "workloads")
CLI = os.path.join(ROOT, "target", "release", "cudatrace")
LIBRARY = os.path.join(ROOT, "target", "release", "libcudatrace.so")

# name: (model, states, run options, environment, cycles, steps per block)
CONFIGS = {
    "caching": ("resnet50", "off,all,python,none,recorder", [], {}, 10, 4),
    "tensors-off": ("resnet50", "off,all", ["--tensors", "off"], {}, 40, 4),
    "async": ("resnet50", "off,all,none", [], {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, 10, 4),
    "no-caching": ("resnet50", "off,all,none,recorder", [], {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, 8, 3),
    "gpt2": ("gpt2", "off,all,python,recorder", [], {}, 8, 4),
    "varying": ("varying", "off,all,python,none,recorder", [], {}, 6, 6),
    # More blocks of one setting, where the configurations above leave its
    # interval wider than the goal it is judged by; pooled with them.
    "async-none": ("resnet50", "off,none", [], {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, 24, 4),
    "no-caching-none": ("resnet50", "off,none", [], {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, 12, 4),
    "gpt2-all": ("gpt2", "off,all", [], {}, 10, 4),
    "ddp": ("ddp-resnet50", "off,all,recorder", [],
            {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}, 8, 6),
}

# With --unrecorded: the diagnostic build, whose blocks with nothing
# recorded at all are the baseline; (states, cycles) of each configuration.
UNRECORDED = {
    "caching": ("unrecorded,off,all,python,none,recorder", 10),
    "tensors-off": ("unrecorded,all", 24),
    "async": ("unrecorded,all,none", 14),
    "no-caching": ("unrecorded,all,none", 8),
    "gpt2": ("unrecorded,off,all,recorder", 8),
    "varying": ("unrecorded,off,all,none,recorder", 6),
    "no-caching-none": ("unrecorded,none", 10),
    "ddp": ("unrecorded,off,all,recorder", 10),
}
LIBRARY_UNRECORDED = os.path.join(ROOT, "target", "release", "libcudatrace-unrecorded.so")

# Table rows: (workload, setting, configurations pooled, state), and the
# state of the first configuration's processes that PyTorch's recorder was
# measured in, if any.
ROWS = [
    ("ResNet-50 bs32, caching allocator", "defaults (tensors, --stacks all)", ["caching"], "all", "recorder"),
    ("", "--stacks python", ["caching"], "python", None),
    ("", "--stacks none", ["caching"], "none", None),
    ("", "--tensors off", ["tensors-off"], "all", None),
    ("ResNet-50 bs32, cudaMallocAsync", "--stacks all", ["async"], "all", None),
    ("", "--stacks none", ["async", "async-none"], "none", None),
    ("ResNet-50 bs32, no caching", "--stacks all", ["no-caching"], "all", "recorder"),
    ("", "--stacks none", ["no-caching", "no-caching-none"], "none", None),
    ("GPT-2 small, bf16, AdamW", "defaults (tensors, --stacks all)", ["gpt2", "gpt2-all"], "all", "recorder"),
    ("Transformer, sizes varying by step", "defaults (tensors, --stacks all)", ["varying"], "all", "recorder"),
    ("", "--stacks none", ["varying"], "none", None),
    ("ResNet-50 bs32 a rank, DDP on 2 GPUs", "defaults (tensors, --stacks all)", ["ddp"], "all", "recorder"),
]


def median(values):
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def bootstrap_interval(values, rounds=10000):
    """The 95% interval of the median, the values resampled with replacement."""
    rng = random.Random(0)
    medians = sorted(median([rng.choice(values) for _ in values]) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def baseline(result):
    """The state a process's costs are measured against: nothing recorded
    (the diagnostic build's "unrecorded") where it ran, else paused."""
    return "unrecorded" if "unrecorded" in result["blocks_ms"] else "off"


def process_cost(result, state):
    """A state's cost in one process, in %: the median over cycles of its
    block against the same cycle's baseline block."""
    ratios = [b / a - 1 for a, b in zip(result["blocks_ms"][baseline(result)], result["blocks_ms"][state])]
    return 100 * median(ratios)


def run_config(name, index, results, unrecorded):
    out = os.path.join(results, f"{'u-' if unrecorded else ''}{name}-{index}.json")
    if name == "tracker":
        binary = os.path.join(results, "tracker_cost")
        if not os.path.exists(binary):
            compile_tracker(binary)
        done = subprocess.run([binary, "15", "20000"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"tracker_cost failed: {done.stderr.strip()}")
        with open(out, "w") as f:
            f.write(done.stdout)
        return
    model, states, options, env, cycles, steps = CONFIGS[name]
    library = LIBRARY
    if unrecorded:
        states, cycles = UNRECORDED[name]
        library = LIBRARY_UNRECORDED
    distributed = model.startswith("ddp-")
    # Each rank of a distributed run is a process of the table.
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29566"] \
        if distributed else [sys.executable]
    blocks_out = out + ".ranks" if distributed else out
    command = [CLI, "run", "--preload", library, "--start-paused", "-o", os.path.join(results, f"{name}-{index}.trace"),
               "--force", *options, "--", *launcher, os.path.join(WORKLOADS, "step_blocks.py"),
               "--model", model, "--states", states, "--cycles", str(cycles), "--steps", str(steps),
               "--cli", CLI, "--out", blocks_out]
    done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=480)
    outs = [f"{blocks_out}.rank{r}" for r in range(2)] if distributed else [out]
    if done.returncode != 0 or not all(os.path.exists(o) for o in outs):
        raise SystemExit(f"{name} process {index} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    if distributed:
        for rank, path in enumerate(outs):
            os.rename(path, out.replace(f"-{index}.json", f"-{index}r{rank}.json"))
    os.remove(os.path.join(results, f"{name}-{index}.trace"))


def compile_tracker(binary):
    import torch

    torch_dir = os.path.dirname(torch.__file__)
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    command = ["g++", "-O2", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1",
               os.path.join(WORKLOADS, "tracker_cost.cpp"), "-o", binary,
               "-I", os.path.join(torch_dir, "include"), "-I", os.path.join(cuda_home, "include"),
               "-L", os.path.join(torch_dir, "lib"), "-Wl,-rpath," + os.path.join(torch_dir, "lib"),
               "-lc10_cuda", "-lc10"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"cannot compile tracker_cost: {done.stderr.strip()[-2000:]}")


def load(dirs):
    results = {}
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.json"))):
            name = os.path.basename(path).rsplit("-", 1)[0]
            with open(path) as f:
                results.setdefault(name, []).append(json.load(f))
    return results


def cell(costs):
    if not costs:
        return "not measured"
    low, high = bootstrap_interval(costs)
    return f"{median(costs):+.1f}% [{low:+.1f}, {high:+.1f}]"


def cost_table(results, prefix):
    """The table of one baseline: runs named with `prefix` ("u-": against
    nothing recorded, the diagnostic build; "": against paused)."""
    against = "nothing recorded (diagnostic build)" if prefix else "paused (events recorded without stacks)"
    lines = [f"against {against}:",
             "",
             "| workload | cudatrace setting | processes | cudatrace | PyTorch's recorder | step, baseline (ms) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for workload, setting, configs, state, recorder in ROWS:
        runs = [r for config in configs for r in results.get(prefix + config, []) if state in r["blocks_ms"]]
        ours = [process_cost(r, state) for r in runs]
        first = [r for r in results.get(prefix + configs[0], []) if recorder in r["blocks_ms"]]
        theirs = [process_cost(r, recorder) for r in first] if recorder else []
        base = [median(r["blocks_ms"][baseline(r)]) for r in runs]
        recorder_cell = cell(theirs) if recorder else ("n/a (not supported)" if configs[0] == "async" else "")
        step = f"{median(base):.1f}" if base else ""
        lines.append(f"| {workload} | {setting} | {len(runs)} | {cell(ours)} | {recorder_cell} | {step} |")
    if prefix:
        for config in ("caching", "gpt2", "varying"):
            runs = [r for r in results.get(prefix + config, []) if "off" in r["blocks_ms"]]
            if runs:
                lines.append(f"\n{config}, paused (every event recorded, no stack): "
                             f"{cell([process_cost(r, 'off') for r in runs])} ({len(runs)} processes)")
    return lines


def table(results):
    gpus = sorted({r.get("gpu", "") for rs in results.values() for r in rs if r.get("gpu")})
    lines = [f"step cost within each process ({', '.join(gpus) or 'no GPU result'}); median over processes [95% interval]",
             ""]
    if any(name.startswith("u-") for name in results):
        lines += cost_table(results, "u-") + [""]
    if any(not name.startswith("u-") and name != "tracker" for name in results):
        lines += cost_table(results, "")
    trackers = results.get("tracker", [])
    if trackers:
        extra = [r["tracker_ns_per_pair"] - r["none_ns_per_pair"] for r in trackers]
        base = median([r["none_ns_per_pair"] for r in trackers])
        low, high = bootstrap_interval(extra)
        lines += ["",
                  f"an attached tracker that does nothing, PyTorch's own cost ({len(trackers)} processes): "
                  f"{median(extra):+.0f} ns [{low:+.0f}, {high:+.0f}] per cached allocate/free pair "
                  f"(none: {base:.0f} ns)"]
        for config in ("caching", "gpt2"):
            runs = results.get(config, []) or results.get("u-" + config, [])
            if not runs:
                continue
            pairs = median([r["allocations_per_step"] for r in runs])
            if pairs == 0:
                continue  # the allocator kept no counts
            step_ms = median([median(r["blocks_ms"][baseline(r)]) for r in runs])
            share = 100 * pairs * median(extra) / 1e6 / step_ms
            lines.append(f"  {config}: {pairs:.0f} allocations a step, so {share:+.2f}% of a {step_ms:.1f} ms step")
    return "\n".join(lines)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("run", "table"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "table":
        print(table(load(sys.argv[2:])))
        return
    names = sys.argv[2].split(",")
    unknown = [n for n in names if n not in CONFIGS and n != "tracker"]
    if unknown:
        raise SystemExit(f"unknown configuration {unknown[0]}; see --help")
    processes, results, unrecorded = 8, os.path.join(os.environ.get("OUT", "/tmp"), "step_cost"), False
    rest = sys.argv[3:]
    while rest:
        flag, rest = rest[0], rest[1:]
        if flag == "--unrecorded":
            unrecorded = True
            continue
        value, rest = rest[0], rest[1:]
        if flag == "--processes":
            processes = int(value)
        elif flag == "--results":
            results = value
    if unrecorded and not os.path.exists(LIBRARY_UNRECORDED):
        raise SystemExit(f"{LIBRARY_UNRECORDED} is missing: build it with tests/gpu/dev/unrecorded-blocks.patch")
    os.makedirs(results, exist_ok=True)
    for name in names:
        for index in range(processes):
            run_config(name, index, results, unrecorded and name != "tracker")
            print(f"{name} {index + 1}/{processes} done", file=sys.stderr, flush=True)
    print(table(load([results])))


if __name__ == "__main__":
    main()
