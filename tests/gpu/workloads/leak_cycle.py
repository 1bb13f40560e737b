"""Leaks CUDA memory through reference cycles that are never collected.

Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that each tensor is its own
driver allocation. Prints {"leaked_bytes": N} to the file named by argv[1].
It ends with os._exit, as a job stopped for running out of memory would:
a normal interpreter shutdown collects cycles even with gc disabled.
"""
import gc
import json
import os
import sys

import torch

gc.disable()


class Node:
    def __init__(self, other=None):
        self.tensor = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
        self.other = other


def make_cycle():
    first = Node()
    second = Node(first)
    first.other = second


for _ in range(8):
    make_cycle()
scratch = torch.ones(1 << 20, device="cuda")
del scratch
torch.cuda.synchronize()
with open(sys.argv[1], "w") as out:
    json.dump({"leaked_bytes": 16 * (4 << 20)}, out)
os._exit(0)
