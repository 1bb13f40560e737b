// Launches an empty kernel N times in batches and prints the host time per
// launch in ns: run plainly, traced, and traced with --no-launch-hooks, the
// difference is what the launch hooks cost.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__global__ void empty(void) {}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 200000;
    empty<<<1, 1>>>();
    cudaDeviceSynchronize();
    double host = 0;
    for (int done = 0; done < launches; done += 1000) {
        double start = now();
        for (int i = 0; i < 1000; i++) empty<<<1, 1>>>();
        host += now() - start;
        cudaDeviceSynchronize();
    }
    printf("%.2f\n", host / launches);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
