/*
 * What the hooks must notice without asking the driver on every event:
 *
 *   context_reset devices   a worker thread's current device changes out of
 *       the hooks' sight; then the main thread resets a primary context (a
 *       call that may change every thread's context), and the worker
 *       allocates again. Prints "A <before> B <after>".
 *   context_reset streams   a stream on device 1 is destroyed and its handle
 *       given out again for a stream on device 0, with a kernel launched
 *       into each. Prints "S <first> <second, the same handle>" and the two
 *       allocations' addresses "A <on the first> B <on the second>".
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned);
int cuCtxSetCurrent(void *);
int cuMemAlloc_v2(CUdeviceptr *, size_t);
int cuMemAllocAsync(CUdeviceptr *, size_t, void *);
int cuStreamCreate(void **, unsigned);
int cuStreamDestroy_v2(void *);
int cuDevicePrimaryCtxReset_v2(int);
int cuModuleLoadData(void **, const void *);
int cuModuleGetFunction(void **, void *, const char *);
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                   void **);
void fakeCudaSetDeviceQuietly(int);

static pthread_barrier_t switched, reset;
static CUdeviceptr before, after;

static void *worker(void *unused) {
    (void)unused;
    cuCtxSetCurrent((void *)1);
    cuMemAlloc_v2(&before, 1 << 20);
    fakeCudaSetDeviceQuietly(1);
    pthread_barrier_wait(&switched);
    pthread_barrier_wait(&reset);
    cuMemAlloc_v2(&after, 2 << 20);
    return NULL;
}

int main(int argc, char **argv) {
    if (cuInit(0)) return 1;
    if (argc > 1 && strcmp(argv[1], "devices") == 0) {
        pthread_t thread;
        pthread_barrier_init(&switched, NULL, 2);
        pthread_barrier_init(&reset, NULL, 2);
        pthread_create(&thread, NULL, worker, NULL);
        pthread_barrier_wait(&switched);
        if (cuDevicePrimaryCtxReset_v2(0)) return 1;
        pthread_barrier_wait(&reset);
        pthread_join(thread, NULL);
        printf("A 0x%llx B 0x%llx\n", before, after);
        return 0;
    }
    void *module, *kernel, *first, *second;
    CUdeviceptr a, b;
    if (cuModuleLoadData(&module, "image") || cuModuleGetFunction(&kernel, module, "kernel")) return 1;
    if (cuCtxSetCurrent((void *)1) || cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL)) return 1;
    /* The kernel's first launch on device 1 loads it there (measured as a
       load); the stream's first launch after it is the stream's own. */
    if (cuCtxSetCurrent((void *)2) || cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL)) return 1;
    if (cuStreamCreate(&first, 0)) return 1;
    if (cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, first, NULL, NULL)) return 1;
    if (cuMemAllocAsync(&a, 4096, first) || cuStreamDestroy_v2(first)) return 1;
    if (cuCtxSetCurrent((void *)1) || cuStreamCreate(&second, 0)) return 1;
    if (cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, second, NULL, NULL)) return 1;
    if (cuMemAllocAsync(&b, 8192, second)) return 1;
    printf("S %p %p\nA 0x%llx B 0x%llx\n", first, second, a, b);
    return 0;
}
