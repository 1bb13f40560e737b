"""Training loops for step finding and growth: two clean ones and four leaks.

    python steps_and_leaks.py KIND STEPS OUT.json

STEPS is a number of steps, or (resnet only) SECONDSs, such as 250s: as
many steps as fit in that many seconds of the loop.

KIND:
  resnet      ResNet-50, batch 32, SGD: a clean loop.
  gpt2        GPT-2 (transformers, bf16 autocast, AdamW), batch 8 x 512: a clean loop.
  append      a 4-layer MLP whose loop appends each step's output to a list.
  hook_dict   the MLP with a forward hook that keeps every layer's output of
              every step in a dict.
  validation  a validation loop that sums the MLP's outputs without no_grad,
              so each step's autograd graph and its saved activations stay.
  cache       a feature cache: each step's features, detached, kept by step.

Every kind ends normally (no os._exit): Python's shutdown frees whatever
the leak kept. OUT gets the facts to check against: the steps run, the line
of this file that allocates what leaks (null for the clean loops), the
bytes it leaks a step, and PyTorch's own peak of requested bytes.
"""
import json
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

kind, steps_asked, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
seconds = float(steps_asked[:-1]) if steps_asked.endswith("s") else None
steps = 0 if seconds is not None else int(steps_asked)
torch.manual_seed(0)
facts = {"kind": kind, "steps": steps, "leak_line": None, "leak_bytes_per_step": 0, "also_growing_lines": []}
BATCH, WIDTH = 256, 4096


def mlp():
    return nn.Sequential(
        nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
        nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH)).cuda()


def line_of(marker):
    """The line of this file that holds `marker` (a comment on the leaking line)."""
    with open(__file__) as source:
        for number, text in enumerate(source, 1):
            if marker in text and "line_of(" not in text:
                return number
    raise SystemExit(f"no line marked {marker}")


if kind == "resnet":
    from resnet_model import training_step

    step = training_step()
    started = time.monotonic()
    if seconds is None:
        for _ in range(steps):
            step()
    else:
        while time.monotonic() - started < seconds:
            step()
            steps += 1
    torch.cuda.synchronize()
    facts["steps"], facts["loop_seconds"] = steps, time.monotonic() - started
elif kind == "gpt2":
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config()).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 50257, (8, 512), device="cuda")
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, labels=tokens).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
elif kind in ("append", "hook_dict"):
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    kept, by_layer = [], {}
    if kind == "hook_dict":
        def keep(name):
            def hook(module, inputs, output):
                by_layer[(len(by_layer), name)] = output
            return hook

        for name, module in model.named_children():
            module.register_forward_hook(keep(name))
        # Seven layers (four Linear, three out-of-place ReLU), each output
        # 4 MiB, all kept.
        facts["leak_bytes_per_step"] = 7 * BATCH * WIDTH * 4
        facts["leak_line"] = line_of("# the model's forward: hook_dict leaks here")
    else:
        facts["leak_bytes_per_step"] = BATCH * WIDTH * 4
        facts["leak_line"] = line_of("# the model's forward: append leaks here")
    for _ in range(steps):
        x = torch.randn(BATCH, WIDTH, device="cuda")
        if kind == "append":
            output = model(x)  # the model's forward: append leaks here
        else:
            output = model(x)  # the model's forward: hook_dict leaks here
        loss = output.square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if kind == "append":
            kept.append(output)
elif kind == "validation":
    model = mlp()
    total = torch.zeros((), device="cuda")
    facts["leak_line"] = line_of("# validation's forward: leaks here")
    # Each step keeps its graph and what it saved: the three ReLUs'
    # outputs (made at the forward's line) and the first layer's input,
    # the batch (made at its own line, which grows too). The last layer's
    # output is freed: the sum saves nothing of it.
    facts["leak_bytes_per_step"] = 3 * BATCH * WIDTH * 4
    # The batch grows at its own line too. The running total does not: the
    # sum and the addition save no tensor for backward, so one total is
    # live at a time (GPU run 105 showed it; the test had expected it).
    facts["also_growing_lines"] = [line_of("# validation's batch: kept by the graph")]
    for _ in range(steps):
        x = torch.randn(BATCH, WIDTH, device="cuda")  # validation's batch: kept by the graph
        output = model(x)  # validation's forward: leaks here
        total = total + output.sum()  # validation's total: one live at a time
elif kind == "cache":
    model = mlp()
    cache = {}
    facts["leak_line"] = line_of("# features: cache leaks here")
    facts["leak_bytes_per_step"] = BATCH * WIDTH * 4
    with torch.no_grad():
        for step in range(steps):
            x = torch.randn(BATCH, WIDTH, device="cuda")
            features = model(x)  # features: cache leaks here
            cache[step] = features.detach()
            del features
else:
    raise SystemExit(f"unknown kind {kind}")

torch.cuda.synchronize()
stats = torch.cuda.memory_stats()
facts["requested_peak"] = stats.get("requested_bytes.all.peak", 0)
facts["allocated_peak"] = torch.cuda.max_memory_allocated()
with open(out_path, "w") as out:
    json.dump(facts, out)
