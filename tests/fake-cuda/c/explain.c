/*
 * Every category of driver memory, once each, for `cudatrace report` to
 * explain: a context made current, a heap limit raised, a module loaded,
 * two kernels launched and a third loaded by asking about it, allocations by this program and by two libraries
 * (one calling the other), a stream-ordered allocation from a pool, and a
 * graph memory node. It then sleeps so that NVML (the fake one) is read
 * with everything in place, and prints what it allocated.
 *
 * `explain spike`: a context, 8 MiB kept while NVML reads the process,
 * then 64 MiB allocated and freed between two readings, and the 8 MiB
 * freed after the last one: the footprint's peak falls between readings,
 * and nothing is live at exit.
 *
 * `explain replicated`: one kernel launched on device 0, then, by the same
 * handle, on device 1 (as a model replicated on two GPUs runs the same
 * kernels on both): it loads into each device, and each load is measured.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
#include "cuda_types.h"
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSetLimit(int, size_t);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuFuncGetAttribute(int *, int, CUfunction);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                        void **, void **);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, void *);
CUresult cuGraphAddMemAllocNode(void **, void *, const void *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *);
int cudaMalloc(void **, size_t);
int owner_outer_allocate(size_t, size_t, void **);

static void check(const char *what, int status) {
    if (status) {
        printf("status %s %d\n", what, status);
        exit(10);
    }
}

static void launch(CUfunction f) { check("cuLaunchKernel", cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL)); }

int cudaFree(void *);

static int spike(void) {
    void *kept, *spiked;
    check("cudaMalloc", cudaMalloc(&kept, 8 << 20));
    usleep(250000);
    check("cudaMalloc", cudaMalloc(&spiked, 64 << 20));
    check("cudaFree", cudaFree(spiked));
    usleep(250000);
    check("cudaFree", cudaFree(kept));
    printf("spiked %p kept %p\n", spiked, kept);
    return 0;
}

static int replicated(void) {
    CUmodule module;
    CUfunction kernel;
    CUcontext second;
    check("cuModuleLoadData", cuModuleLoadData(&module, "fatbin"));
    check("cuModuleGetFunction", cuModuleGetFunction(&kernel, module, "shared"));
    launch(kernel);
    check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&second, 1));
    check("cuCtxSetCurrent", cuCtxSetCurrent(second));
    usleep(250000);
    launch(kernel);
    launch(kernel);
    usleep(450000);
    printf("launched %p on devices 0 and 1\n", kernel);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUcontext ctx;
    check("cuInit", cuInit(0));
    check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, 0));
    check("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
    /* NVML reads the process with its context alone, to check the context's figure. */
    usleep(250000);
    if (argc > 1 && !strcmp(argv[1], "spike")) return spike();
    if (argc > 1 && !strcmp(argv[1], "replicated")) return replicated();
    check("cuCtxSetLimit", cuCtxSetLimit(2, 16 << 20));
    CUmodule module;
    check("cuModuleLoadData", cuModuleLoadData(&module, "fatbin"));
    CUfunction first, second;
    check("cuModuleGetFunction", cuModuleGetFunction(&first, module, "first"));
    check("cuModuleGetFunction", cuModuleGetFunction(&second, module, "second"));
    launch(first);
    launch(first);
    launch(second);
    CUfunction third;
    int threads;
    check("cuModuleGetFunction", cuModuleGetFunction(&third, module, "third"));
    check("cuFuncGetAttribute", cuFuncGetAttribute(&threads, 0, third));
    void *by_libraries[2], *own;
    check("owner_outer_allocate", owner_outer_allocate(1 << 20, 2 << 20, by_libraries));
    check("cudaMalloc", cudaMalloc(&own, 4 << 20));
    CUdeviceptr pooled;
    check("cuMemAllocAsync", cuMemAllocAsync(&pooled, 3 << 20, NULL));
    CUDA_MEM_ALLOC_NODE_PARAMS node;
    memset(&node, 0, sizeof node);
    node.poolProps.location = (CUmemLocation){ 1, 0 };
    node.bytesize = 4 << 20;
    void *graph_node;
    check("cuGraphAddMemAllocNode", cuGraphAddMemAllocNode(&graph_node, (void *)0x6a, NULL, 0, &node));
    /* Past the tracer's rate limit, a launch takes a reading of the pools and graphs. */
    usleep(120000);
    launch(second);
    usleep(450000);
    printf("allocated %p %p %p 0x%llx 0x%llx\n", by_libraries[0], by_libraries[1], own,
           (unsigned long long)pooled, (unsigned long long)node.dptr);
    return 0;
}
