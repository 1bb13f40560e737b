"""A small training loop. Writes PyTorch's own view of its segments (from the
memory snapshot) and its reserved bytes to the JSON file named in argv[1].
argv[2] == "history" turns PyTorch's history recording on."""
import json
import sys
import time

import torch

out_path = sys.argv[1]
record_history = len(sys.argv) > 2 and sys.argv[2] == "history"
if record_history:
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
).cuda()
optimizer = torch.optim.Adam(model.parameters())
step_times = []
for step in range(30):
    torch.cuda.synchronize()
    start = time.perf_counter()
    x = torch.randn(256 + 64 * (step % 10), 1024, device="cuda")
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    step_times.append(time.perf_counter() - start)
big = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
del big
torch.cuda.synchronize()
torch.cuda.empty_cache()

result = {
    "reserved": torch.cuda.memory_reserved(),
    "allocated": torch.cuda.memory_allocated(),
    "step_ms_median": sorted(step_times[5:])[len(step_times[5:]) // 2] * 1000,
}
if record_history:
    snapshot = torch.cuda.memory._snapshot()
    result["segments"] = [
        {"action": e["action"], "addr": e["addr"], "size": e["size"]}
        for e in snapshot["device_traces"][0]
        if e["action"] in ("segment_alloc", "segment_free", "segment_map", "segment_unmap")
    ]
json.dump(result, open(out_path, "w"))
