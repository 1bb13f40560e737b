"""One ResNet-50 training step (batch 32, 224x224, SGD) on one GPU, then the
workload's own readings of its memory."""
import json
import sys
import time

import torch
import torch.nn as nn

from own_readings import readings
from resnet_model import resnet50


model = resnet50().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
images = torch.randn(32, 3, 224, 224, device="cuda")
labels = torch.randint(0, 1000, (32,), device="cuda")
loss = nn.functional.cross_entropy(model(images), labels)
loss.backward()
optimizer.step()
torch.cuda.synchronize()
time.sleep(0.5)
out = readings()
out["torch_reserved"] = torch.cuda.memory_reserved()
json.dump(out, open(sys.argv[1], "w"))
time.sleep(0.5)
