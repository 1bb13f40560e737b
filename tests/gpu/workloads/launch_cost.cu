// Launches an empty kernel, each launch timed alone, in batches of 32 so
// that the launch queue never fills, and prints the median host time per
// launch in ns. Run plainly and traced, alternating: the difference is what
// the launch hook costs once a kernel has been launched before.
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
    printf("%llu\n", (unsigned long long)ns[launches / 2]);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
