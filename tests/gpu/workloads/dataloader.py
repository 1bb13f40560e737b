"""Training with a DataLoader of two worker processes and pinned memory."""
import json
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __len__(self):
        return 1024

    def __getitem__(self, index):
        return torch.randn(1024), torch.randint(0, 10, ())


def remember_worker(_worker_id):
    with open(sys.argv[1] + ".workers", "a") as f:
        f.write(f"{os.getpid()}\n")


def main():
    model = torch.nn.Linear(1024, 10).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Synthetic(), batch_size=64, num_workers=2, pin_memory=True, worker_init_fn=remember_worker)
    steps = 0
    for _epoch in range(2):
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
    torch.cuda.synchronize()
    workers = sorted({int(line) for line in open(sys.argv[1] + ".workers")})
    json.dump({"pid": os.getpid(), "steps": steps, "workers": workers}, open(sys.argv[1], "w"))


if __name__ == "__main__":
    main()
