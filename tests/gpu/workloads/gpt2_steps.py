"""GPT-2 small training steps (transformers, bf16 autocast, AdamW, batch 8
of 512 tokens), timed: the median of the measured steps, in ms, written as
JSON to argv[1]. The steps of tests/gpu/step_cost.py's gpt2 workload, in a
process of their own, for the diagnostic builds (tests/gpu/dev/)."""
import json
import os
import sys
import time

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

out_path = sys.argv[1]
steps = int(os.environ.get("GPT2_STEPS", "30"))
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config()).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
tokens = torch.randint(0, 50257, (8, 512), device="cuda")


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(tokens, labels=tokens).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


for _ in range(5):
    step()
torch.cuda.synchronize()
times = []
for _ in range(steps):
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    times.append((time.perf_counter() - start) * 1000)
json.dump({"step_ms_median": sorted(times)[len(times) // 2], "steps": steps}, open(out_path, "w"))
