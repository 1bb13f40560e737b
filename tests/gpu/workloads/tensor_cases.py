"""Every case the tensors issue names, in one process, with PyTorch's own
recorder on from before the first allocation: a record_stream free that
completes later, empty_cache(), an out-of-memory failure, a CUDA graph's
private pool, and a MemPool of the program's own. The allocator mode comes
from the environment (expandable segments or not). Writes PyTorch's
snapshot to argv[1] and ends at once, so that nothing changes after it."""
import os
import pickle
import sys

import torch

torch.cuda.memory._record_memory_history(max_entries=1_000_000)
keep = [torch.randn(1024, 1024, device="cuda") for _ in range(3)]

# A free that completes once another stream is done with the block.
side = torch.cuda.Stream()
shared = torch.ones(4 << 20, device="cuda")
shared.record_stream(side)
with torch.cuda.stream(side):
    shared.mul_(2)
del shared
torch.cuda.synchronize()

# Segments given back.
scratch = [torch.empty(8 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]
del scratch
torch.cuda.empty_cache()

# An out-of-memory failure, caught.
try:
    torch.empty(400 << 30, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError:
    pass

# A CUDA graph's private pool.
static = torch.ones(1 << 16, device="cuda")
graph = torch.cuda.CUDAGraph()
torch.cuda.synchronize()
with torch.cuda.graph(graph):
    result = static * 2 + 1
graph.replay()
torch.cuda.synchronize()
keep.append(result)

# A pool of the program's own.
pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    pooled = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
keep.append(pooled)
keep.append(torch.empty(3000, device="cuda"))
torch.cuda.synchronize()

with open(sys.argv[1], "wb") as out:
    pickle.dump(torch.cuda.memory._snapshot(), out)
os._exit(0)
