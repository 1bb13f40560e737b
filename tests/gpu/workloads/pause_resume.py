"""Started paused (CUDATRACE_START_PAUSED=1 under plain LD_PRELOAD):
64 MiB, then `cudatrace resume`, 32 MiB, then `cudatrace pause`, 16 MiB,
all kept to the end. argv: OUT CLI. Writes the three tensors' addresses."""
import json
import os
import subprocess
import sys

import torch

out, cli = sys.argv[1], sys.argv[2]
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
first = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
subprocess.run([cli, "resume"], env=env, check=True)
second = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
subprocess.run([cli, "pause"], env=env, check=True)
third = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
with open(out, "w") as f:
    json.dump({"addresses": [t.data_ptr() for t in (first, second, third)]}, f)
