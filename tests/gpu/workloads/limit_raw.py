"""Memory no framework manages, under `cudatrace run --limit 4GiB`: a ctypes
cudaMalloc and a CuPy allocation, each first within the limit, then past it.
Writes what each call returned to argv[1]."""
import ctypes
import glob
import json
import os
import sys

GIB = 1 << 30


def runtime_library():
    """libcudart, as a program that loads it by hand would find it."""
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    import nvidia  # the runtime that pip's CUDA packages ship

    for path in glob.glob(os.path.join(os.path.dirname(nvidia.__path__[0]), "nvidia", "**", "libcudart.so*"),
                          recursive=True):
        return ctypes.CDLL(path)
    raise OSError("no libcudart")


result = {}
cudart = runtime_library()
first, second = ctypes.c_void_p(), ctypes.c_void_p()
result["ctypes_within"] = cudart.cudaMalloc(ctypes.byref(first), ctypes.c_size_t(3 * GIB))
result["ctypes_past"] = cudart.cudaMalloc(ctypes.byref(second), ctypes.c_size_t(2 * GIB))
result["ctypes_free"] = cudart.cudaFree(first)

import cupy  # noqa: E402

kept = cupy.cuda.runtime.malloc(3 * GIB)
result["cupy_within"] = "ok"
try:
    cupy.cuda.runtime.malloc(2 * GIB)
    result["cupy_past"] = "ok"
except cupy.cuda.runtime.CUDARuntimeError as error:
    result["cupy_past"] = str(error)
try:
    cupy.empty(2 * GIB, dtype=cupy.uint8)
    result["cupy_array_past"] = "ok"
except cupy.cuda.memory.OutOfMemoryError as error:
    result["cupy_array_past"] = type(error).__name__
cupy.cuda.runtime.free(kept)
json.dump(result, open(sys.argv[1], "w"))
