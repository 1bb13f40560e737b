"""ResNet-50 training steps (batch 32, 224x224, SGD), timed: the median of
the measured steps, in ms, written as JSON to argv[1]. argv[2]:
  "plain"     just the steps;
  "recorder"  PyTorch's own memory recorder on (max_entries 100,000);
  "count"     also counts, over the measured steps, the driver allocations
              and frees of the caching allocator and the kernel launches
              (with PyTorch's profiler, in a process of its own).
The allocator mode comes from the environment (PYTORCH_CUDA_ALLOC_CONF,
PYTORCH_NO_CUDA_MEMORY_CACHING)."""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet_model import training_step  # noqa: E402

out_path, variant = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "plain"
steps = int(os.environ.get("RESNET_STEPS", "30"))
if variant == "recorder":
    torch.cuda.memory._record_memory_history(max_entries=100_000)
step = training_step()

for _ in range(5):
    step()
torch.cuda.synchronize()
# The call-timing diagnostic build of the tracer (tests/gpu/dev/
# call-timing.patch), when preloaded, measures its own time over the
# measured steps; any other process has no such function.
import ctypes  # noqa: E402
mark = getattr(ctypes.CDLL(None), "cudatrace_call_timing_mark", None)
if mark is not None:
    mark.argtypes = [ctypes.c_uint64]
    mark(0)
stats_before = torch.cuda.memory_stats()
times = []
for _ in range(steps):
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    times.append((time.perf_counter() - start) * 1000)
if mark is not None:
    mark(steps)
stats_after = torch.cuda.memory_stats()
result = {"step_ms_median": sorted(times)[len(times) // 2], "steps": steps}
if variant == "count":
    def delta(key):
        return (stats_after.get(key, 0) - stats_before.get(key, 0)) / steps
    result["driver_allocs_per_step"] = delta("segment.all.allocated")
    result["driver_frees_per_step"] = delta("segment.all.freed")
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
        torch.cuda.synchronize()
    result["launches_per_step"] = sum(e.count for e in prof.key_averages()
                                      if e.key in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                                                   "cuLaunchKernelEx"))
json.dump(result, open(out_path, "w"))
