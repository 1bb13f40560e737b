"""Asks PyTorch for far more than the GPU has; writes the device total to argv[1]."""
import json
import sys

import torch

free, total = torch.cuda.mem_get_info()
request = 200 << 30
try:
    torch.empty(request, dtype=torch.uint8, device="cuda")
    raised = False
except torch.OutOfMemoryError:
    raised = True
json.dump({"total": total, "request": request, "raised": raised}, open(sys.argv[1], "w"))
