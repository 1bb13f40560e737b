/*
 * A fake CUDA runtime, built both as libcudart.so.13 and as a static archive.
 *
 * It reaches the driver the way libcudart 13 does: dlopen("libcuda.so.1"),
 * dlsym(handle, "cuGetProcAddress_v2"), then asks that for cuGetProcAddress
 * itself at 11030 (the v1 ABI) and at 12000 (v2), and gets every other entry
 * point through those at the versions the real runtime asks for, with the
 * per-thread-default-stream flag for the _ptsz entry points.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int cudaError_t;
typedef unsigned long long CUdeviceptr;
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;
typedef void *cudaArray_t;
typedef struct { void *ptr; size_t pitch, xsize, ysize; } cudaPitchedPtr;
typedef struct { size_t width, height, depth; } cudaExtent;
typedef struct { int x, y, z, w, f; } cudaChannelFormatDesc;
typedef struct { char reserved[64]; } cudaIpcMemHandle_t;
typedef struct { size_t Width, Height; int Format; unsigned NumChannels; } CUDA_ARRAY_DESCRIPTOR;
typedef struct { size_t Width, Height, Depth; int Format; unsigned NumChannels, Flags; } CUDA_ARRAY3D_DESCRIPTOR;

typedef CUresult (*GetProcV1)(const char *, void **, int, unsigned long long);
typedef CUresult (*GetProcV2)(const char *, void **, int, unsigned long long, int *);

static struct {
    GetProcV1 get_proc_v1;
    GetProcV2 get_proc_v2;
    CUresult (*init)(unsigned);
    CUresult (*ctx_set_current)(void *);
    CUresult (*mem_get_info)(size_t *, size_t *);
    CUresult (*device_total_mem)(size_t *, int);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*mem_alloc_managed)(CUdeviceptr *, size_t, unsigned);
    CUresult (*mem_alloc_async[2])(CUdeviceptr *, size_t, void *);
    CUresult (*mem_alloc_from_pool_async[2])(CUdeviceptr *, size_t, void *, void *);
    CUresult (*mem_free_async[2])(CUdeviceptr, void *);
    CUresult (*mem_alloc_host)(void **, size_t);
    CUresult (*mem_host_alloc)(void **, size_t, unsigned);
    CUresult (*mem_free_host)(void *);
    CUresult (*mem_host_register)(void *, size_t, unsigned);
    CUresult (*mem_host_unregister)(void *);
    CUresult (*array_create)(void **, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*array_3d_create)(void **, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*array_destroy)(void *);
    CUresult (*ipc_open)(CUdeviceptr *, cudaIpcMemHandle_t, unsigned);
    CUresult (*ipc_close)(CUdeviceptr);
} driver;

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *entry(const char *name, int version, unsigned long long flags) {
    void *fn = NULL;
    int status = -1;
    if (driver.get_proc_v2(name, &fn, version, flags, &status) != 0 || !fn) {
        fprintf(stderr, "fake runtime: no driver entry point %s@%d\n", name, version);
        abort();
    }
    return fn;
}

static void load_driver(void) {
    void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) { fprintf(stderr, "fake runtime: %s\n", dlerror()); abort(); }
    GetProcV2 bootstrap = (GetProcV2)dlsym(handle, "cuGetProcAddress_v2");
    if (!bootstrap) { fprintf(stderr, "fake runtime: no cuGetProcAddress_v2\n"); abort(); }
    int status;
    bootstrap("cuGetProcAddress", (void **)&driver.get_proc_v1, 11030, 0, &status);
    bootstrap("cuGetProcAddress", (void **)&driver.get_proc_v2, 12000, 0, &status);
    if (!driver.get_proc_v1 || !driver.get_proc_v2) abort();
    driver.init = entry("cuInit", 2000, 0);
    driver.ctx_set_current = entry("cuCtxSetCurrent", 4000, 0);
    /* Like libcudart, some entry points come through the v1 lookup. */
    if (driver.get_proc_v1("cuMemGetInfo", (void **)&driver.mem_get_info, 3020, 0) != 0) abort();
    driver.mem_alloc = entry("cuMemAlloc", 3020, 0);
    driver.mem_alloc_pitch = entry("cuMemAllocPitch", 3020, 0);
    driver.mem_free = entry("cuMemFree", 3020, 0);
    driver.mem_alloc_managed = entry("cuMemAllocManaged", 6000, 0);
    for (int per_thread = 0; per_thread < 2; per_thread++) {
        unsigned long long flags = per_thread ? 2 : 0;
        driver.mem_alloc_async[per_thread] = entry("cuMemAllocAsync", 11020, flags);
        driver.mem_alloc_from_pool_async[per_thread] = entry("cuMemAllocFromPoolAsync", 11020, flags);
        driver.mem_free_async[per_thread] = entry("cuMemFreeAsync", 11020, flags);
    }
    driver.mem_alloc_host = entry("cuMemAllocHost", 3020, 0);
    driver.mem_host_alloc = entry("cuMemHostAlloc", 2020, 0);
    driver.mem_free_host = entry("cuMemFreeHost", 2000, 0);
    driver.mem_host_register = entry("cuMemHostRegister", 6050, 0);
    driver.mem_host_unregister = entry("cuMemHostUnregister", 4000, 0);
    driver.array_create = entry("cuArrayCreate", 3020, 0);
    driver.array_3d_create = entry("cuArray3DCreate", 3020, 0);
    driver.array_destroy = entry("cuArrayDestroy", 2000, 0);
    driver.device_total_mem = entry("cuDeviceTotalMem", 3020, 0);
    driver.ipc_open = entry("cuIpcOpenMemHandle", 11000, 0);
    driver.ipc_close = entry("cuIpcCloseMemHandle", 4010, 0);
    driver.init(0);
}

#define READY() pthread_once(&once, load_driver)

/* cudaErrorMemoryAllocation is 2, like CUDA_ERROR_OUT_OF_MEMORY; others pass through. */
static cudaError_t status(CUresult result) { return result; }

cudaError_t cudaSetDevice(int device) { READY(); return status(driver.ctx_set_current((void *)(intptr_t)(device + 1))); }
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) { READY(); return status(driver.mem_get_info(free_bytes, total)); }

/* The real cudaDeviceProp is over 1 KiB; the fake fills its name and, at
 * the real offset (after name[256], uuid[16], luid[8] and one unsigned),
 * totalGlobalMem, which the runtime asks the driver for. */
cudaError_t cudaGetDeviceProperties_v2(void *prop, int device) {
    READY();
    memset(prop, 0, 1032);
    snprintf((char *)prop, 256, "Fake GPU %d", device);
    return status(driver.device_total_mem((size_t *)((char *)prop + 288), device));
}
cudaError_t cudaGetDeviceProperties(void *prop, int device) { return cudaGetDeviceProperties_v2(prop, device); }

cudaError_t cudaMalloc(void **ptr, size_t size) {
    READY();
    return status(driver.mem_alloc((CUdeviceptr *)ptr, size));
}
cudaError_t cudaFree(void *ptr) {
    READY();
    return ptr ? status(driver.mem_free((CUdeviceptr)ptr)) : 0;
}
cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned flags) {
    READY();
    return status(driver.mem_alloc_managed((CUdeviceptr *)ptr, size, flags));
}
cudaError_t cudaMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height) {
    READY();
    return status(driver.mem_alloc_pitch((CUdeviceptr *)ptr, pitch, width, height, 4));
}
cudaError_t cudaMalloc3D(cudaPitchedPtr *pitched, cudaExtent extent) {
    READY();
    CUdeviceptr ptr;
    size_t pitch;
    CUresult result = driver.mem_alloc_pitch(&ptr, &pitch, extent.width, extent.height * extent.depth, 4);
    if (result == 0) *pitched = (cudaPitchedPtr){ (void *)ptr, pitch, extent.width, extent.height };
    return status(result);
}
cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream) {
    READY();
    return status(driver.mem_alloc_async[0]((CUdeviceptr *)ptr, size, stream));
}
cudaError_t cudaMallocAsync_ptsz(void **ptr, size_t size, cudaStream_t stream) {
    READY();
    return status(driver.mem_alloc_async[1]((CUdeviceptr *)ptr, size, stream));
}
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
    READY();
    return status(driver.mem_alloc_from_pool_async[0]((CUdeviceptr *)ptr, size, pool, stream));
}
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
    READY();
    return status(driver.mem_alloc_from_pool_async[1]((CUdeviceptr *)ptr, size, pool, stream));
}
cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream) {
    READY();
    return status(driver.mem_free_async[0]((CUdeviceptr)ptr, stream));
}
cudaError_t cudaFreeAsync_ptsz(void *ptr, cudaStream_t stream) {
    READY();
    return status(driver.mem_free_async[1]((CUdeviceptr)ptr, stream));
}
cudaError_t cudaMallocHost(void **ptr, size_t size) { READY(); return status(driver.mem_alloc_host(ptr, size)); }
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned flags) { READY(); return status(driver.mem_host_alloc(ptr, size, flags)); }
cudaError_t cudaFreeHost(void *ptr) { READY(); return status(driver.mem_free_host(ptr)); }
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned flags) { READY(); return status(driver.mem_host_register(ptr, size, flags)); }
cudaError_t cudaHostUnregister(void *ptr) { READY(); return status(driver.mem_host_unregister(ptr)); }

/* Channel bits to a driver array format: 32-bit float or 8/16/32-bit unsigned. */
static void array_format(const cudaChannelFormatDesc *desc, int *format, unsigned *channels) {
    *channels = (desc->x > 0) + (desc->y > 0) + (desc->z > 0) + (desc->w > 0);
    if (desc->f == 2) *format = 0x20;
    else *format = desc->x == 8 ? 0x01 : (desc->x == 16 ? 0x02 : 0x03);
}
cudaError_t cudaMallocArray(cudaArray_t *array, const cudaChannelFormatDesc *desc, size_t width, size_t height, unsigned flags) {
    (void)flags;
    READY();
    CUDA_ARRAY_DESCRIPTOR d = { width, height, 0, 0 };
    array_format(desc, &d.Format, &d.NumChannels);
    return status(driver.array_create(array, &d));
}
cudaError_t cudaMalloc3DArray(cudaArray_t *array, const cudaChannelFormatDesc *desc, cudaExtent extent, unsigned flags) {
    READY();
    CUDA_ARRAY3D_DESCRIPTOR d = { extent.width, extent.height, extent.depth, 0, 0, flags };
    array_format(desc, &d.Format, &d.NumChannels);
    return status(driver.array_3d_create(array, &d));
}
cudaError_t cudaFreeArray(cudaArray_t array) { READY(); return status(driver.array_destroy(array)); }
cudaError_t cudaIpcOpenMemHandle(void **ptr, cudaIpcMemHandle_t handle, unsigned flags) {
    READY();
    return status(driver.ipc_open((CUdeviceptr *)ptr, handle, flags));
}
cudaError_t cudaIpcCloseMemHandle(void *ptr) { READY(); return status(driver.ipc_close((CUdeviceptr)ptr)); }

/* What PyTorch uses to reach the VMM API. */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version, unsigned long long flags, int *driver_status) {
    READY();
    return driver.get_proc_v2(symbol, fn, (int)version, flags, driver_status) == 0 ? 0 : 500;
}
