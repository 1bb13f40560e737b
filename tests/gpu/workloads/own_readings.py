"""What a workload reads of its own GPU memory just before it exits, to check
the report against: NVML's per-process usage (per device UUID) and each
device's used memory by cuMemGetInfo. Workloads call readings(); the numbers
are the workload's own, read with ctypes, so nothing here is cudatrace."""
import ctypes
import os


class _ProcessInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def nvml_process_bytes():
    """{uuid: bytes NVML says this process uses on that device}."""
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    if nvml.nvmlInit_v2() != 0:
        return {}
    count = ctypes.c_uint()
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    found = {}
    for index in range(count.value):
        handle = ctypes.c_void_p()
        nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
        uuid = ctypes.create_string_buffer(96)
        nvml.nvmlDeviceGetUUID(handle, uuid, 96)
        infos = (_ProcessInfo * 64)()
        n = ctypes.c_uint(64)
        if nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(n), infos) != 0:
            continue
        for info in infos[: n.value]:
            if info.pid == os.getpid():
                found[uuid.value.decode()] = info.usedGpuMemory
    return found


def device_used_bytes(ordinal=0):
    """total - free of device `ordinal`, by cuMemGetInfo_v2 on its primary context."""
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuInit(0)
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    cuda.cuDeviceGet(ctypes.byref(device), ordinal)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device)
    cuda.cuCtxPushCurrent_v2(ctx)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    status = cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    popped = ctypes.c_void_p()
    cuda.cuCtxPopCurrent_v2(ctypes.byref(popped))
    cuda.cuDevicePrimaryCtxRelease_v2(device)
    return total.value - free.value if status == 0 else None


def readings(ordinal=0):
    return {"pid": os.getpid(), "nvml": nvml_process_bytes(), "device_used": device_used_bytes(ordinal)}
