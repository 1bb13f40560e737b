// The memory limit seen through a statically linked runtime (nvcc's
// default), and what a refused cuMemAlloc_v2 leaves in its out-parameter.
//
//   limit_static BYTES
//
// Prints cudaMemGetInfo, cudaGetDeviceProperties' totalGlobalMem, what
// cudaMalloc of BYTES returns, and cuMemAlloc_v2 of BYTES into a pointer
// set to 0xdead beforehand: its result and the pointer after.
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
    CUresult alloc_status = cuMemAlloc(&d, bytes);
    printf("cuMemAlloc_v2 %d out 0x%llx\n", (int)alloc_status, (unsigned long long)d);
    return 0;
}
