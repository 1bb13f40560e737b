"""Memory PyTorch never sees: a raw cuMemAlloc_v2 through ctypes and a CuPy
allocation, next to a PyTorch tensor. Writes addresses to argv[1]."""
import ctypes
import json
import sys

import torch

tensor = torch.ones(1 << 20, device="cuda")
allocated_before = torch.cuda.memory_allocated()

libcuda = ctypes.CDLL("libcuda.so.1")
pointer = ctypes.c_uint64()
status = libcuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(64 << 20))
assert status == 0, status

result = {"ctypes": {"addr": pointer.value, "size": 64 << 20, "status": status}}
try:
    import cupy

    cupy_pointer = cupy.cuda.runtime.malloc(32 << 20)
    result["cupy"] = {"addr": cupy_pointer, "size": 32 << 20}
except Exception as error:  # CuPy missing or broken: reported, not fatal
    result["cupy_error"] = repr(error)
result["torch_allocated_unchanged"] = torch.cuda.memory_allocated() == allocated_before
result["tensor"] = {"addr": tensor.data_ptr()}
json.dump(result, open(sys.argv[1], "w"))
