"""One process, a model replicated on two GPUs by nn.DataParallel: the
replicas run their kernels on each device from worker threads, so every
kernel PyTorch and cuDNN use loads into the second device's context too.
A few training steps, then the process's own readings of every device,
to the file named by argv[1]."""
import json
import os
import sys
import time

import torch
import torch.nn as nn

from own_readings import device_used_bytes, nvml_process_bytes
from resnet_model import resnet50

torch.manual_seed(0)
model = nn.DataParallel(resnet50().cuda(0), device_ids=[0, 1])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
images = torch.randn(64, 3, 224, 224, device="cuda:0")
labels = torch.randint(0, 1000, (64,), device="cuda:0")
for _ in range(3):
    loss = nn.functional.cross_entropy(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
time.sleep(0.5)
out = {"pid": os.getpid(), "nvml": nvml_process_bytes(), "device_used": device_used_bytes(0),
       "device_used_1": device_used_bytes(1), "loss": float(loss)}
json.dump(out, open(sys.argv[1], "w"))
