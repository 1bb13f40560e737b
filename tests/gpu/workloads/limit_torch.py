"""PyTorch under `cudatrace run --limit`: what it is told of the card, and
how large a ResNet-50 batch trains before the limit refuses memory.

    limit_torch.py queries OUT       mem_get_info and total_memory
    limit_torch.py grow OUT          batches of 64, 80, 96, ... until OOM:
                                     the largest that trained, PyTorch's OOM
                                     message, and NVML's per-process figure
                                     (sampled all along, and at the OOM)
    limit_torch.py fits BATCH OUT    three steps at BATCH: whether they train

Everything written to OUT is read by the workload itself (PyTorch, and NVML
through ctypes), so that the suite checks cudatrace against it."""
import json
import sys
import threading
import time

import torch

from own_readings import nvml_process_bytes
from resnet_model import resnet50


def nvml_bytes():
    return sum(nvml_process_bytes().values())


class PeakSampler(threading.Thread):
    """NVML's per-process figure every 2 ms; its highest."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.running = 0, True

    def run(self):
        while self.running:
            self.peak = max(self.peak, nvml_bytes())
            time.sleep(0.002)


def train_steps(model, optimizer, batch, steps):
    for _ in range(steps):
        images = torch.randn(batch, 3, 224, 224, device="cuda")
        labels = torch.randint(0, 1000, (batch,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()


def main():
    mode, out = sys.argv[1], sys.argv[-1]
    result = {}
    if mode == "queries":
        free, total = torch.cuda.mem_get_info()
        result = {"free": free, "total": total, "total_memory": torch.cuda.get_device_properties(0).total_memory}
    else:
        torch.backends.cudnn.benchmark = False
        model = resnet50().cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        sampler = PeakSampler()
        sampler.start()
        if mode == "grow":
            batch, largest = 64, None
            while True:
                try:
                    train_steps(model, optimizer, batch, 1)
                    largest = batch
                    batch += 16
                except torch.OutOfMemoryError as error:
                    result["nvml_at_oom"] = nvml_bytes()
                    result["oom_message"] = str(error)
                    result["oom_batch"] = batch
                    break
            result["largest"] = largest
        else:
            batch = int(sys.argv[2])
            try:
                train_steps(model, optimizer, batch, 3)
                result["trained"] = True
            except torch.OutOfMemoryError as error:
                result["trained"] = False
                result["oom_message"] = str(error)
        sampler.running = False
        sampler.join()
        result["nvml_peak"] = max(sampler.peak, nvml_bytes())
    json.dump(result, open(out, "w"))


main()
