"""PyTorch with the cudaMallocAsync backend: allocates tensors of known sizes,
frees them, and writes their addresses and sizes to argv[1]."""
import json
import sys

import torch

assert torch.cuda.get_allocator_backend() == "cudaMallocAsync", torch.cuda.get_allocator_backend()
tensors = [torch.empty(mib << 20, dtype=torch.uint8, device="cuda") for mib in (1, 3, 5, 7)]
blocks = [{"addr": t.data_ptr(), "size": t.numel()} for t in tensors]
del tensors
torch.cuda.synchronize()
json.dump({"blocks": blocks}, open(sys.argv[1], "w"))
