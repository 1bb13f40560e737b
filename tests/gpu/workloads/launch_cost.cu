// What a launch costs the host, run plainly and traced, alternating: the
// difference is what the launch hook costs once a kernel has been launched
// before. Two figures, in ns:
//  - the median of real launches of an empty kernel, each timed alone, in
//    batches of 32 so that the launch queue never fills;
//  - the mean of a million cuLaunchKernel calls with an empty grid, which the
//    driver refuses at once: the same hook path with far less noise around it.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__global__ void empty(void) {}

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 100000;
    uint64_t *ns = (uint64_t *)malloc(sizeof(uint64_t) * launches);
    empty<<<1, 1>>>();
    cudaDeviceSynchronize();
    for (int done = 0; done < launches; done += 32) {
        for (int i = done; i < done + 32 && i < launches; i++) {
            uint64_t start = now();
            empty<<<1, 1>>>();
            ns[i] = now() - start;
        }
        cudaDeviceSynchronize();
    }
    qsort(ns, launches, sizeof(uint64_t), by_value);
    CUfunction function;
    if (cudaGetFuncBySymbol((cudaFunction_t *)&function, (const void *)empty) != cudaSuccess) return 2;
    const int refused = 1000000;
    uint64_t start = now();
    for (int i = 0; i < refused; i++)
        if (cuLaunchKernel(function, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_ERROR_INVALID_VALUE) return 3;
    double refused_ns = (double)(now() - start) / refused;
    printf("real_median_ns %llu\nrefused_mean_ns %.2f\n", (unsigned long long)ns[launches / 2], refused_ns);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
