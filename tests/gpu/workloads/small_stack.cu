// Small stacks over the real driver (scenario F1 of tests/gpu/run_scenarios.py).
//
//   small_stack thread KIB first|warm
//       a thread on a painted stack of KIB KiB allocates 4096 bytes with
//       cudaMalloc and frees them; `warm`: main allocates 256 bytes first
//       (and frees them after), so the thread's calls are only its own
//       first; `first`: the thread's calls are the process's first.
//       Prints `stack used N of M`.
//   small_stack altstack KIB first|warm
//       three SIGUSR1s handled on a painted alternate stack of KIB KiB (a
//       guard page below it); each handler allocates and frees 8192 bytes
//       of pinned host memory with the driver's cuMemHostAlloc. `warm`:
//       256 pinned bytes come and go first. Prints `altstack used N of M`
//       and `handled 3 failed F`.
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAINT 0xa5

static void *thread_body(void *) {
    void *p = NULL;
    if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) printf("status thread call failed\n");
    return NULL;
}

static int thread_case(size_t size, int first) {
    void *warm = NULL;
    if (!first && cudaMalloc(&warm, 256) != cudaSuccess) return 20;
    unsigned char *stack = (unsigned char *)mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED) return 21;
    memset(stack, PAINT, size);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pthread_attr_setstack(&attr, stack, size) != 0) return 22;
    pthread_t thread;
    if (pthread_create(&thread, &attr, thread_body, NULL) != 0) return 23;
    pthread_join(thread, NULL);
    size_t untouched = 0;
    while (untouched < size && stack[untouched] == PAINT) untouched++;
    printf("stack used %zu of %zu\n", size - untouched, size);
    if (warm) cudaFree(warm);
    return 0;
}

static volatile sig_atomic_t handled, failed;

static void handler(int) {
    void *host = NULL;
    if (cuMemHostAlloc(&host, 8192, 0) != CUDA_SUCCESS || cuMemFreeHost(host) != CUDA_SUCCESS) failed = 1;
    handled++;
}

static int altstack_case(size_t size, int first) {
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *region = (unsigned char *)mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED || mprotect(region, page, PROT_NONE) != 0) return 30;
    memset(region + page, PAINT, size);
    stack_t stack;
    stack.ss_sp = region + page;
    stack.ss_size = size;
    stack.ss_flags = 0;
    if (sigaltstack(&stack, NULL) != 0) return 31;
    // The driver needs a context current for pinned memory: made here,
    // outside the handler, in both modes (cuInit and the primary context).
    if (cuInit(0) != CUDA_SUCCESS) return 32;
    CUcontext context;
    if (cuDevicePrimaryCtxRetain(&context, 0) != CUDA_SUCCESS || cuCtxSetCurrent(context) != CUDA_SUCCESS) return 33;
    if (!first) {
        void *host;
        if (cuMemHostAlloc(&host, 256, 0) != CUDA_SUCCESS || cuMemFreeHost(host) != CUDA_SUCCESS) return 34;
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    action.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &action, NULL);
    for (int i = 0; i < 3; i++) raise(SIGUSR1);
    size_t untouched = 0;
    while (untouched < size && region[page + untouched] == PAINT) untouched++;
    printf("altstack used %zu of %zu\n", size - untouched, size);
    printf("handled %d failed %d\n", (int)handled, (int)failed);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 4) return 2;
    size_t size = (size_t)atol(argv[2]) << 10;
    int first = !strcmp(argv[3], "first");
    if (!strcmp(argv[1], "thread")) return thread_case(size, first);
    if (!strcmp(argv[1], "altstack")) return altstack_case(size, first);
    return 2;
}
