/*
 * Scenario z's loop (workloads/hook_cost_loop.h) over the fake CUDA runtime
 * and driver (FAKE_CUDA_OUT), on the default stream: the fake's entry
 * points do little, so on the GPU machine's CPU this shows what our hooks
 * cost without the real driver's work between them (hook_cost_parts.sh and
 * benches/hook_instructions.sh build and run it).
 *
 *   fake_hook_cost <pairs per repetition> <repetitions>
 */
#include <stddef.h>
#include <stdio.h>

typedef void *cudaStream_t;
int cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream);
int cudaFreeAsync(void *ptr, cudaStream_t stream);
int cudaSetDevice(int device);

#include "../workloads/hook_cost_loop.h"

int main(int argc, char **argv) {
    int pairs = argc > 1 ? atoi(argv[1]) : 200000, repetitions = argc > 2 ? atoi(argv[2]) : 5;
    cudaSetDevice(0);
    double best[2];
    fastest_pairs(pairs, repetitions, 0, best);
    printf("depth1_ns %.1f\ndepth32_ns %.1f\n", best[0], best[1]);
    return 0;
}
