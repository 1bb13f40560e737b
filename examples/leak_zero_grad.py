"""A leak to find with cudatrace: training steps that never clear the gradients.

Five ResNet-50 training steps whose optimizer never calls `zero_grad`: every
parameter's gradient stays allocated after each step. Run it under cudatrace
and the report lists the tensors live at exit by call site, the gradients'
among them:

    cudatrace run -o leak.trace -- python examples/leak_zero_grad.py
    cudatrace report leak.trace

The process ends at once after training (`os._exit`), so that what training
left allocated is what is live at exit, as in a snapshot taken at the end of
training. `--pytorch-snapshot PATH` also records PyTorch's own memory
history, from before the first allocation, and writes its snapshot at the
end, so that the two can be compared (`tests/gpu` does). `--fixed` clears
the gradients. Without PyTorch or without a GPU it says so in one line and
exits with 2.
"""
import argparse
import json
import os
import pickle
import sys

try:
    import torch
    import torch.nn as nn
except (ImportError, OSError) as error:
    sys.stderr.write(f"leak_zero_grad.py: cannot import PyTorch ({error}); "
                     "it needs PyTorch and a CUDA GPU (examples/no-gpu-demo.sh shows a report without either)\n")
    sys.exit(2)


def resnet50():
    """torchvision's ResNet-50 when it is installed, else a smaller stand-in."""
    try:
        from torchvision import models

        return models.resnet50()
    except ImportError:
        return nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
            nn.Conv2d(64, 256, 3, 2, 1, bias=False), nn.BatchNorm2d(256), nn.ReLU(inplace=True),
            nn.Conv2d(256, 512, 3, 2, 1, bias=False), nn.BatchNorm2d(512), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--fixed", action="store_true", help="clear the gradients after each step")
    parser.add_argument("--pytorch-snapshot", metavar="PATH", help="record PyTorch's history and write its snapshot")
    parser.add_argument("--facts", metavar="PATH", help="write the gradients' blocks as JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.stderr.write("leak_zero_grad.py: no CUDA GPU is available to PyTorch; "
                         "it needs a CUDA GPU (examples/no-gpu-demo.sh shows a report without one)\n")
        sys.exit(2)
    if args.pytorch_snapshot:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    device = "cuda:0"
    model = resnet50().to(device)
    inputs = torch.randn(32, 3, 224, 224, device=device)
    labels = torch.randint(0, 1000, (32,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(args.steps):
        loss_fn(model(inputs), labels).backward()  # the gradients are allocated here
        optimizer.step()
        if args.fixed:
            optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if args.facts:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        with open(args.facts, "w") as out:
            json.dump({"gradients": len(grads),
                       "gradient_bytes": sum(g.untyped_storage().nbytes() for g in grads),
                       "gradient_addresses": [g.untyped_storage().data_ptr() for g in grads]}, out)
    if args.pytorch_snapshot:
        with open(args.pytorch_snapshot, "wb") as out:
            pickle.dump(torch.cuda.memory._snapshot(), out)
    # End here, with what training left allocated, as the seed's snapshot at
    # the end of training sees it: a normal return would free the model, its
    # gradients and the optimizer's state in Python's teardown, and nothing
    # would be live at exit. (With --pytorch-snapshot, nothing may change
    # after the snapshot either.)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
