/*
 * Counts the driver calls made while the program makes its own, in steady
 * state, with the fake driver's call counter: run plainly and under the
 * tracer, the difference is every driver call the hooks add.
 *
 *   call_count <pairs>
 *
 * Prints, for each loop of <pairs> allocation + free pairs, the calls the
 * driver saw and the calls the program made:
 *   driver <seen> <made>     cuMemAlloc_v2 + cuMemFree_v2
 *   async <seen> <made>      cuMemAllocAsync + cuMemFreeAsync on a stream of its own
 *   runtime <seen> <made>    cudaMalloc + cudaFree through the runtime
 *   pool <seen> <made>       cuMemAllocFromPoolAsync + cuMemFreeAsync, pool on device 1
 * (after a stream capture that began and ended), and the addresses of one
 * allocation from the device-1 pool and one on a device-1 stream, made while
 * device 0 is current:
 *   P <pool address> S <stream address>
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_types.h"

int cuInit(unsigned);
int cuCtxSetCurrent(void *);
int cuMemAlloc_v2(CUdeviceptr *, size_t);
int cuMemFree_v2(CUdeviceptr);
int cuStreamCreate(void **, unsigned);
int cuMemAllocAsync(CUdeviceptr *, size_t, void *);
int cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, void *, void *);
int cuMemFreeAsync(CUdeviceptr, void *);
int cuMemPoolCreate(void **, const CUmemPoolProps *);
int cuStreamBeginCapture_v2(void *, int);
int cuStreamEndCapture(void *, void **);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
unsigned long long fakeCudaCallCount(void);

#define CHECK(call) do { if ((call) != 0) { fprintf(stderr, "%s failed\n", #call); exit(1); } } while (0)

static void driver_pair(void *unused) {
    (void)unused;
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, 4096));
    CHECK(cuMemFree_v2(p));
}
static void async_pair(void *stream) {
    CUdeviceptr p;
    CHECK(cuMemAllocAsync(&p, 4096, stream));
    CHECK(cuMemFreeAsync(p, stream));
}
static void *pool_of_device_1;
static void pool_pair(void *stream) {
    CUdeviceptr p;
    CHECK(cuMemAllocFromPoolAsync(&p, 4096, pool_of_device_1, stream));
    CHECK(cuMemFreeAsync(p, stream));
}
static void runtime_pair(void *unused) {
    (void)unused;
    void *p;
    CHECK(cudaMalloc(&p, 4096));
    CHECK(cudaFree(p));
}

/* Warms `pair` up, then counts the driver calls of `pairs` more. */
static void count(const char *label, void (*pair)(void *), void *argument, int pairs) {
    for (int i = 0; i < 10; i++) pair(argument);
    unsigned long long before = fakeCudaCallCount();
    for (int i = 0; i < pairs; i++) pair(argument);
    printf("%s %llu %llu\n", label, fakeCudaCallCount() - before, 2ull * (unsigned long long)pairs);
}

int main(int argc, char **argv) {
    int pairs = argc > 1 ? atoi(argv[1]) : 10000;
    CHECK(cuInit(0));
    CHECK(cuCtxSetCurrent((void *)1));
    void *stream, *captured, *graph;
    CHECK(cuStreamCreate(&stream, 0));
    /* A capture that has ended: allocations after it are no graph's, and
     * need no question to the driver. */
    CHECK(cuStreamCreate(&captured, 0));
    CHECK(cuStreamBeginCapture_v2(captured, 0));
    CUdeviceptr in_graph;
    CHECK(cuMemAllocAsync(&in_graph, 4096, captured));
    CHECK(cuStreamEndCapture(captured, &graph));
    count("driver", driver_pair, NULL, pairs);
    count("async", async_pair, stream, pairs);
    count("runtime", runtime_pair, NULL, pairs);
    /* A pool and a stream on device 1, used while device 0 is current. */
    CUmemPoolProps props = { 1, 0, { 1, 1 }, NULL, 0, 0, { 0 } };
    CHECK(cuCtxSetCurrent((void *)2));
    void *stream_on_1;
    CHECK(cuStreamCreate(&stream_on_1, 0));
    CHECK(cuMemPoolCreate(&pool_of_device_1, &props));
    CHECK(cuCtxSetCurrent((void *)1));
    count("pool", pool_pair, stream, pairs);
    CUdeviceptr from_pool, on_stream;
    CHECK(cuMemAllocFromPoolAsync(&from_pool, 8192, pool_of_device_1, stream));
    CHECK(cuMemAllocAsync(&on_stream, 12288, stream_on_1));
    printf("P 0x%llx S 0x%llx\n", from_pool, on_stream);
    return 0;
}
