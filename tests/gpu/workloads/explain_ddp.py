"""Run by `python -m torch.distributed.run --nproc_per_node=2` on two GPUs:
NCCL, a cuBLAS matmul, an all-reduce of 256 MiB and one DDP step; then each
rank's own readings of its memory, to the file named by argv[1] + rank."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from own_readings import readings

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
a = torch.randn(4096, 4096, device="cuda")
b = a @ a
buffer = torch.ones(64 << 20, device="cuda")  # 256 MiB of float32
dist.all_reduce(buffer)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda(), device_ids=[rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model(torch.randn(64, 4096, device="cuda")).sum().backward()
optimizer.step()
torch.cuda.synchronize()
dist.barrier()
time.sleep(0.5)
out = readings(rank)
out.update(rank=rank, reserved=torch.cuda.memory_reserved(), sum=float(buffer[0]), check=float(b[0, 0]))
json.dump(out, open(f"{sys.argv[1]}.rank{rank}", "w"))
time.sleep(0.5)
dist.barrier()
dist.destroy_process_group()
