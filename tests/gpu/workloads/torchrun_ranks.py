"""Run by `python -m torch.distributed.run --nproc_per_node=2`: two ranks on
one GPU (gloo, since NCCL wants a GPU per rank). Each rank leaves a tensor of
a size of its own live and reports its address."""
import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
tensor = torch.empty((24 + rank) << 20, dtype=torch.uint8, device="cuda")
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
torch.cuda.synchronize()
with open(f"{sys.argv[1]}.rank{rank}", "w") as f:
    json.dump({"pid": os.getpid(), "rank": rank, "sum": total.item(), "reserved": torch.cuda.memory_reserved()}, f)
dist.destroy_process_group()
