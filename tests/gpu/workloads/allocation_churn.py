"""Many small allocations: PyTorch's cudaMallocAsync backend turns every
tensor into a driver allocation, as custom extensions calling cudaMalloc do."""
import json
import sys

import torch

assert torch.cuda.get_allocator_backend() == "cudaMallocAsync"
count = 0
for step in range(2000):
    a = torch.empty((1 + step % 37) << 12, device="cuda")
    b = torch.empty((1 + step % 11) << 14, device="cuda")
    c = a.sum() + b.sum()
    del a, b, c
    count += 3
torch.cuda.synchronize()
json.dump({"tensors": count}, open(sys.argv[1], "w"))
