/*
 * Test program for the memory limit (`cudatrace run --limit`), run over the
 * fake driver. Each subcommand prints what the program saw, one fact a line:
 *
 *   limit queries                every path that asks the card's memory
 *   limit refuse KIND SIZE N     N allocations of SIZE bytes of KIND; the first
 *                                refused is printed with its error, errno and
 *                                out-parameter, then all are freed and one
 *                                more is tried
 *   limit hold SIZE MS           allocates SIZE, says "held", sleeps MS ms, exits
 *                                without freeing
 *   limit fork SIZE              allocates SIZE, then a forked child allocates
 *                                SIZE-sized blocks until refused
 *   limit context                retains the primary context of device 0
 *   limit graph SIZE             adds a graph allocation node of SIZE bytes
 *   limit threads N SIZE         N threads each allocate SIZE, free it and
 *                                exit; then SIZE blocks until refused
 *   limit idle N SIZE BIG        N threads each allocate SIZE and free it, then
 *                                wait, alive, while one allocation of BIG is
 *                                made; prints its result
 *   limit keys N SIZE BIG        takes every free pthread key, then N threads
 *                                one after another allocate SIZE, free it and
 *                                exit; then one allocation of BIG
 *   limit exec SIZE PROGRAM ARGS allocates SIZE, then execs PROGRAM ARGS
 *   limit cancel SIZE            a thread with a cancellation pending makes
 *                                the process's first CUDA calls (an
 *                                allocation of SIZE), then reaches a
 *                                cancellation point of its own
 *
 * KIND: plain, runtime, async, pool, vmm, pitch, array, managed. A SIZE or
 * DEVICE may be given as "SIZE@DEVICE" to allocate on another device.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_types.h"

typedef int CUresult;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { size_t Width, Height; int Format; unsigned NumChannels; } CUDA_ARRAY_DESCRIPTOR;

CUresult cuInit(unsigned);
CUresult cuCtxSetCurrent(void *);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemGetInfo(unsigned *, unsigned *);
CUresult cuDeviceTotalMem_v2(size_t *, int);
CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, void *);
CUresult cuMemFreeAsync(CUdeviceptr, void *);
CUresult cuMemPoolCreate(void **, const CUmemPoolProps *);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, void *, void *);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuArrayCreate_v2(void **, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArrayDestroy(void *);
CUresult cuStreamCreate(void **, unsigned);
CUresult cuGraphAddMemAllocNode(void **, void *, const void *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemGetInfo(size_t *, size_t *);
int cudaGetDeviceProperties_v2(void *, int);

static int device = 0;
static void *stream;
static void *pool;

static void use_device(int which) {
    device = which;
    cuInit(0);
    void *context = NULL;
    cuDevicePrimaryCtxRetain(&context, which);
    if (cuCtxSetCurrent((void *)(intptr_t)(which + 1)) != 0) {
        printf("no device %d\n", which);
        exit(3);
    }
}

static void queries(void) {
    size_t free_bytes = 0, total = 0;
    cuMemGetInfo_v2(&free_bytes, &total);
    printf("cuMemGetInfo_v2 %zu %zu\n", free_bytes, total);
    unsigned free32 = 0, total32 = 0;
    cuMemGetInfo(&free32, &total32);
    printf("cuMemGetInfo %u %u\n", free32, total32);
    size_t bytes = 0;
    cuDeviceTotalMem_v2(&bytes, device);
    printf("cuDeviceTotalMem_v2 %zu\n", bytes);

    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    CUresult (*by_dlsym)(size_t *, size_t *) = (CUresult (*)(size_t *, size_t *))dlsym(driver, "cuMemGetInfo_v2");
    free_bytes = total = 0;
    by_dlsym(&free_bytes, &total);
    printf("dlsym cuMemGetInfo_v2 %zu %zu\n", free_bytes, total);
    CUresult (*total_by_dlsym)(size_t *, int) = (CUresult (*)(size_t *, int))dlsym(driver, "cuDeviceTotalMem_v2");
    bytes = 0;
    total_by_dlsym(&bytes, device);
    printf("dlsym cuDeviceTotalMem_v2 %zu\n", bytes);

    void *entry = NULL;
    int status = 0;
    cuGetProcAddress_v2("cuMemGetInfo", &entry, 12000, 0, &status);
    free_bytes = total = 0;
    ((CUresult (*)(size_t *, size_t *))entry)(&free_bytes, &total);
    printf("cuGetProcAddress cuMemGetInfo %zu %zu\n", free_bytes, total);
    cuGetProcAddress_v2("cuDeviceTotalMem", &entry, 12000, 0, &status);
    bytes = 0;
    ((CUresult (*)(size_t *, int))entry)(&bytes, device);
    printf("cuGetProcAddress cuDeviceTotalMem %zu\n", bytes);

    free_bytes = total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    printf("cudaMemGetInfo %zu %zu\n", free_bytes, total);
    static char prop[1032];
    cudaGetDeviceProperties_v2(prop, device);
    printf("cudaGetDeviceProperties totalGlobalMem %zu\n", *(size_t *)(prop + 288));
}

/* One allocation of `kind`; its handle (or address) in *out. */
static CUresult allocate(const char *kind, size_t size, uint64_t *out) {
    CUdeviceptr ptr = 0xdead;
    CUresult result;
    if (!strcmp(kind, "plain")) {
        result = cuMemAlloc_v2(&ptr, size);
    } else if (!strcmp(kind, "runtime")) {
        void *p = (void *)0xdead;
        result = cudaMalloc(&p, size);
        ptr = (CUdeviceptr)p;
    } else if (!strcmp(kind, "async")) {
        result = cuMemAllocAsync(&ptr, size, stream);
    } else if (!strcmp(kind, "pool")) {
        result = cuMemAllocFromPoolAsync(&ptr, size, pool, stream);
    } else if (!strcmp(kind, "vmm")) {
        CUmemAllocationProp prop = {0};
        prop.type = 1;
        prop.location.type = 1;
        prop.location.id = device;
        CUmemGenericAllocationHandle handle = 0xdead;
        result = cuMemCreate(&handle, size, &prop, 0);
        ptr = handle;
    } else if (!strcmp(kind, "pitch")) {
        size_t pitch = 0;
        result = cuMemAllocPitch_v2(&ptr, &pitch, size, 1, 4);
    } else if (!strcmp(kind, "array")) {
        CUDA_ARRAY_DESCRIPTOR desc = { size, 1, 0x08 /* 8-bit */, 1 };
        void *array = (void *)0xdead;
        result = cuArrayCreate_v2(&array, &desc);
        ptr = (CUdeviceptr)array;
    } else if (!strcmp(kind, "managed")) {
        result = cuMemAllocManaged(&ptr, size, 1);
    } else {
        fprintf(stderr, "unknown kind %s\n", kind);
        exit(2);
    }
    *out = ptr;
    return result;
}

static CUresult release(const char *kind, uint64_t handle) {
    if (!strcmp(kind, "runtime")) return cudaFree((void *)handle);
    if (!strcmp(kind, "async") || !strcmp(kind, "pool")) return cuMemFreeAsync(handle, stream);
    if (!strcmp(kind, "vmm")) return cuMemRelease(handle);
    if (!strcmp(kind, "array")) return cuArrayDestroy((void *)handle);
    return cuMemFree_v2(handle);
}

static void prepare(const char *kind) {
    if (!strcmp(kind, "async") || !strcmp(kind, "pool")) cuStreamCreate(&stream, 0);
    if (!strcmp(kind, "pool")) {
        CUmemPoolProps props = {0};
        props.allocType = 1;
        props.location.type = 1;
        props.location.id = device;
        cuMemPoolCreate(&pool, &props);
    }
}

/* SIZE or SIZE@DEVICE. */
static size_t size_on(const char *text) {
    const char *at = strchr(text, '@');
    use_device(at ? atoi(at + 1) : 0);
    return strtoull(text, NULL, 0);
}

static void refuse(const char *kind, size_t size, int count) {
    prepare(kind);
    uint64_t *held = calloc((size_t)count, sizeof *held);
    int made = 0;
    for (int i = 0; i < count; i++) {
        errno = 4321;
        uint64_t handle = 0;
        CUresult result = allocate(kind, size, &handle);
        if (result != 0) {
            printf("refused %s at %d error %d errno %d out 0x%llx\n", kind, i, result, errno,
                   (unsigned long long)handle);
            break;
        }
        held[made++] = handle;
    }
    printf("allocated %d\n", made);
    for (int i = 0; i < made; i++) release(kind, held[i]);
    uint64_t handle = 0;
    printf("after freeing %d\n", allocate(kind, size, &handle));
    release(kind, handle);
}

static size_t thread_bytes;

static void *allocate_and_free(void *unused) {
    (void)unused;
    cuCtxSetCurrent((void *)(intptr_t)1);
    CUdeviceptr ptr;
    if (cuMemAlloc_v2(&ptr, thread_bytes) == 0) cuMemFree_v2(ptr);
    return NULL;
}

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_change = PTHREAD_COND_INITIALIZER;
static int idle_ready, idle_released;
/* `idle ... hold`: the threads stay idle until the process is killed. */
static int holding;

/* Allocates and frees thread_bytes, then waits until released. */
static void *allocate_free_and_wait(void *unused) {
    (void)unused;
    cuCtxSetCurrent((void *)(intptr_t)1);
    CUdeviceptr ptr;
    int result = cuMemAlloc_v2(&ptr, thread_bytes);
    if (result == 0) cuMemFree_v2(ptr);
    pthread_mutex_lock(&idle_lock);
    if (result != 0) printf("thread refused %d\n", result);
    idle_ready++;
    pthread_cond_broadcast(&idle_change);
    while (!idle_released) pthread_cond_wait(&idle_change, &idle_lock);
    pthread_mutex_unlock(&idle_lock);
    return NULL;
}

static void idle_threads(int count, size_t big) {
    pthread_t *threads = calloc((size_t)count, sizeof *threads);
    for (int i = 0; i < count; i++) pthread_create(&threads[i], NULL, allocate_free_and_wait, NULL);
    pthread_mutex_lock(&idle_lock);
    while (idle_ready < count) pthread_cond_wait(&idle_change, &idle_lock);
    pthread_mutex_unlock(&idle_lock);
    CUdeviceptr ptr = 0;
    int result = cuMemAlloc_v2(&ptr, big);
    printf("big %d\n", result);
    if (result == 0) cuMemFree_v2(ptr);
    if (holding) {
        printf("idle\n");
        for (;;) pause();
    }
    pthread_mutex_lock(&idle_lock);
    idle_released = 1;
    pthread_cond_broadcast(&idle_change);
    pthread_mutex_unlock(&idle_lock);
    for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
}

static void *cancelled_first_call(void *unused) {
    (void)unused;
    pthread_cancel(pthread_self());
    cuInit(0);
    void *context = NULL;
    cuDevicePrimaryCtxRetain(&context, 0);
    cuCtxSetCurrent((void *)(intptr_t)1);
    CUdeviceptr ptr;
    int result = cuMemAlloc_v2(&ptr, thread_bytes);
    /* Unbuffered stdout: one write, itself a cancellation point of ours. */
    char line[64];
    int length = snprintf(line, sizeof line, "alloc %d\n", result);
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    fwrite(line, 1, (size_t)length, stdout);
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    pthread_testcancel();
    printf("not cancelled\n");
    return NULL;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 2) return 2;
    const char *command = argv[1];
    if (!strcmp(command, "queries")) {
        use_device(argc > 2 ? atoi(argv[2]) : 0);
        queries();
    } else if (!strcmp(command, "refuse") && argc == 5) {
        size_t size = size_on(argv[3]);
        refuse(argv[2], size, atoi(argv[4]));
    } else if (!strcmp(command, "hold") && argc == 4) {
        size_t size = size_on(argv[2]);
        CUdeviceptr ptr;
        printf("hold %d\n", cuMemAlloc_v2(&ptr, size));
        printf("held\n");
        struct timespec pause = { atoi(argv[3]) / 1000, (atoi(argv[3]) % 1000) * 1000000L };
        nanosleep(&pause, NULL);
    } else if (!strcmp(command, "fork") && argc == 3) {
        size_t size = size_on(argv[2]);
        CUdeviceptr ptr;
        printf("parent %d\n", cuMemAlloc_v2(&ptr, size));
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            use_device(0);
            for (int i = 0; i < 1000; i++) {
                if (cuMemAlloc_v2(&ptr, size) != 0) {
                    printf("child refused at %d\n", i);
                    _exit(0);
                }
            }
            _exit(1);
        }
        int status = 0;
        waitpid(child, &status, 0);
        printf("child exited %d\n", WEXITSTATUS(status));
    } else if (!strcmp(command, "context")) {
        void *context = (void *)0xdead;
        cuInit(0);
        printf("cuDevicePrimaryCtxRetain %d\n", cuDevicePrimaryCtxRetain(&context, 0));
    } else if (!strcmp(command, "threads") && argc == 4) {
        thread_bytes = size_on(argv[3]);
        int count = atoi(argv[2]);
        for (int i = 0; i < count; i++) {
            pthread_t thread;
            pthread_create(&thread, NULL, allocate_and_free, NULL);
            pthread_join(thread, NULL);
        }
        refuse("plain", thread_bytes, 100000);
    } else if (!strcmp(command, "idle") && (argc == 5 || argc == 6)) {
        thread_bytes = size_on(argv[3]);
        holding = argc == 6;
        idle_threads(atoi(argv[2]), strtoull(argv[4], NULL, 0));
    } else if (!strcmp(command, "keys") && argc == 5) {
        thread_bytes = size_on(argv[3]);
        pthread_key_t key;
        int taken = 0;
        while (pthread_key_create(&key, NULL) == 0) taken++;
        printf("keys taken %s\n", taken > 0 ? "yes" : "no");
        int count = atoi(argv[2]);
        for (int i = 0; i < count; i++) {
            pthread_t thread;
            pthread_create(&thread, NULL, allocate_and_free, NULL);
            pthread_join(thread, NULL);
        }
        CUdeviceptr ptr = 0;
        printf("big %d\n", cuMemAlloc_v2(&ptr, strtoull(argv[4], NULL, 0)));
    } else if (!strcmp(command, "exec") && argc >= 4) {
        size_t size = size_on(argv[2]);
        CUdeviceptr ptr;
        printf("hold %d\n", cuMemAlloc_v2(&ptr, size));
        execv(argv[3], argv + 3);
        printf("exec failed %d\n", errno);
        printf("after %d\n", cuMemAlloc_v2(&ptr, size));
    } else if (!strcmp(command, "cancel") && argc == 3) {
        thread_bytes = strtoull(argv[2], NULL, 0);
        pthread_t thread;
        pthread_create(&thread, NULL, cancelled_first_call, NULL);
        void *result = NULL;
        pthread_join(thread, &result);
        printf("cancelled %s\n", result == PTHREAD_CANCELED ? "yes" : "no");
    } else if (!strcmp(command, "graph") && argc == 3) {
        size_t size = size_on(argv[2]);
        CUDA_MEM_ALLOC_NODE_PARAMS params = {0};
        params.poolProps.allocType = 1;
        params.poolProps.location.type = 1;
        params.poolProps.location.id = device;
        params.bytesize = size;
        void *node = NULL;
        printf("cuGraphAddMemAllocNode %d\n", cuGraphAddMemAllocNode(&node, (void *)0x1, NULL, 0, &params));
    } else {
        return 2;
    }
    return 0;
}
