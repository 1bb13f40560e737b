/*
 * Streams, events and a captured graph, as a program that uses CUDA graphs
 * does:
 *
 *   graph_capture <streams> <events>
 *
 * creates <streams> streams, launching a kernel into each, and <events>
 * events; captures two 64 MiB
 * stream-ordered allocations into a graph on the first stream (one freed
 * inside it); instantiates and launches the graph once; and ends at once,
 * with its context gone before the tracer's exit handler runs, as when the
 * runtime's own exit handler tears it down first. Prints the captured
 * addresses:
 *   G <first> <second>
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned);
int cuCtxSetCurrent(void *);
int cuDevicePrimaryCtxRetain(void **, int);
int cuStreamCreate(void **, unsigned);
int cuEventCreate(void **, unsigned);
int cuStreamBeginCapture_v2(void *, int);
int cuStreamEndCapture(void *, void **);
int cuMemAllocAsync(CUdeviceptr *, size_t, void *);
int cuMemFreeAsync(CUdeviceptr, void *);
int cuGraphInstantiateWithFlags(void **, void *, unsigned long long);
int cuGraphLaunch(void *, void *);
int cuModuleLoadData(void **, const void *);
int cuModuleGetFunction(void **, void *, const char *);
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                   void **);
void fakeCudaDropContext(void);

#define CHECK(call) do { if ((call) != 0) { fprintf(stderr, "%s failed\n", #call); return 1; } } while (0)

int main(int argc, char **argv) {
    int streams = argc > 1 ? atoi(argv[1]) : 1, events = argc > 2 ? atoi(argv[2]) : 0;
    CHECK(cuInit(0));
    void *context;
    CHECK(cuDevicePrimaryCtxRetain(&context, 0));
    CHECK(cuCtxSetCurrent(context));
    void *first = NULL, *handle, *module, *kernel;
    CHECK(cuModuleLoadData(&module, "image"));
    CHECK(cuModuleGetFunction(&kernel, module, "kernel"));
    for (int i = 0; i < streams; i++) {
        CHECK(cuStreamCreate(&handle, 0));
        if (!first) first = handle;
        /* Each stream's first launch sets up its resources. */
        CHECK(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, handle, NULL, NULL));
    }
    for (int i = 0; i < events; i++) CHECK(cuEventCreate(&handle, 0));
    CUdeviceptr scratch, kept;
    void *graph, *exec;
    CHECK(cuStreamBeginCapture_v2(first, 0));
    CHECK(cuMemAllocAsync(&scratch, 64 << 20, first));
    CHECK(cuMemAllocAsync(&kept, 64 << 20, first));
    CHECK(cuMemFreeAsync(scratch, first));
    CHECK(cuStreamEndCapture(first, &graph));
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CHECK(cuGraphLaunch(exec, first));
    printf("G 0x%llx 0x%llx\n", scratch, kept);
    fflush(stdout);
    /* Long enough for NVML to be read once more. */
    usleep(450000);
    fakeCudaDropContext();
    return 0;
}
