/*
 * Times cuMemAlloc_v2 + cuMemFree_v2 pairs one call at a time and prints the
 * median of each. Run once plainly and once under the tracer; the difference
 * is what the hooks add.
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
    qsort(alloc_ns, pairs, sizeof(uint64_t), by_value);
    qsort(free_ns, pairs, sizeof(uint64_t), by_value);
    printf("alloc_median_ns %llu\nfree_median_ns %llu\n", (unsigned long long)alloc_ns[pairs / 2],
           (unsigned long long)free_ns[pairs / 2]);
    return 0;
}
