"""Training steps in blocks, each block with recording in one state, in
one process: the measure of what a step costs under cudatrace (and under
PyTorch's own recorder) that process-to-process speed differences do not
blur. Run under `cudatrace run --start-paused`; writes JSON to --out.

States:
  unrecorded
            nothing recorded at all: only with the diagnostic build of
            tests/gpu/dev/unrecorded-blocks.patch, which reads bit 1 of the
            job's switch word, written here directly (no command sets it);
  off       cudatrace paused (events recorded without stacks), no recorder;
  all, python, native, none
            cudatrace recording with those stacks (`cudatrace resume --stacks`);
  recorder  cudatrace paused, PyTorch's `_record_memory_history` on
            (max_entries 100,000, its other settings the defaults).

Each cycle runs one block per state, the order turned by one each cycle so
that no state always follows the same one. A block is --steps steps after
the switch; its figure is their median time (each step synchronised).
Switching runs the `cudatrace` command between blocks, outside the timed
steps. The model comes from --model: ResNet-50 (batch 32, SGD) or GPT-2
small (transformers, batch 8 of 512 tokens, bf16 autocast, AdamW), or a
Transformer whose tensors change size from step to step (`varying`: 8
layers of width 1024, bf16 autocast, AdamW, batch 16, each step one of six
sequence lengths from 64 to 512 in turn; a block is six steps, one of each
length, and its figure is their mean, not their median), or
ResNet-50 under DistributedDataParallel (`ddp-resnet50`, run by `python -m
torch.distributed.run`, batch 32 a rank): there rank 0 switches the job's
recording for every rank, between barriers, and each rank writes its own
--out with `.rankN` added."""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=["resnet50", "gpt2", "varying", "ddp-resnet50"], required=True)
parser.add_argument("--states", required=True)
parser.add_argument("--cycles", type=int, default=10)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--warmup", type=int, default=10)
parser.add_argument("--cli", required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()
states = args.states.split(",")

torch.manual_seed(0)
distributed = args.model == "ddp-resnet50"
rank = 0
if args.model == "resnet50":
    from resnet_model import training_step

    step = training_step()
elif distributed:
    import torch.distributed as dist
    import torch.nn as nn
    from resnet_model import resnet50

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = nn.parallel.DistributedDataParallel(resnet50().cuda(), device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images = torch.randn(32, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 1000, (32,), device="cuda")

    def step():
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
elif args.model == "varying":
    import torch.nn as nn

    lengths = [64, 128, 192, 256, 384, 512]
    vocabulary = 32768
    layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, norm_first=True)
    model = nn.Sequential(nn.Embedding(vocabulary, 1024), nn.TransformerEncoder(layer, 8, enable_nested_tensor=False),
                          nn.LayerNorm(1024), nn.Linear(1024, vocabulary)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [torch.randint(0, vocabulary, (16, n), device="cuda") for n in lengths]
    step_index = 0

    def step():
        global step_index
        tokens = batches[step_index % len(batches)]
        step_index += 1
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens)
            loss = nn.functional.cross_entropy(logits.view(-1, vocabulary).float(), tokens.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
else:
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config()).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 50257, (8, 512), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, labels=tokens).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

# The cudatrace command, without our library preloaded into it.
cli_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def cudatrace(*words):
    """Switches the job's recording: in a distributed run, rank 0 does it
    for every rank while the others wait at the barriers around it."""
    if distributed:
        torch.cuda.synchronize()
        dist.barrier()
    if rank == 0:
        subprocess.run([args.cli, *words], env=cli_env, check=True, stderr=subprocess.DEVNULL)
    if distributed:
        dist.barrier()


recorder_on = False


def set_unrecorded(on):
    """Bit 1 of the switch word (offset 8 of the job's switch file)."""
    import mmap
    import struct

    path = os.path.join(os.environ["CUDATRACE_DIR"], "recording.switch")
    with open(path, "r+b") as f:
        page = mmap.mmap(f.fileno(), 4096)
        word = struct.unpack_from("<Q", page, 8)[0]
        struct.pack_into("<Q", page, 8, word | 2 if on else word & ~2)
        page.close()


def switch_to(state):
    global recorder_on
    if recorder_on:
        torch.cuda.memory._record_memory_history(enabled=None)
        recorder_on = False
    set_unrecorded(False)
    if state == "unrecorded":
        cudatrace("pause")
        set_unrecorded(True)
    elif state in ("off", "recorder"):
        cudatrace("pause")
    else:
        cudatrace("resume", "--stacks", state)
    if state == "recorder":
        torch.cuda.memory._record_memory_history(max_entries=100_000)
        recorder_on = True


def block():
    torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    if args.model == "varying":
        # Steps of six sizes: the median would pick one size's step.
        return sum(times) / len(times)
    return sorted(times)[len(times) // 2]


cudatrace("pause")
for _ in range(args.warmup):
    step()
torch.cuda.synchronize()
stats_before = torch.cuda.memory_stats()
block()
stats_after = torch.cuda.memory_stats()
counted = args.steps


def per_step(key):
    return (stats_after.get(key, 0) - stats_before.get(key, 0)) / counted


blocks = {state: [] for state in states}
for cycle in range(args.cycles):
    turn = cycle % len(states)
    for state in states[turn:] + states[:turn]:
        switch_to(state)
        step()  # the first step after a switch settles what the switch changed
        blocks[state].append(block())
switch_to("off")
result = {
    "model": args.model,
    "states": states,
    "cycles": args.cycles,
    "steps_per_block": args.steps,
    "blocks_ms": blocks,
    # What PyTorch's allocator did per step (0 for cudaMallocAsync, which
    # keeps no such counts): its tracker sees about one action per
    # allocation and two per free.
    "allocations_per_step": per_step("allocation.all.allocated"),
    "frees_per_step": per_step("allocation.all.freed"),
    "segment_allocations_per_step": per_step("segment.all.allocated"),
    "gpu": torch.cuda.get_device_name(),
    "torch": torch.__version__,
    "rank": rank,
}
with open(f"{args.out}.rank{rank}" if distributed else args.out, "w") as f:
    json.dump(result, f)
if distributed:
    dist.barrier()
    dist.destroy_process_group()
