// What the hooks add to a runtime allocation: cudaMallocAsync + cudaFreeAsync
// pairs on a stream of its own, called 1 and 32 native frames deep, in
// alternating repetitions (hook_cost_loop.h); prints for each depth the
// fastest repetition's mean ns per pair, and the same for cudaStreamQuery,
// a call no hook sees: it tells how fast this process's CPU and driver run,
// which differs from process to process by as much as half (the suite shows
// each process's pairs against it).
//
//   hook_cost <pairs per repetition> <repetitions>
#include <cuda_runtime.h>
#include <stdio.h>

#include "hook_cost_loop.h"

int main(int argc, char **argv) {
    int pairs = argc > 1 ? atoi(argv[1]) : 20000, repetitions = argc > 2 ? atoi(argv[2]) : 5;
    cudaStream_t stream;
    cudaSetDevice(0);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    double best[2];
    fastest_pairs(pairs, repetitions, stream, best);
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
