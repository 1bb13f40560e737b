/*
 * Times cuMemAlloc_v2 + cuMemFree_v2 pairs, and launches of a kernel that
 * has been launched before, one call at a time, and prints the median of
 * each, and the driver calls the pairs made (with the fake driver's cost
 * model, FAKE_CUDA_CALL_NS makes each cost that long). Run once plainly and
 * once under the tracer; the difference is what the hooks add.
 *
 *   bench_calls <pairs>
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned);
int cuMemAlloc_v2(CUdeviceptr *, size_t);
int cuMemFree_v2(CUdeviceptr);
int cuModuleLoadData(void **, const void *);
int cuModuleGetFunction(void **, void *, const char *);
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                   void **);
unsigned long long fakeCudaCallCount(void);

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
    int pairs = argc > 1 ? atoi(argv[1]) : 100000;
    uint64_t *alloc_ns = malloc(sizeof(uint64_t) * pairs), *free_ns = malloc(sizeof(uint64_t) * pairs);
    cuInit(0);
    unsigned long long calls_before = fakeCudaCallCount();
    for (int i = 0; i < pairs; i++) {
        CUdeviceptr p;
        uint64_t t0 = now();
        if (cuMemAlloc_v2(&p, 4096) != 0) return 1;
        uint64_t t1 = now();
        if (cuMemFree_v2(p) != 0) return 1;
        uint64_t t2 = now();
        alloc_ns[i] = t1 - t0;
        free_ns[i] = t2 - t1;
    }
    unsigned long long pair_calls = fakeCudaCallCount() - calls_before;
    /* A launch costs less than the clock's resolution: 100 are timed at once.
     * The first launch is measured by the tracer; the rest are what is timed. */
    uint64_t *launch_ns = malloc(sizeof(uint64_t) * pairs);
    void *module, *function;
    if (cuModuleLoadData(&module, "image") || cuModuleGetFunction(&function, module, "kernel")) return 1;
    if (cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != 0) return 1;
    for (int i = 0; i < pairs; i++) {
        uint64_t t0 = now();
        for (int j = 0; j < 100; j++)
            if (cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != 0) return 1;
        launch_ns[i] = now() - t0;
    }
    qsort(alloc_ns, pairs, sizeof(uint64_t), by_value);
    qsort(free_ns, pairs, sizeof(uint64_t), by_value);
    qsort(launch_ns, pairs, sizeof(uint64_t), by_value);
    printf("alloc_median_ns %llu\nfree_median_ns %llu\nlaunch_median_ns %llu\n", (unsigned long long)alloc_ns[pairs / 2],
           (unsigned long long)free_ns[pairs / 2], (unsigned long long)(launch_ns[pairs / 2] / 100));
    /* Driver calls per pair, in thousandths: 2000 is the program's own two. */
    printf("driver_calls_per_pair_milli %llu\n", pair_calls * 1000ull / (unsigned long long)pairs);
    return 0;
}
