"""A launcher that starts two CUDA processes (one GPU is enough). Each
leaves a raw 48+rank MiB cuMemAlloc_v2 live and reports its address."""
import ctypes
import json
import os
import subprocess
import sys

if len(sys.argv) > 2 and sys.argv[2] == "worker":
    import torch

    rank = int(sys.argv[3])
    tensor = torch.ones((4 + rank) << 18, device="cuda")
    pointer = ctypes.c_uint64()
    size = (48 + rank) << 20
    assert ctypes.CDLL("libcuda.so.1").cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)) == 0
    torch.cuda.synchronize()
    print(json.dumps({"pid": os.getpid(), "rank": rank, "addr": pointer.value, "size": size}), flush=True)
    sys.exit(0)

workers = [
    subprocess.Popen([sys.executable, __file__, sys.argv[1], "worker", str(rank)], stdout=subprocess.PIPE, text=True)
    for rank in range(2)
]
results = [json.loads(worker.communicate()[0].strip().splitlines()[-1]) for worker in workers]
json.dump({"launcher": os.getpid(), "workers": results}, open(sys.argv[1], "w"))
