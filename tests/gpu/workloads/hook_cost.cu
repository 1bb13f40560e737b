// What the hooks add to a runtime allocation: cudaMallocAsync + cudaFreeAsync
// pairs on a stream of its own, called 1 and 32 native frames deep, in
// alternating repetitions; prints for each depth the fastest repetition's
// mean ns per pair (the repetition least disturbed by anything else), and
// the same for cudaStreamQuery, a call no hook sees: it tells how fast this
// process's CPU and driver run, which differs from process to process by
// as much as half (the suite shows each process's pairs against it).
//
//   hook_cost <pairs per repetition> <repetitions>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static cudaStream_t stream;

// The loop, `depth` native frames below its caller.
__attribute__((noinline)) static uint64_t pairs_at(int depth, int pairs) {
    if (depth > 1) {
        uint64_t ns = pairs_at(depth - 1, pairs);
        __asm__ volatile("" ::: "memory");  // no tail call: the frame stays
        return ns;
    }
    uint64_t start = now();
    for (int i = 0; i < pairs; i++) {
        void *p;
        if (cudaMallocAsync(&p, 4096, stream) != cudaSuccess || cudaFreeAsync(p, stream) != cudaSuccess) exit(2);
    }
    return now() - start;
}

int main(int argc, char **argv) {
    int pairs = argc > 1 ? atoi(argv[1]) : 20000, repetitions = argc > 2 ? atoi(argv[2]) : 5;
    cudaSetDevice(0);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    pairs_at(1, 2000);
    pairs_at(32, 2000);
    double best[2] = {1e18, 1e18};
    const int depths[2] = {1, 32};
    for (int r = 0; r < repetitions; r++)
        for (int d = 0; d < 2; d++) {
            double ns = (double)pairs_at(depths[d], pairs) / pairs;
            if (ns < best[d]) best[d] = ns;
        }
    cudaStreamSynchronize(stream);
    double best_query = 1e18;
    for (int r = 0; r < repetitions; r++) {
        uint64_t start = now();
        for (int i = 0; i < pairs; i++) cudaStreamQuery(stream);
        double ns = (double)(now() - start) / pairs;
        if (ns < best_query) best_query = ns;
    }
    printf("depth1_ns %.1f\ndepth32_ns %.1f\nquery_ns %.1f\n", best[0], best[1], best_query);
    return 0;
}
