/*
 * Scenario z's loop over the fake CUDA runtime and driver (FAKE_CUDA_OUT):
 * cudaMallocAsync + cudaFreeAsync pairs 1 and 32 native frames deep, the
 * fastest of the repetitions a pair. The fake's entry points do little, so
 * on the GPU machine's CPU this shows what our hooks cost without the real
 * driver's work between them (hook_cost_parts.sh builds and runs it).
 *
 *   fake_hook_cost <pairs per repetition> <repetitions>
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream);
cudaError_t cudaSetDevice(int device);

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static uint64_t pairs_at(int depth, int pairs) {
    if (depth > 1) {
        uint64_t ns = pairs_at(depth - 1, pairs);
        __asm__ volatile("" ::: "memory"); /* no tail call: the frame stays */
        return ns;
    }
    uint64_t start = now();
    for (int i = 0; i < pairs; i++) {
        void *p;
        if (cudaMallocAsync(&p, 4096, 0) != 0 || cudaFreeAsync(p, 0) != 0) exit(2);
    }
    return now() - start;
}

int main(int argc, char **argv) {
    int pairs = argc > 1 ? atoi(argv[1]) : 200000, repetitions = argc > 2 ? atoi(argv[2]) : 5;
    cudaSetDevice(0);
    pairs_at(1, 2000);
    pairs_at(32, 2000);
    double best[2] = {1e18, 1e18};
    const int depths[2] = {1, 32};
    for (int r = 0; r < repetitions; r++)
        for (int d = 0; d < 2; d++) {
            double ns = (double)pairs_at(depths[d], pairs) / pairs;
            if (ns < best[d]) best[d] = ns;
        }
    printf("depth1_ns %.1f\ndepth32_ns %.1f\n", best[0], best[1]);
    return 0;
}
