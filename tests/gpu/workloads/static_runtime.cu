// Built by nvcc with its default, statically linked runtime: the runtime's
// entry points cannot be interposed, so only the driver hooks see it.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(float *p, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] = 1.0f;
}

int main() {
    const size_t sizes[3] = {1 << 20, 3 << 20, 5 << 20};
    float *buffers[3];
    for (int i = 0; i < 3; i++) {
        if (cudaMalloc(&buffers[i], sizes[i]) != cudaSuccess) return 1;
        printf("alloc %p %zu\n", (void *)buffers[i], sizes[i]);
    }
    fill<<<(sizes[2] / 4 + 255) / 256, 256>>>(buffers[2], sizes[2] / 4);
    void *async_block;
    if (cudaMallocAsync(&async_block, 1 << 20, 0) != cudaSuccess) return 2;
    printf("async %p %d\n", async_block, 1 << 20);
    if (cudaFreeAsync(async_block, 0) != cudaSuccess) return 3;
    if (cudaDeviceSynchronize() != cudaSuccess) return 4;
    for (int i = 0; i < 2; i++) {
        if (cudaFree(buffers[i]) != cudaSuccess) return 5;
        printf("free %p\n", (void *)buffers[i]);
    }
    return 0;
}
