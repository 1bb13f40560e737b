"""A cudaMalloc through ctypes from a named Python function, kept live."""
import ctypes
import ctypes.util
import glob
import os

import torch  # noqa: F401  (its wheel carries libcudart)

candidates = glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
cudart = ctypes.CDLL(candidates[0] if candidates else "libcudart.so")


def reserve_workspace_for_audit(size):
    block = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(block), ctypes.c_size_t(size)) == 0
    return block


held = reserve_workspace_for_audit(48 << 20)
