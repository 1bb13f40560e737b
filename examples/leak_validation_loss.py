"""A leak that grows: a validation loop that sums its losses with autograd on.

The loop adds each batch's `loss` to a running total, where `loss.item()`
was meant, and runs without `torch.no_grad()`: every batch's loss keeps its
autograd graph, and the graph keeps the activations it saved for a backward
pass that never comes, so each batch keeps about 768 MiB more on the GPU. With
few batches the job ends normally; with many, it runs out of memory. Under
cudatrace:

    cudatrace run -o short.trace -- python examples/leak_validation_loss.py --batches 2
    cudatrace run -o long.trace -- python examples/leak_validation_loss.py --batches 8
    cudatrace diff short.trace long.trace
    cudatrace run -o oom.trace -- python examples/leak_validation_loss.py --batches 100000
    cudatrace report oom.trace

`--fixed` adds `loss.item()` instead, and memory stays flat.
Without PyTorch or without a GPU it says so in one line and exits with 2.
"""
import argparse
import sys

try:
    import torch
    import torch.nn as nn
except (ImportError, OSError) as error:
    sys.stderr.write(f"leak_validation_loss.py: cannot import PyTorch ({error}); "
                     "it needs PyTorch and a CUDA GPU (examples/no-gpu-demo.sh shows a report without either)\n")
    sys.exit(2)

WIDTH = 8192


def validate(model, batches, fixed):
    total = 0.0
    for batch in range(batches):
        inputs = torch.randn(WIDTH, WIDTH, device="cuda")
        loss = model(inputs).square().mean()
        total = total + (loss.item() if fixed else loss)  # the leak: the loss, its graph and activations
        print(f"batch {batch}: {torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated", flush=True)
    return float(total)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--fixed", action="store_true", help="add loss.item(), not the loss")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.stderr.write("leak_validation_loss.py: no CUDA GPU is available to PyTorch; "
                         "it needs a CUDA GPU (examples/no-gpu-demo.sh shows a report without one)\n")
        sys.exit(2)
    model = nn.Sequential(
        nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1)
    ).cuda()
    try:
        print(f"validation loss {validate(model, args.batches, args.fixed):.4f}")
    except torch.OutOfMemoryError as error:
        print(f"leak_validation_loss.py: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
