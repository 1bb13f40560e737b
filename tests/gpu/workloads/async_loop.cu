// A tight stream-ordered allocation loop: block i is 4 to 32 KiB; every
// second block is freed at once, the rest at the end. Prints what it did,
// for the trace to be checked against.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

int main(int argc, char **argv) {
    const long iterations = argc > 1 ? atol(argv[1]) : 100000;
    cudaStream_t stream;
    if (cudaStreamCreate(&stream) != cudaSuccess) return 1;
    std::vector<void *> kept;
    long allocations = 0, frees = 0;
    for (long i = 0; i < iterations; i++) {
        void *p;
        size_t size = 4096u * (1u + (unsigned)(i * 7) % 8u);
        if (cudaMallocAsync(&p, size, stream) != cudaSuccess) return 2;
        allocations++;
        if (i % 2) {
            if (cudaFreeAsync(p, stream) != cudaSuccess) return 3;
            frees++;
        } else {
            kept.push_back(p);
        }
    }
    for (void *p : kept) {
        if (cudaFreeAsync(p, stream) != cudaSuccess) return 4;
        frees++;
    }
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 5;
    printf("async-loop allocations %ld frees %ld\n", allocations, frees);
    return 0;
}
