"""Run by `python -m torch.distributed.run --nproc_per_node=2` on two GPUs:
ResNet-50 under DistributedDataParallel, a few steps, with PyTorch's own
recorder on in each rank; each rank then dumps its own snapshot to
PREFIX.rankN.pickle and its own readings to PREFIX.rankN.json
(PREFIX = argv[1]), and ends at once."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from own_readings import readings
from resnet_model import resnet50

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
torch.cuda.memory._record_memory_history(max_entries=1_000_000)
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(resnet50().cuda(), device_ids=[rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
images = torch.randn(32, 3, 224, 224, device="cuda")
labels = torch.randint(0, 1000, (32,), device="cuda")
for _ in range(5):
    loss = nn.functional.cross_entropy(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
torch.cuda.synchronize()
dist.barrier()
torch.cuda.synchronize()
time.sleep(0.5)
out = readings(rank)
out.update(rank=rank, loss=float(loss), reserved=torch.cuda.memory_reserved())
json.dump(out, open(f"{sys.argv[1]}.rank{rank}.json", "w"))
# PyTorch's snapshot is the last thing the rank does: the process then ends
# at once, with no teardown freeing tensors, so that the trace's end (where
# cudatrace's snapshot stands) is the moment of PyTorch's.
torch.cuda.memory._dump_snapshot(f"{sys.argv[1]}.rank{rank}.pickle")
os._exit(0)
