// Scenario z's loop, shared by hook_cost.cu (the real CUDA runtime) and
// dev/fake_hook_cost.c (the fake one): cudaMallocAsync +
// cudaFreeAsync pairs on `stream`, called 1 and 32 native frames deep in
// alternating repetitions. The includer declares cudaStream_t,
// cudaMallocAsync and cudaFreeAsync first (from cuda_runtime.h, or by hand).
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// The loop, `depth` native frames below its caller; ns it took.
__attribute__((noinline)) static uint64_t pairs_at(int depth, int pairs, cudaStream_t stream) {
    if (depth > 1) {
        uint64_t ns = pairs_at(depth - 1, pairs, stream);
        __asm__ volatile("" ::: "memory");  // no tail call: the frame stays
        return ns;
    }
    uint64_t start = now();
    for (int i = 0; i < pairs; i++) {
        void *p;
        if (cudaMallocAsync(&p, 4096, stream) != 0 || cudaFreeAsync(p, stream) != 0) exit(2);
    }
    return now() - start;
}

// After a warm-up at each depth, the fastest repetition's mean ns per pair
// at depth 1 (best[0]) and 32 (best[1]): the repetition least disturbed by
// anything else.
static void fastest_pairs(int pairs, int repetitions, cudaStream_t stream, double best[2]) {
    const int depths[2] = {1, 32};
    pairs_at(1, 2000, stream);
    pairs_at(32, 2000, stream);
    best[0] = best[1] = 1e18;
    for (int r = 0; r < repetitions; r++)
        for (int d = 0; d < 2; d++) {
            double ns = (double)pairs_at(depths[d], pairs, stream) / pairs;
            if (ns < best[d]) best[d] = ns;
        }
}
