// The memory limit seen through a statically linked runtime (nvcc's
// default), and what a refused allocation leaves in its out-parameters.
//
//   limit_static BYTES
//
// Prints cudaMemGetInfo, cudaGetDeviceProperties' totalGlobalMem, what
// cudaMalloc of BYTES returns, and, for each driver allocation entry point,
// its result and its out-parameters (set to 0xdead beforehand) after a
// request of BYTES: run once untraced with more bytes than the card has,
// and once refused by the limit, the lines must be the same.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    size_t bytes = strtoull(argv[1], NULL, 0);
    cudaSetDevice(0);
    cudaFree(0);
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    printf("cudaMemGetInfo %zu %zu\n", free_bytes, total);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("totalGlobalMem %zu\n", prop.totalGlobalMem);
    void *p = NULL;
    cudaError_t malloc_status = cudaMalloc(&p, bytes);
    printf("cudaMalloc %d\n", (int)malloc_status);
    printf("cudaGetLastError %d\n", (int)cudaGetLastError());

    CUdeviceptr d = 0xdead;
    CUresult r = cuMemAlloc(&d, bytes);
    printf("cuMemAlloc_v2 %d out 0x%llx\n", (int)r, (unsigned long long)d);
    d = 0xdead;
    r = cuMemAllocAsync(&d, bytes, 0);
    printf("cuMemAllocAsync %d out 0x%llx\n", (int)r, (unsigned long long)d);
    d = 0xdead;
    size_t pitch = 0xdead, width = bytes / 4096;
    r = cuMemAllocPitch(&d, &pitch, width, 4096, 4);
    // The pitch against the width asked for (a multiple of 512 here), so that
    // runs asking different sizes compare.
    printf("cuMemAllocPitch_v2 %d out 0x%llx pitch %s%lld\n", (int)r, (unsigned long long)d,
           pitch == 0xdead ? "untouched " : "width+", pitch == 0xdead ? 0 : (long long)(pitch - width));
    CUmemAllocationProp vmm = {};
    vmm.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    vmm.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    vmm.location.id = 0;
    CUmemGenericAllocationHandle handle = 0xdead;
    r = cuMemCreate(&handle, bytes, &vmm, 0);
    printf("cuMemCreate %d out 0x%llx\n", (int)r, (unsigned long long)handle);
    CUDA_ARRAY3D_DESCRIPTOR array = {};
    array.Width = 16384;
    array.Height = 16384;
    array.Depth = bytes / (16384ull * 16384 * 16) + 1;
    array.Format = CU_AD_FORMAT_FLOAT;
    array.NumChannels = 4;
    CUarray handle_array = (CUarray)0xdead;
    r = cuArray3DCreate(&handle_array, &array);
    printf("cuArray3DCreate_v2 %d out %p\n", (int)r, (void *)handle_array);
    return 0;
}
