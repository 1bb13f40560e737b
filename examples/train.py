"""A small PyTorch training job to trace with cudatrace (needs PyTorch and a CUDA GPU).

A small convolutional network learns to classify random 32x32 images into
ten classes for a few steps with Adam, on the GPU:

    cudatrace run -o train.trace -- python3 examples/train.py
    cudatrace report train.trace

The report shows the CUDA context, the kernels PyTorch loads, its caching
allocator's segments and the tensors in them (weights, Adam's state,
activations, gradients) by the line of this file that made them.
Without PyTorch or without a GPU it says so in one line and exits with 2.
"""
import argparse
import sys

try:
    import torch
    import torch.nn as nn
except (ImportError, OSError) as error:
    sys.stderr.write(f"train.py: cannot import PyTorch ({error}); it needs PyTorch and a CUDA GPU "
                     "(examples/no-gpu-demo.sh shows a report without either)\n")
    sys.exit(2)


def model():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(128, 10),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.stderr.write("train.py: no CUDA GPU is available to PyTorch; it needs a CUDA GPU "
                         "(examples/no-gpu-demo.sh shows a report without one)\n")
        sys.exit(2)
    device = torch.device("cuda")
    torch.manual_seed(0)
    net = model().to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    images = torch.randn(args.batch, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (args.batch,), device=device)
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(net(images), labels)
        loss.backward()
        optimizer.step()
        if step % 5 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {loss.item():.4f}")
    torch.cuda.synchronize()
    print(f"peak memory allocated by PyTorch: {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
