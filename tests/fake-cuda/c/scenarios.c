/*
 * Test program for the tracer, run under LD_PRELOAD over the fake driver.
 *
 * Each scenario makes CUDA calls and prints, for every call that should be
 * recorded, one line describing the event the tracer must write:
 *
 *   E <op> <runtime api or -> <driver api> <kind> <address> <size> <device> <stream>
 *
 * The tests compare these lines, in order, with the decoded spool, so that
 * addresses and sizes are checked exactly. Other lines start with a word of
 * their own ("status", "pid", ...).
 *
 * Built twice: against the shared fake runtime and driver, and with the
 * runtime linked statically (STATIC_RUNTIME), where only runtime scenarios
 * exist and the runtime's exports cannot be hooked.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int cudaError_t;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { void *ptr; size_t pitch, xsize, ysize; } cudaPitchedPtr;
typedef struct { size_t width, height, depth; } cudaExtent;
typedef struct { int x, y, z, w, f; } cudaChannelFormatDesc;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { size_t Width, Height; int Format; unsigned NumChannels; } CUDA_ARRAY_DESCRIPTOR;
typedef struct { size_t Width, Height, Depth; int Format; unsigned NumChannels, Flags; } CUDA_ARRAY3D_DESCRIPTOR;

cudaError_t cudaSetDevice(int);
cudaError_t cudaMemGetInfo(size_t *, size_t *);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocManaged(void **, size_t, unsigned);
cudaError_t cudaMallocPitch(void **, size_t *, size_t, size_t);
cudaError_t cudaMalloc3D(cudaPitchedPtr *, cudaExtent);
cudaError_t cudaMallocAsync(void **, size_t, void *);
cudaError_t cudaMallocAsync_ptsz(void **, size_t, void *);
cudaError_t cudaMallocFromPoolAsync(void **, size_t, void *, void *);
cudaError_t cudaFreeAsync(void *, void *);
cudaError_t cudaFreeAsync_ptsz(void *, void *);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaHostAlloc(void **, size_t, unsigned);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaHostRegister(void *, size_t, unsigned);
cudaError_t cudaHostUnregister(void *);
cudaError_t cudaMallocArray(void **, const cudaChannelFormatDesc *, size_t, size_t, unsigned);
cudaError_t cudaMalloc3DArray(void **, const cudaChannelFormatDesc *, cudaExtent, unsigned);
cudaError_t cudaFreeArray(void *);
cudaError_t cudaGetDriverEntryPointByVersion(const char *, void **, unsigned, unsigned long long, int *);

static int static_runtime;

static void check(const char *what, int status) {
    if (status != 0) {
        printf("status %s %d\n", what, status);
        fflush(stdout);
        exit(10);
    }
}

/* One expected event. `runtime` is the runtime entry point, or "-". */
static void expect(const char *op, const char *runtime, const char *driver, const char *kind,
                   uint64_t address, uint64_t size, int device, uint64_t stream) {
    const char *api = (runtime[0] != '-' && !static_runtime) ? runtime : driver;
    printf("E %s %s %s 0x%llx %llu %d 0x%llx\n", op, api, kind, (unsigned long long)address,
           (unsigned long long)size, device, (unsigned long long)stream);
}

static void scenario_runtime(void) {
    void *a, *b, *managed, *pitched, *host1, *host2, *async1, *async2, *pooled, *on_device1;
    size_t pitch;
    /* The first recorded call creates the spool; the program's errno must survive it. */
    errno = 4242;
    check("cudaMalloc", cudaMalloc(&a, 1 << 20));
    printf("errno %d\n", errno);
    expect("alloc", "cudaMalloc", "cuMemAlloc_v2", "device", (uintptr_t)a, 1 << 20, 0, 0);
    check("cudaMalloc", cudaMalloc(&b, 2 << 20));
    expect("alloc", "cudaMalloc", "cuMemAlloc_v2", "device", (uintptr_t)b, 2 << 20, 0, 0);
    check("cudaFree", cudaFree(a));
    expect("free", "cudaFree", "cuMemFree_v2", "device", (uintptr_t)a, 1 << 20, 0, 0);
    check("cudaFree(NULL)", cudaFree(NULL));

    check("cudaMallocManaged", cudaMallocManaged(&managed, 4096, 1));
    expect("alloc", "cudaMallocManaged", "cuMemAllocManaged", "managed", (uintptr_t)managed, 4096, 0, 0);
    check("cudaMallocPitch", cudaMallocPitch(&pitched, &pitch, 1000, 10));
    expect("alloc", "cudaMallocPitch", "cuMemAllocPitch_v2", "pitch", (uintptr_t)pitched, pitch * 10, 0, 0);
    cudaPitchedPtr p3;
    check("cudaMalloc3D", cudaMalloc3D(&p3, (cudaExtent){ 100, 4, 2 }));
    expect("alloc", "cudaMalloc3D", "cuMemAllocPitch_v2", "pitch", (uintptr_t)p3.ptr, p3.pitch * 8, 0, 0);

    check("cudaMallocHost", cudaMallocHost(&host1, 8192));
    expect("alloc", "cudaMallocHost", "cuMemAllocHost_v2", "host-pinned", (uintptr_t)host1, 8192, -1, 0);
    check("cudaHostAlloc", cudaHostAlloc(&host2, 4096, 0));
    expect("alloc", "cudaHostAlloc", "cuMemHostAlloc", "host-pinned", (uintptr_t)host2, 4096, -1, 0);
    check("cudaFreeHost", cudaFreeHost(host1));
    expect("free", "cudaFreeHost", "cuMemFreeHost", "host-pinned", (uintptr_t)host1, 8192, -1, 0);
    check("cudaFreeHost", cudaFreeHost(host2));
    expect("free", "cudaFreeHost", "cuMemFreeHost", "host-pinned", (uintptr_t)host2, 4096, -1, 0);

    void *stream = (void *)0x1234;
    check("cudaMallocAsync", cudaMallocAsync(&async1, 65536, stream));
    expect("alloc", "cudaMallocAsync", "cuMemAllocAsync", "pool", (uintptr_t)async1, 65536, 0, 0x1234);
    check("cudaMallocAsync_ptsz", cudaMallocAsync_ptsz(&async2, 32768, NULL));
    expect("alloc", "cudaMallocAsync_ptsz", "cuMemAllocAsync_ptsz", "pool", (uintptr_t)async2, 32768, 0, 2);
    check("cudaMallocFromPoolAsync", cudaMallocFromPoolAsync(&pooled, 16384, (void *)0x5678, stream));
    expect("alloc", "cudaMallocFromPoolAsync", "cuMemAllocFromPoolAsync", "pool", (uintptr_t)pooled, 16384, 0, 0x1234);
    check("cudaFreeAsync", cudaFreeAsync(async1, stream));
    expect("free", "cudaFreeAsync", "cuMemFreeAsync", "pool", (uintptr_t)async1, 65536, 0, 0x1234);
    /* A stream-ordered allocation released by a plain free. */
    check("cudaFree", cudaFree(async2));
    expect("free", "cudaFree", "cuMemFree_v2", "pool", (uintptr_t)async2, 32768, 0, 0);
    check("cudaFreeAsync_ptsz", cudaFreeAsync_ptsz(pooled, NULL));
    expect("free", "cudaFreeAsync_ptsz", "cuMemFreeAsync_ptsz", "pool", (uintptr_t)pooled, 16384, 0, 2);

    check("cudaSetDevice", cudaSetDevice(1));
    check("cudaMalloc", cudaMalloc(&on_device1, 4096));
    expect("alloc", "cudaMalloc", "cuMemAlloc_v2", "device", (uintptr_t)on_device1, 4096, 1, 0);
    check("cudaFree", cudaFree(on_device1));
    expect("free", "cudaFree", "cuMemFree_v2", "device", (uintptr_t)on_device1, 4096, 1, 0);
    check("cudaSetDevice", cudaSetDevice(0));

    void *array;
    cudaChannelFormatDesc float4 = { 32, 32, 32, 32, 2 }, uchar1 = { 8, 0, 0, 0, 1 };
    check("cudaMallocArray", cudaMallocArray(&array, &float4, 100, 0, 0));
    expect("alloc", "cudaMallocArray", "cuArrayCreate_v2", "array", (uintptr_t)array, 1600, 0, 0);
    check("cudaFreeArray", cudaFreeArray(array));
    expect("free", "cudaFreeArray", "cuArrayDestroy", "array", (uintptr_t)array, 1600, 0, 0);
    check("cudaMalloc3DArray", cudaMalloc3DArray(&array, &uchar1, (cudaExtent){ 8, 8, 8 }, 0));
    expect("alloc", "cudaMalloc3DArray", "cuArray3DCreate_v2", "array", (uintptr_t)array, 512, 0, 0);
    check("cudaFreeArray", cudaFreeArray(array));
    expect("free", "cudaFreeArray", "cuArrayDestroy", "array", (uintptr_t)array, 512, 0, 0);

    static char buffer[4096];
    check("cudaHostRegister", cudaHostRegister(buffer, sizeof buffer, 0));
    expect("alloc", "cudaHostRegister", "cuMemHostRegister_v2", "host-pinned", (uintptr_t)buffer, 4096, -1, 0);
    check("cudaHostUnregister", cudaHostUnregister(buffer));
    expect("free", "cudaHostUnregister", "cuMemHostUnregister", "host-pinned", (uintptr_t)buffer, 4096, -1, 0);

    size_t free_bytes, total;
    check("cudaMemGetInfo", cudaMemGetInfo(&free_bytes, &total));
    printf("live %p %p %p %p\n", b, managed, pitched, p3.ptr);
}

static void run_threads(void *(*body)(void *), int count) {
    pthread_t threads[64];
    for (int i = 0; i < count; i++) pthread_create(&threads[i], NULL, body, NULL);
    for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
}

static void *alloc_free_loop(void *unused) {
    (void)unused;
    for (int i = 0; i < 5000; i++) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 4096));
        check("cudaFree", cudaFree(p));
    }
    return NULL;
}

/* A tight allocation loop: block i is 4 to 32 KiB; every second block is
 * freed at once, the others stay live. Several threads run it at once. */
static int loop_iterations;
static uint64_t loop_live_bytes;
static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;

static void *allocation_loop(void *unused) {
    (void)unused;
    uint64_t kept = 0;
    for (int i = 0; i < loop_iterations; i++) {
        void *p;
        size_t size = 4096u * (1u + (unsigned)(i * 7) % 8u);
        check("cudaMalloc", cudaMalloc(&p, size));
        if (i % 2) check("cudaFree", cudaFree(p));
        else kept += size;
    }
    pthread_mutex_lock(&loop_lock);
    loop_live_bytes += kept;
    pthread_mutex_unlock(&loop_lock);
    return NULL;
}

static void scenario_loop(int iterations, int threads) {
    loop_iterations = iterations;
    if (threads <= 1) allocation_loop(NULL);
    else run_threads(allocation_loop, threads);
    long allocations = (long)iterations * (threads < 1 ? 1 : threads);
    printf("loop allocations %ld frees %ld live-bytes %llu\n", allocations, allocations / 2,
           (unsigned long long)loop_live_bytes);
}

/* `leak N`: what `cudatrace diff` compares between runs. A working buffer
 * of 4 MiB, freed at the end; N buffers of 1 MiB that are never freed; and
 * a 2 MiB scratch buffer allocated and freed after them, at the peak. */
__attribute__((noinline)) static void *leak_one(void) {
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 1 << 20));
    return p;
}

__attribute__((noinline)) static void scratch(void) {
    void *p = NULL;
    check("cudaMalloc", cudaMalloc(&p, 2 << 20));
    check("cudaFree", cudaFree(p));
}

static void scenario_leak(int n) {
    void *work = NULL;
    check("cudaMalloc", cudaMalloc(&work, 4 << 20));
    for (int i = 0; i < n; i++) leak_one();
    scratch();
    check("cudaFree", cudaFree(work));
    printf("leaked %d MiB\n", n);
}

/* The soak test's workload: PROCESSES children of THREADS threads each
 * allocate and free blocks for SECONDS, each thread at up to RATE calls a
 * second (0: as fast as it can). Each thread counts what it did, after
 * each call returns, in a file mapped shared (LOGDIR/soak-<pid>.log), which
 * survives the process being killed: a killed thread may have made one call
 * more than its log says. The parent writes LOGDIR/done when all are gone. */
typedef struct { uint64_t allocations, frees, live_bytes, done; } SoakLog;

static SoakLog *soak_logs;
static double soak_seconds, soak_rate;
static int soak_thread_index;
static pthread_mutex_t soak_lock = PTHREAD_MUTEX_INITIALIZER;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *soak_thread(void *unused) {
    (void)unused;
    pthread_mutex_lock(&soak_lock);
    SoakLog *log = &soak_logs[soak_thread_index++];
    pthread_mutex_unlock(&soak_lock);
    void *live[64] = { 0 };
    size_t sizes[64] = { 0 };
    uint64_t state = (uint64_t)(uintptr_t)log ^ (uint64_t)getpid() * 0x9E3779B97F4A7C15ull;
    double start = now_seconds(), end = start + soak_seconds;
    for (uint64_t i = 0;; i++) {
        if ((i & 63) == 0) {
            double now = now_seconds();
            if (now > end) break;
            double due = soak_rate > 0 ? start + i / soak_rate : now;
            if (due > now) usleep((useconds_t)((due - now) * 1e6));
        }
        state ^= state << 13; state ^= state >> 7; state ^= state << 17;
        int slot = (int)(state % 64);
        if (live[slot]) {
            check("cudaFree", cudaFree(live[slot]));
            __atomic_store_n(&log->live_bytes, log->live_bytes - sizes[slot], __ATOMIC_RELAXED);
            __atomic_store_n(&log->frees, log->frees + 1, __ATOMIC_RELEASE);
            live[slot] = NULL;
        } else {
            size_t size = 4096u * (1u + (unsigned)((state >> 8) % 16u));
            check("cudaMalloc", cudaMalloc(&live[slot], size));
            sizes[slot] = size;
            __atomic_store_n(&log->live_bytes, log->live_bytes + size, __ATOMIC_RELAXED);
            __atomic_store_n(&log->allocations, log->allocations + 1, __ATOMIC_RELEASE);
        }
    }
    __atomic_store_n(&log->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void scenario_soak(int processes, int threads, double seconds, const char *logdir, double rate) {
    for (int p = 0; p < processes; p++) {
        if (fork() != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/soak-%d.log", logdir, getpid());
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || ftruncate(fd, (off_t)(threads * sizeof(SoakLog))) != 0) _exit(20);
        soak_logs = mmap(NULL, threads * sizeof(SoakLog), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (soak_logs == MAP_FAILED) _exit(21);
        soak_seconds = seconds;
        soak_rate = rate;
        run_threads(soak_thread, threads);
        exit(0);
    }
    while (wait(NULL) > 0) {}
    char path[4096];
    snprintf(path, sizeof path, "%s/done", logdir);
    FILE *done = fopen(path, "w");
    if (done) fclose(done);
    printf("soak done\n");
}

/* Free bytes on the disk holding `dir`. */
static unsigned long long free_bytes(const char *dir) {
    struct statvfs fs;
    return statvfs(dir, &fs) == 0 ? (unsigned long long)fs.f_bavail * fs.f_frsize : 0;
}

/* A word of this process's own spool header ($CUDATRACE_DIR, image 0). */
static unsigned long long spool_word(int fd, off_t offset, size_t size) { /* little-endian */
    unsigned long long word = 0;
    if (fd < 0 || pread(fd, &word, size, offset) != (ssize_t)size) return 0;
    return word;
}

/* Pairs of allocations and frees, paced by the collector rather than by
 * the clock: whenever records were dropped (the spool had no room for its
 * next chunk: a small disk, or a ring whose next place the collector has
 * not emptied yet), wait until the collector has made room and the spool's
 * retry pause is over, then go on. Run with CUDATRACE_DIR holding the
 * spool. Prints the counts, and the spool file's size at the end. */
static void scenario_space_back(int pairs) {
    const char *dir = getenv("CUDATRACE_DIR");
    if (!dir) exit(3);
    void *first;
    check("cudaMalloc", cudaMalloc(&first, 4096)); /* the spool exists from here */
    check("cudaFree", cudaFree(first));
    char path[4096];
    snprintf(path, sizeof path, "%s/cudatrace-%d-0.spool", dir, getpid());
    int spool = open(path, O_RDONLY);
    if (spool < 0) exit(4);
    unsigned long long ring = spool_word(spool, 112, 4);
    unsigned long long allocations = 1, frees = 1, waits = 0, dropped_seen = 0;
    for (int i = 0; i < pairs; i++) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 4096));
        allocations++;
        check("cudaFree", cudaFree(p));
        frees++;
        if (i % 500 != 499) continue;
        unsigned long long dropped = spool_word(spool, 64, 8);
        if (dropped == dropped_seen) continue;
        dropped_seen = dropped;
        waits++;
        /* Room: disk space for a chunk, and the place of the current chunk
         * emptied by the collector (punched chunks, u32 at 116). */
        double give_up = now_seconds() + 30;
        for (;;) {
            unsigned long long chunk = (spool_word(spool, 96, 8) - 1) / 16384;
            int place = spool_word(spool, 116, 4) + ring > chunk;
            if (place && free_bytes(dir) >= 1179648 + 8192) break;
            if (now_seconds() > give_up) {
                printf("no space came back\n");
                exit(5);
            }
            usleep(2000);
        }
        usleep(60000); /* the spool's pause before it tries to grow again */
    }
    struct stat st;
    long long size = fstat(spool, &st) == 0 ? (long long)st.st_size : -1;
    close(spool);
    printf("allocations %llu\nfrees %llu\nwaits %llu\nspool bytes %lld\nring %llu\n", allocations, frees, waits, size, ring);
}

/* A program that closes every descriptor it did not open (up to 1023),
 * then writes 16 MiB into a data file of its own, which gets the lowest
 * free number (the spool's, before), and allocates on: its file must come
 * out as it wrote it. */
static void scenario_close_fds(const char *data_path) {
    unsigned long long allocations = 0, frees = 0;
    for (int i = 0; i < 100; i++) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 4096));
        check("cudaFree", cudaFree(p));
        allocations++, frees++;
    }
    for (int fd = 3; fd < 1024; fd++) close(fd);
    int data = open(data_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (data < 0) exit(6);
    static unsigned char block[1 << 16];
    for (size_t i = 0; i < sizeof block; i++) block[i] = (unsigned char)(i % 251);
    for (int i = 0; i < 256; i++)
        if (write(data, block, sizeof block) != (ssize_t)sizeof block) exit(7);
    /* Over two chunks more: the spool grows twice. */
    for (int i = 0; i < 20000; i++) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 4096));
        check("cudaFree", cudaFree(p));
        allocations++, frees++;
    }
    int intact = 1;
    static unsigned char back[1 << 16];
    for (int i = 0; i < 256 && intact; i++) {
        if (pread(data, back, sizeof back, (off_t)i * (off_t)sizeof back) != (ssize_t)sizeof back) intact = 0;
        else if (memcmp(back, block, sizeof back) != 0) intact = 0;
    }
    struct stat st;
    if (fstat(data, &st) != 0 || st.st_size != 256 * (off_t)sizeof block) intact = 0;
    printf("descriptor %d\ndata intact %d\nallocations %llu\nfrees %llu\n", data, intact, allocations, frees);
}

static void scenario_oom(void) {
    /* Run with FAKE_CUDA_CAPACITY=1048576. */
    void *half, *too_big;
    check("cudaMalloc", cudaMalloc(&half, 512 << 10));
    expect("alloc", "cudaMalloc", "cuMemAlloc_v2", "device", (uintptr_t)half, 512 << 10, 0, 0);
    int status = cudaMalloc(&too_big, 1 << 20);
    printf("status cudaMalloc %d\n", status);
    expect("oom", "cudaMalloc", "cuMemAlloc_v2", "device", 0, 1 << 20, 0, 0);
}

/* `oom-retries [N]`: a program that retries in a loop. Run with
 * FAKE_CUDA_CAPACITY=1048576: half the card is taken, then N (30) requests
 * of 1 MiB + i x 4 KiB fail at one call site and 10 of 2 MiB at another. */
__attribute__((noinline)) static void retry_growing(int i) {
    void *p = NULL;
    if (cudaMalloc(&p, (1 << 20) + (size_t)i * 4096) == 0) check("cudaFree", cudaFree(p));
}

__attribute__((noinline)) static void retry_double(void) {
    void *p = NULL;
    if (cudaMalloc(&p, 2 << 20) == 0) check("cudaFree", cudaFree(p));
}

static void scenario_oom_retries(int growing) {
    void *half;
    check("cudaMalloc", cudaMalloc(&half, 512 << 10));
    for (int i = 0; i < growing; i++) retry_growing(i);
    for (int i = 0; i < 10; i++) retry_double();
    printf("retried %d\n", growing + 10);
}

#ifndef STATIC_RUNTIME
CUresult cuInit(unsigned);
CUresult cuDeviceGetCount(int *);
CUresult cuMemAlloc(unsigned *, unsigned);
CUresult cuMemFree(unsigned);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemHostAlloc(void **, size_t, unsigned);
CUresult cuMemFreeHost(void *);
CUresult cuMemHostRegister_v2(void *, size_t, unsigned);
CUresult cuMemHostUnregister(void *);
CUresult cuArrayCreate_v2(void **, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArray3DCreate_v2(void **, const CUDA_ARRAY3D_DESCRIPTOR *);
CUresult cuMipmappedArrayCreate(void **, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
CUresult cuArrayDestroy(void *);
CUresult cuMipmappedArrayDestroy(void *);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned);
CUresult cuIpcCloseMemHandle(CUdeviceptr);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
int fakeCudaLooksItselfUp(void);

static void scenario_driver(void) {
    CUdeviceptr p, pitched, managed;
    size_t pitch;
    check("cuInit", cuInit(0));
    check("cuMemAlloc_v2", cuMemAlloc_v2(&p, 4096));
    expect("alloc", "-", "cuMemAlloc_v2", "device", p, 4096, 0, 0);
    check("cuMemAllocPitch_v2", cuMemAllocPitch_v2(&pitched, &pitch, 300, 3, 4));
    expect("alloc", "-", "cuMemAllocPitch_v2", "pitch", pitched, pitch * 3, 0, 0);
    check("cuMemFree_v2", cuMemFree_v2(p));
    expect("free", "-", "cuMemFree_v2", "device", p, 4096, 0, 0);
    printf("status invalid-free %d\n", cuMemFree_v2(0x1));

    unsigned small;
    check("cuMemAlloc", cuMemAlloc(&small, 256));
    expect("alloc", "-", "cuMemAlloc", "device", small, 256, 0, 0);
    check("cuMemFree", cuMemFree(small));
    expect("free", "-", "cuMemFree", "device", small, 256, 0, 0);

    check("cuMemAllocManaged", cuMemAllocManaged(&managed, 8192, 1));
    expect("alloc", "-", "cuMemAllocManaged", "managed", managed, 8192, 0, 0);

    void *h1, *h2;
    check("cuMemAllocHost_v2", cuMemAllocHost_v2(&h1, 100));
    expect("alloc", "-", "cuMemAllocHost_v2", "host-pinned", (uintptr_t)h1, 100, -1, 0);
    check("cuMemHostAlloc", cuMemHostAlloc(&h2, 200, 0));
    expect("alloc", "-", "cuMemHostAlloc", "host-pinned", (uintptr_t)h2, 200, -1, 0);
    check("cuMemFreeHost", cuMemFreeHost(h1));
    expect("free", "-", "cuMemFreeHost", "host-pinned", (uintptr_t)h1, 100, -1, 0);
    check("cuMemFreeHost", cuMemFreeHost(h2));
    expect("free", "-", "cuMemFreeHost", "host-pinned", (uintptr_t)h2, 200, -1, 0);
    static char registered[8192];
    check("cuMemHostRegister_v2", cuMemHostRegister_v2(registered, sizeof registered, 0));
    expect("alloc", "-", "cuMemHostRegister_v2", "host-pinned", (uintptr_t)registered, 8192, -1, 0);
    check("cuMemHostUnregister", cuMemHostUnregister(registered));
    expect("free", "-", "cuMemHostUnregister", "host-pinned", (uintptr_t)registered, 8192, -1, 0);

    void *array, *array3d, *mipmap;
    CUDA_ARRAY_DESCRIPTOR d2 = { 64, 32, 0x01, 1 };
    CUDA_ARRAY3D_DESCRIPTOR d3 = { 8, 8, 8, 0x10, 2, 0 }, dm = { 8, 8, 0, 0x20, 1, 0 };
    check("cuArrayCreate_v2", cuArrayCreate_v2(&array, &d2));
    expect("alloc", "-", "cuArrayCreate_v2", "array", (uintptr_t)array, 2048, 0, 0);
    check("cuArray3DCreate_v2", cuArray3DCreate_v2(&array3d, &d3));
    expect("alloc", "-", "cuArray3DCreate_v2", "array", (uintptr_t)array3d, 2048, 0, 0);
    check("cuMipmappedArrayCreate", cuMipmappedArrayCreate(&mipmap, &dm, 4));
    expect("alloc", "-", "cuMipmappedArrayCreate", "array", (uintptr_t)mipmap, 340, 0, 0);
    check("cuArrayDestroy", cuArrayDestroy(array));
    expect("free", "-", "cuArrayDestroy", "array", (uintptr_t)array, 2048, 0, 0);
    check("cuArrayDestroy", cuArrayDestroy(array3d));
    expect("free", "-", "cuArrayDestroy", "array", (uintptr_t)array3d, 2048, 0, 0);
    check("cuMipmappedArrayDestroy", cuMipmappedArrayDestroy(mipmap));
    expect("free", "-", "cuMipmappedArrayDestroy", "array", (uintptr_t)mipmap, 340, 0, 0);

    CUipcMemHandle handle;
    memset(&handle, 0, sizeof handle);
    uint64_t exported = 0xabc000;
    memcpy(handle.reserved, &exported, sizeof exported);
    CUdeviceptr imported;
    check("cuIpcOpenMemHandle_v2", cuIpcOpenMemHandle_v2(&imported, handle, 1));
    expect("alloc", "-", "cuIpcOpenMemHandle_v2", "ipc-import", imported, 0, 0, 0);
    check("cuIpcCloseMemHandle", cuIpcCloseMemHandle(imported));
    expect("free", "-", "cuIpcCloseMemHandle", "ipc-import", imported, 0, 0, 0);

    check("cuMemFree_v2", cuMemFree_v2(pitched));
    expect("free", "-", "cuMemFree_v2", "pitch", pitched, pitch * 3, 0, 0);
}

static void scenario_dlopen(void) {
    void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) { printf("status dlopen %s\n", dlerror()); exit(11); }
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult (*)(CUdeviceptr *, size_t))dlsym(handle, "cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = (CUresult (*)(CUdeviceptr))dlsym(RTLD_DEFAULT, "cuMemFree_v2");
    CUresult (*count)(int *) = (CUresult (*)(int *))dlsym(handle, "cuDeviceGetCount");
    if (!alloc || !release || !count) { printf("status dlsym-null\n"); exit(12); }
    int devices = 0;
    check("cuDeviceGetCount", count(&devices));
    printf("devices %d\n", devices);
    dlerror();
    void *missing = dlsym(handle, "cuNoSuchEntryPoint");
    printf("missing %s %s\n", missing ? "found" : "null", dlerror() ? "error" : "no-error");
    CUdeviceptr p;
    check("cuMemAlloc_v2", alloc(&p, 12345));
    expect("alloc", "-", "cuMemAlloc_v2", "device", p, 12345, 0, 0);
    check("cuMemFree_v2", release(p));
    expect("free", "-", "cuMemFree_v2", "device", p, 12345, 0, 0);
}

static void *entry_point(const char *name, unsigned version, unsigned long long flags) {
    void *fn = NULL;
    int status;
    check(name, cudaGetDriverEntryPointByVersion(name, &fn, version, flags, &status));
    return fn;
}

/* The VMM entry points, as the runtime hands them out. */
typedef struct {
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*release)(CUmemGenericAllocationHandle);
} Vmm;

static Vmm vmm_entry_points(void) {
    Vmm vmm;
    vmm.reserve = entry_point("cuMemAddressReserve", 12000, 0);
    vmm.address_free = entry_point("cuMemAddressFree", 12000, 0);
    vmm.create = entry_point("cuMemCreate", 12000, 0);
    vmm.map = entry_point("cuMemMap", 12000, 0);
    vmm.unmap = entry_point("cuMemUnmap", 12000, 0);
    vmm.release = entry_point("cuMemRelease", 12000, 0);
    return vmm;
}

/* Physical memory on `device`. */
static CUmemGenericAllocationHandle vmm_create(Vmm *vmm, size_t size, int device) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = 1;
    prop.location.id = device;
    CUmemGenericAllocationHandle handle;
    check("cuMemCreate", vmm->create(&handle, size, &prop, 0));
    return handle;
}

static void scenario_vmm(void) {
    Vmm vmm = vmm_entry_points();
    const size_t two_mib = 2 << 20;
    CUdeviceptr va;
    check("cuMemAddressReserve", vmm.reserve(&va, 2 * two_mib, 0, 0, 0));
    expect("reserve", "-", "cuMemAddressReserve", "virtual-address", va, 2 * two_mib, -1, 0);
    CUmemGenericAllocationHandle handle = vmm_create(&vmm, two_mib, 1);
    expect("alloc", "-", "cuMemCreate", "vmm-physical", handle, two_mib, 1, 0);
    check("cuMemMap", vmm.map(va, two_mib, 0, handle, 0));
    expect("map", "-", "cuMemMap", "virtual-address", va, two_mib, 1, 0);
    check("cuMemMap", vmm.map(va + two_mib, two_mib, 0, handle, 0));
    expect("map", "-", "cuMemMap", "virtual-address", va + two_mib, two_mib, 1, 0);
    check("cuMemUnmap", vmm.unmap(va, 2 * two_mib));
    expect("unmap", "-", "cuMemUnmap", "virtual-address", va, 2 * two_mib, -1, 0);
    check("cuMemRelease", vmm.release(handle));
    expect("free", "-", "cuMemRelease", "vmm-physical", handle, two_mib, 1, 0);
    check("cuMemAddressFree", vmm.address_free(va, 2 * two_mib));
    expect("unreserve", "-", "cuMemAddressFree", "virtual-address", va, 2 * two_mib, -1, 0);
    printf("handle 0x%llx\n", handle);
}

/* Two handles released while still mapped: the first is then unmapped and
 * its memory goes back; the second stays mapped, and so live, to the end. */
static void scenario_vmm_release_mapped(void) {
    Vmm vmm = vmm_entry_points();
    const size_t two_mib = 2 << 20;
    CUdeviceptr va;
    check("cuMemAddressReserve", vmm.reserve(&va, 2 * two_mib, 0, 0, 0));
    CUmemGenericAllocationHandle first = vmm_create(&vmm, two_mib, 0), second = vmm_create(&vmm, two_mib, 0);
    check("cuMemMap", vmm.map(va, two_mib, 0, first, 0));
    check("cuMemMap", vmm.map(va + two_mib, two_mib, 0, second, 0));
    check("cuMemRelease", vmm.release(first));
    check("cuMemRelease", vmm.release(second));
    check("cuMemUnmap", vmm.unmap(va, two_mib));
    printf("live-handle 0x%llx\n", second);
}

static void scenario_ptsz(void) {
    CUresult (*alloc_legacy)(CUdeviceptr *, size_t, void *) = entry_point("cuMemAllocAsync", 11020, 0);
    CUresult (*alloc_ptsz)(CUdeviceptr *, size_t, void *) = entry_point("cuMemAllocAsync", 11020, 2);
    CUresult (*pool_ptsz)(CUdeviceptr *, size_t, void *, void *) = entry_point("cuMemAllocFromPoolAsync", 11020, 2);
    CUresult (*free_ptsz)(CUdeviceptr, void *) = entry_point("cuMemFreeAsync", 11020, 2);
    CUresult (*plain_free)(CUdeviceptr) = entry_point("cuMemFree", 3020, 0);
    printf("distinct %d\n", alloc_legacy != alloc_ptsz);
    CUdeviceptr a, b, c;
    check("cuMemAllocAsync_ptsz", alloc_ptsz(&a, 1000, NULL));
    expect("alloc", "-", "cuMemAllocAsync_ptsz", "pool", a, 1000, 0, 2);
    check("cuMemAllocFromPoolAsync_ptsz", pool_ptsz(&b, 3000, (void *)0x77, (void *)0x99));
    expect("alloc", "-", "cuMemAllocFromPoolAsync_ptsz", "pool", b, 3000, 0, 0x99);
    check("cuMemAllocAsync", alloc_legacy(&c, 500, (void *)0x42));
    expect("alloc", "-", "cuMemAllocAsync", "pool", c, 500, 0, 0x42);
    check("cuMemFreeAsync_ptsz", free_ptsz(a, NULL));
    expect("free", "-", "cuMemFreeAsync_ptsz", "pool", a, 1000, 0, 2);
    check("cuMemFree_v2", plain_free(b));
    expect("free", "-", "cuMemFree_v2", "pool", b, 3000, 0, 0);
    check("cuMemFree_v2", plain_free(c));
    expect("free", "-", "cuMemFree_v2", "pool", c, 500, 0, 0);
}

static void scenario_driver_oom(void) {
    scenario_oom();
    CUdeviceptr p;
    printf("status cuMemAlloc_v2 %d\n", cuMemAlloc_v2(&p, 2 << 20));
    expect("oom", "-", "cuMemAlloc_v2", "device", 0, 2 << 20, 0, 0);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = 1;
    prop.location.id = 0;
    CUmemGenericAllocationHandle handle;
    printf("status cuMemCreate %d\n", cuMemCreate(&handle, 4 << 20, &prop, 0));
    expect("oom", "-", "cuMemCreate", "vmm-physical", 0, 4 << 20, 0, 0);
}

static void *dlsym_loop(void *unused) {
    (void)unused;
    for (int i = 0; i < 2000; i++) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 256));
        check("cudaFree", cudaFree(p));
        if (!dlsym(RTLD_DEFAULT, "cuMemAlloc_v2")) exit(13);
    }
    return NULL;
}

/* Forks children while other threads are inside hooks (and growing the
 * spool); the children must not hang, and what each child records must go
 * to its own spool. */
static void scenario_fork_under_load(void) {
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, dlsym_loop, NULL);
    for (int i = 0; i < 20; i++) {
        pid_t child = fork();
        if (child == 0) {
            void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
            int ok = handle && dlsym(handle, "cuMemAlloc_v2") && dlsym(RTLD_DEFAULT, "cuDeviceGetCount");
            CUdeviceptr p;
            if (cuMemAlloc_v2(&p, 512) != 0 || cuMemFree_v2(p) != 0) _exit(2);
            _exit(ok ? 0 : 1);
        }
        int status;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { printf("status child %d\n", status); exit(14); }
    }
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    printf("forks 20\n");
}
/* Recording switched between allocations: 1 MiB, then FIRST (a shell
 * command, such as `cudatrace resume`), 2 MiB, then SECOND, 4 MiB; the
 * first two are freed, the last is left live at exit. */
static int scenario_switching(const char *first, const char *second) {
    void *a = NULL, *b = NULL, *c = NULL;
    check("cudaMalloc", cudaMalloc(&a, 1 << 20));
    if (system(first) != 0) return 3;
    check("cudaMalloc", cudaMalloc(&b, 2 << 20));
    if (system(second) != 0) return 3;
    check("cudaMalloc", cudaMalloc(&c, 4 << 20));
    check("cudaFree", cudaFree(a));
    check("cudaFree", cudaFree(b));
    printf("switching done\n");
    return 0;
}

/* A SIGCHLD handler that calls CUDA, allocates and frees. The program's
 * first CUDA call creates the spool; a signal that arrives inside that
 * call runs the handler's hooks on the thread creating the spool (the
 * test raises one there, with CUDATRACE_TEST_SIGNAL_WHILE_OPENING; the
 * collector helper's SIGCHLD did, before the helper became unseen). */
static volatile int sigchld_handled;
static void sigchld_calls_cuda(int sig) {
    (void)sig;
    cuInit(0);
    CUdeviceptr q;
    if (cuMemAlloc_v2(&q, 8192) == 0) cuMemFree_v2(q);
    sigchld_handled++;
}

static int scenario_sigchld_first_call(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = sigchld_calls_cuda;
    sigaction(SIGCHLD, &action, NULL);
    CUdeviceptr p;
    CUresult result = cuMemAlloc_v2(&p, 4096);
    /* The helper's SIGCHLD may come a little later than the call. */
    for (int i = 0; i < 200 && !sigchld_handled; i++) usleep(5000);
    printf("alloc %d handled %d\n", (int)result, sigchld_handled);
    return 0;
}

/* Records, then forks a child whose first recorded calls are an unmap and a
 * free of the parent's memory: they reserve a sequence number, and so make
 * the child's spool, before the real call. The program's errno must be what
 * it was before each call. */
static int scenario_errno_in_forked_child(void) {
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 5000));
    Vmm vmm = vmm_entry_points();
    CUdeviceptr va;
    check("cuMemAddressReserve", vmm.reserve(&va, 2 << 20, 0, 0, 0));
    CUmemGenericAllocationHandle handle = vmm_create(&vmm, 2 << 20, 0);
    check("cuMemMap", vmm.map(va, 2 << 20, 0, handle, 0));
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        CUresult (*free_memory)(CUdeviceptr) = entry_point("cuMemFree", 12000, 0);
        errno = 78;
        CUresult unmapped = vmm.unmap(va, 2 << 20);
        int after_unmap = errno;
        errno = 77;
        CUresult freed = free_memory((CUdeviceptr)(uintptr_t)p);
        int after_free = errno;
        printf("child errno %d after the unmap (result %d), %d after the free (result %d)\n", after_unmap,
               (int)unmapped, after_free, (int)freed);
        fflush(stdout);
        _exit(after_free == 77 && after_unmap == 78 && freed == 0 && unmapped == 0 ? 0 : 33);
    }
    int status;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 34;
}

#endif


/* A thread on a stack of `size` bytes that it paints first: its first CUDA
 * calls (an allocation and a free) run there, and the deepest byte they
 * touched is printed, as bytes used below the thread's start. */
#define PAINT 0xa5
static void *small_stack_body(void *arg) {
    (void)arg;
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 4096));
    check("cudaFree", cudaFree(p));
    return NULL;
}

static int scenario_small_stack(size_t size, int process_first) {
    /* Unless `process_first`, the first call of the process is made here,
     * so that the thread's is only its own first call, not the library's
     * start (the spool, the collector, the module map) as well. */
    void *warm = NULL;
    if (!process_first) check("cudaMalloc", cudaMalloc(&warm, 256));
    unsigned char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED) return 40;
    memset(stack, PAINT, size);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pthread_attr_setstack(&attr, stack, size) != 0) return 41;
    pthread_t thread;
    if (pthread_create(&thread, &attr, small_stack_body, NULL) != 0) return 42;
    pthread_join(thread, NULL);
    size_t untouched = 0;
    while (untouched < size && stack[untouched] == PAINT) untouched++;
    printf("stack used %zu of %zu\n", size - untouched, size);
    if (warm) check("cudaFree", cudaFree(warm));
    return 0;
}

/* A child made without `fork` (so without the C library's fork handlers):
 * `_Fork()`, `clone()` with SIGCHLD, or the raw clone system call. The
 * parent allocates 1 MiB and keeps it, the child allocates 2 MiB and exits
 * 5, then the parent allocates 3 MiB and frees the 1 MiB. Prints
 * `child PID exit 5`. */
#include <sched.h>
#include <sys/syscall.h>
static int raw_child_body(void *arg) {
    (void)arg;
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 2 << 20));
    fflush(stdout);
    _exit(5);
}

static int scenario_raw_child(const char *how) {
    void *first, *last;
    check("cudaMalloc", cudaMalloc(&first, 1 << 20));
    fflush(stdout);
    pid_t child;
    static char clone_stack[256 << 10] __attribute__((aligned(16)));
    if (!strcmp(how, "_Fork")) {
        child = _Fork();
        if (child == 0) raw_child_body(NULL);
    } else if (!strcmp(how, "clone")) {
        child = clone(raw_child_body, clone_stack + sizeof clone_stack, SIGCHLD, NULL);
    } else if (!strcmp(how, "syscall")) {
        child = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (child == 0) raw_child_body(NULL);
    } else {
        printf("status unknown-way %s\n", how);
        return 2;
    }
    if (child < 0) return 40;
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 41;
    printf("child %d exit %d\n", (int)child, WEXITSTATUS(status));
    check("cudaMalloc", cudaMalloc(&last, 3 << 20));
    check("cudaFree", cudaFree(first));
    return 0;
}

/* A program with a supervisor thread that waits for any child (`waitpid(-1)`)
 * and counts SIGCHLDs. Its one child, a worker, exits 3 after 300 ms; the
 * main thread makes the process's first CUDA call meanwhile (under plain
 * LD_PRELOAD, the library starts its collector helper then). Prints
 * `sigchld N reaped W status S others K` once the supervisor is done: the
 * library's helper must never be reaped by it, nor be heard. `alone`: no
 * worker and no supervisor; prints `sigchld N children C` after the call
 * and 200 ms, C the children a `waitpid(-1, WNOHANG | __WALL)` found. */
static volatile sig_atomic_t sigchld_count;
static pid_t supervised_worker;
static int supervisor_status = -1, supervisor_others;
static void count_sigchld(int sig) { (void)sig; sigchld_count++; }
static void *supervise(void *arg) {
    (void)arg;
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) break;
        if (pid == supervised_worker) {
            supervisor_status = WIFEXITED(status) ? WEXITSTATUS(status) : -2;
            break;
        }
        supervisor_others++;
    }
    return NULL;
}

static int scenario_supervisor(int alone) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = count_sigchld;
    action.sa_flags = SA_RESTART;
    sigaction(SIGCHLD, &action, NULL);
    fflush(stdout);
    if (alone) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 4096));
        usleep(200000);
        int children = 0, status;
        while (waitpid(-1, &status, WNOHANG | __WALL) > 0) children++;
        printf("sigchld %d children %d\n", (int)sigchld_count, children);
        return 0;
    }
    supervised_worker = fork();
    if (supervised_worker == 0) {
        usleep(300000);
        _exit(3);
    }
    pthread_t thread;
    pthread_create(&thread, NULL, supervise, NULL);
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 4096));
    pthread_join(thread, NULL);
    usleep(100000);
    printf("sigchld %d reaped %d status %d others %d\n", (int)sigchld_count,
           supervisor_status >= 0 ? 1 : 0, supervisor_status, supervisor_others);
    return 0;
}

/* A small program under an address-space limit (run it under `prlimit
 * --as=N`): 3 allocations of which 1 is freed, 4 threads that allocate 4096
 * bytes and free them, then `malloc(32 MiB)`, touched. Prints `malloc ok`
 * or `malloc failed`, then `vm peak N` (kB, from /proc/self/status). */
static void *address_limit_thread(void *arg) {
    (void)arg;
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 4096));
    check("cudaFree", cudaFree(p));
    return NULL;
}

static int scenario_address_limit(void) {
    void *a, *b, *c;
    check("cudaMalloc", cudaMalloc(&a, 1 << 20));
    check("cudaMalloc", cudaMalloc(&b, 2 << 20));
    check("cudaMalloc", cudaMalloc(&c, 3 << 20));
    check("cudaFree", cudaFree(b));
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, address_limit_thread, NULL);
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    char *big = malloc(32 << 20);
    if (big) memset(big, 1, 32 << 20);
    printf("malloc %s\n", big ? "ok" : "failed");
    FILE *status = fopen("/proc/self/status", "r");
    char line[256];
    while (status && fgets(line, sizeof line, status)) {
        if (!strncmp(line, "VmPeak:", 7)) printf("vm peak %ld\n", atol(line + 7));
    }
    if (status) fclose(status);
    free(big);
    return big ? 0 : 3;
}

/* Signals at random points of steady-state hooks (run with
 * FAKE_CUDA_SIGNAL_SAFE=1, so that the fake driver itself never deadlocks
 * under a handler): after a first allocation, a timer raises SIGALRM every
 * 50 microseconds while the main thread makes N cudaMalloc/cudaFree pairs;
 * the handler allocates 4096 bytes with cuMemAlloc_v2 and frees them.
 * Prints `main N handler H failed F`. */
#ifndef STATIC_RUNTIME
#include <sys/time.h>
static volatile sig_atomic_t storm_pairs, storm_failed;
static void storm_handler(int sig) {
    (void)sig;
    int saved = errno;
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, 4096) == 0 && cuMemFree_v2(p) == 0) storm_pairs++;
    else storm_failed++;
    errno = saved;
}

static int scenario_signal_storm(int pairs) {
    void *warm;
    check("cudaMalloc", cudaMalloc(&warm, 256));
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = storm_handler;
    action.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &action, NULL);
    struct itimerval every = { { 0, 50 }, { 0, 50 } };
    setitimer(ITIMER_REAL, &every, NULL);
    int made = 0;
    for (int i = 0; i < pairs; i++) {
        void *p;
        if (cudaMalloc(&p, 8192) == 0 && cudaFree(p) == 0) made++;
    }
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    check("cudaFree", cudaFree(warm));
    printf("main %d handler %d failed %d\n", made, (int)storm_pairs, (int)storm_failed);
    return 0;
}
#endif

/* A thread's last CUDA calls made from a pthread key destructor of the
 * program's, which runs after every key made before it (the tracer's
 * among them): main allocates 1 MiB first, then makes the key; a thread
 * allocates and frees 4096 bytes, and at its end the destructor allocates
 * and frees 8192. Prints `destructor ran 1`. */
static pthread_key_t late_key;
static volatile int destructor_ran;
static void late_destructor(void *value) {
    (void)value;
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 8192));
    check("cudaFree", cudaFree(p));
    destructor_ran = 1;
}
static void *key_thread(void *arg) {
    (void)arg;
    pthread_setspecific(late_key, (void *)1);
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 4096));
    check("cudaFree", cudaFree(p));
    return NULL;
}
static int scenario_key_destructor(void) {
    void *first;
    check("cudaMalloc", cudaMalloc(&first, 1 << 20));
    pthread_key_create(&late_key, late_destructor);
    pthread_t thread;
    pthread_create(&thread, NULL, key_thread, NULL);
    pthread_join(thread, NULL);
    printf("destructor ran %d\n", destructor_ran);
    return 0;
}

static void *allocate_and_print(const char *label, size_t size) {
    void *p;
    check("cudaMalloc", cudaMalloc(&p, size));
    printf("%s %d %p %zu\n", label, getpid(), p, size);
    fflush(stdout);
    return p;
}

/* A parent that forks two CUDA-using children and fork+execs a third. */
static void scenario_tree(const char *self) {
    allocate_and_print("parent", 1000);
    pid_t a = fork();
    if (a == 0) { allocate_and_print("child-a", 2000); exit(0); }
    pid_t b = fork();
    if (b == 0) {
        void *p = allocate_and_print("child-b", 3000);
        check("cudaFree", cudaFree(p));
        exit(5);
    }
    pid_t c = fork();
    if (c == 0) { execl(self, self, "exec-child", (char *)NULL); _exit(99); }
    int status;
    waitpid(a, &status, 0);
    waitpid(b, &status, 0);
    waitpid(c, &status, 0);
}

/* A child killed with SIGKILL right after its allocations. */
static void scenario_killed_child(void) {
    pid_t child = fork();
    if (child == 0) {
        allocate_and_print("victim", 1 << 20);
        allocate_and_print("victim", 2 << 20);
        allocate_and_print("victim", 3 << 20);
        raise(SIGKILL);
    }
    int status;
    waitpid(child, &status, 0);
    printf("child-signal %d\n", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void scenario_fork(void) {
    void *parent_block, *child_block;
    check("cudaMalloc", cudaMalloc(&parent_block, 1000));
    expect("alloc", "cudaMalloc", "cuMemAlloc_v2", "device", (uintptr_t)parent_block, 1000, 0, 0);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        check("cudaMalloc", cudaMalloc(&child_block, 2000));
        printf("child %d %p\n", getpid(), child_block);
        check("cudaFree", cudaFree(child_block));
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    check("cudaFree", cudaFree(parent_block));
    expect("free", "cudaFree", "cuMemFree_v2", "device", (uintptr_t)parent_block, 1000, 0, 0);
    printf("parent %d child-status %d\n", getpid(), status);
}

/* `pairs N [wait]`: N allocations of 8 KiB, each freed before the next:
 * many events, little memory live at any moment (what folding a long run
 * keeps small). */
static void scenario_pairs(int n) {
    for (int i = 0; i < n; i++) {
        void *p = NULL;
        check("cudaMalloc", cudaMalloc(&p, 8192));
        check("cudaFree", cudaFree(p));
    }
    printf("pairs %d\n", n);
}

int main(int argc, char **argv) {
#ifdef STATIC_RUNTIME
    static_runtime = 1;
#endif
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *name = argc > 1 ? argv[1] : "";
    printf("pid %d\n", getpid());
    if (!strcmp(name, "runtime")) scenario_runtime();
    else if (!strcmp(name, "oom")) scenario_oom();
    else if (!strcmp(name, "oom-retries")) scenario_oom_retries(argc > 2 ? atoi(argv[2]) : 30);
    else if (!strcmp(name, "threads")) { run_threads(alloc_free_loop, 32); printf("threads 32 5000\n"); }
    else if (!strcmp(name, "loop")) {
        scenario_loop(argc > 2 ? atoi(argv[2]) : 100000, argc > 3 ? atoi(argv[3]) : 1);
        if (argc > 4 && !strcmp(argv[4], "wait")) {
            /* Stay alive, with the spool written, until stdin closes. */
            printf("ready\n");
            fflush(stdout);
            char buffer[64];
            while (read(0, buffer, sizeof buffer) > 0) {}
        } else if (argc > 4) {
            return atoi(argv[4]);
        }
    }
    else if (!strcmp(name, "pairs") && argc > 2) {
        scenario_pairs(atoi(argv[2]));
        if (argc > 3 && !strcmp(argv[3], "wait")) {
            printf("ready\n");
            fflush(stdout);
            char buffer[64];
            while (read(0, buffer, sizeof buffer) > 0) {}
        }
    }
    else if (!strcmp(name, "leak") && argc > 2) scenario_leak(atoi(argv[2]));
    else if (!strcmp(name, "rank-set-late") && argc > 2) {
        /* A program that learns its rank once running (as some launchers'
           workers do) and puts it in its own environment. */
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 1 << 20));
        setenv("RANK", argv[2], 1);
        setenv("WORLD_SIZE", "8", 1);
        check("cudaFree", cudaFree(p));
    }
    else if (!strcmp(name, "soak") && argc > 5) scenario_soak(atoi(argv[2]), atoi(argv[3]), atof(argv[4]), argv[5], argc > 6 ? atof(argv[6]) : 0);
    else if (!strcmp(name, "space-back") && argc > 2) scenario_space_back(atoi(argv[2]));
    else if (!strcmp(name, "close-fds") && argc > 2) scenario_close_fds(argv[2]);
    else if (!strcmp(name, "fork")) scenario_fork();
    else if (!strcmp(name, "tree")) scenario_tree(argv[0]);
    else if (!strcmp(name, "killed-child")) scenario_killed_child();
    else if (!strcmp(name, "self-kill")) {
        allocate_and_print("block", 4096);
        allocate_and_print("block", 8192);
        raise(SIGKILL);
    } else if (!strcmp(name, "exit3")) {
        allocate_and_print("block", 4096);
        exit(3);
    } else if (!strcmp(name, "self-term")) {
        allocate_and_print("block", 4096);
        raise(SIGTERM);
    } else if (!strcmp(name, "wait")) {
        allocate_and_print("block", 4096);
        printf("ready\n");
        fflush(stdout);
        for (int i = 0; i < 600; i++) usleep(50000);
    }
    else if (!strcmp(name, "exec")) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 3000));
        expect("alloc", "cudaMalloc", "cuMemAlloc_v2", "device", (uintptr_t)p, 3000, 0, 0);
        fflush(stdout);
        execl("/proc/self/exe", argv[0], "exec-child", (char *)NULL);
        printf("status exec failed\n");
        return 15;
    } else if (!strcmp(name, "chdir-first") && argc > 2) {
        /* Moves away from where a relative CUDATRACE_DIR pointed, then records. */
        if (chdir(argv[2]) != 0) return 16;
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 5000));
        check("cudaFree", cudaFree(p));
    } else if (!strcmp(name, "no-free-fd")) {
        /* RLIMIT_NOFILE 16, every descriptor taken, then the first CUDA call. */
        struct rlimit limit = {16, 16};
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return 17;
        while (open("/dev/null", O_RDONLY) >= 0) {}
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 5000));
        check("cudaFree", cudaFree(p));
        printf("pid %d\n", getpid());
    } else if (!strcmp(name, "setuid-first")) {
        /* Becomes another user before its first CUDA call. */
        if (setuid(65534) != 0) return 18;
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 5000));
        check("cudaFree", cudaFree(p));
        printf("pid %d\n", getpid());
    } else if (!strcmp(name, "reuse-notice-fd") && argc > 2) {
        /* Closes every descriptor, opens its own file under the number the
         * run's notice descriptor had, then cannot record (another user). */
        const char *notice = getenv("CUDATRACE_NOTICE");
        int wanted = notice ? atoi(notice) : -1;
        if (wanted < 3) return 19;
        for (int fd = 3; fd < 1024; fd++) close(fd);
        int own = -1;
        for (int fd = 3; fd <= wanted; fd++) own = open(argv[2], O_RDWR | O_CREAT | O_APPEND, 0644);
        if (own != wanted) return 20;
        if (write(own, "program data\n", 13) != 13) return 21;
        if (setuid(65534) != 0) return 18;
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 5000));
        printf("own fd %d\n", own);
    } else if (!strcmp(name, "setuid-then-fork")) {
        /* Records, becomes another user, then forks a child that allocates. */
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 5000));
        if (setuid(65534) != 0) return 18;
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            void *q;
            for (int i = 0; i < 7; i++) {
                check("cudaMalloc", cudaMalloc(&q, 3000));
                check("cudaFree", cudaFree(q));
            }
            printf("child %d\n", getpid());
            fflush(stdout);
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
        check("cudaFree", cudaFree(p));
    } else if (!strcmp(name, "idle-children")) {
        /* Records, then forks three children that never use CUDA (as
         * DataLoader workers do), and prints their pids. */
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 5000));
        fflush(stdout);
        for (int i = 0; i < 3; i++) {
            pid_t child = fork();
            if (child == 0) _exit(0);
            int status;
            waitpid(child, &status, 0);
            printf("idle child %d\n", child);
        }
        check("cudaFree", cudaFree(p));
    } else if (!strcmp(name, "late-daemon")) {
        /* A daemon (double fork) whose first allocation comes after the
         * command has exited. */
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 1000));
        pid_t child = fork();
        if (child == 0) {
            if (fork() == 0) {
                usleep(300000);
                void *q;
                check("cudaMalloc", cudaMalloc(&q, 3000));
                check("cudaFree", cudaFree(q));
                printf("daemon %d\n", getpid());
                fflush(stdout);
                exit(4);
            }
            _exit(0);
        }
        waitpid(child, NULL, 0);
    } else if (!strcmp(name, "exec-chain")) {
        /* A -> B -> sh -c 'exit 7': only sh exits (untraced, no CUDA).
         * `exec-chain raw`: both execs are the raw system call, which no
         * hook sees (B then execs /bin/sh). */
        int raw = argc > 2 && !strcmp(argv[2], "raw");
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 1000));
        fflush(stdout);
        if (raw) {
            extern char **environ;
            char *const b_argv[] = {argv[0], "exec-chain-b", "raw", NULL};
            syscall(SYS_execve, "/proc/self/exe", b_argv, environ);
        } else {
            execl("/proc/self/exe", argv[0], "exec-chain-b", (char *)NULL);
        }
        return 15;
    } else if (!strcmp(name, "exec-chain-b")) {
        int raw = argc > 2 && !strcmp(argv[2], "raw");
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 2000));
        fflush(stdout);
        char *const sh_argv[] = {"sh", "-c", "exit 7", NULL};
        extern char **environ;
        if (raw) syscall(SYS_execve, "/bin/sh", sh_argv, environ);
        else execvpe("sh", sh_argv, environ); /* found on PATH */
        printf("execvpe failed: %s\n", strerror(errno));
        return 15;
    } else if (!strcmp(name, "small-stack") && argc > 2) {
        return scenario_small_stack((size_t)atol(argv[2]) << 10, argc > 3 && !strcmp(argv[3], "first"));
    } else if (!strcmp(name, "key-destructor")) {
        return scenario_key_destructor();
    } else if (!strcmp(name, "address-limit")) {
        return scenario_address_limit();
    } else if (!strcmp(name, "supervisor")) {
        return scenario_supervisor(argc > 2 && !strcmp(argv[2], "alone"));
    } else if (!strcmp(name, "raw-child") && argc > 2) {
        return scenario_raw_child(argv[2]);
    } else if (!strcmp(name, "exec-child")) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 4000));
        printf("exec-child %d %p 4000\n", getpid(), p);
    }
#ifndef STATIC_RUNTIME
    else if (!strcmp(name, "driver")) scenario_driver();
    else if (!strcmp(name, "dlopen")) scenario_dlopen();
    else if (!strcmp(name, "vmm")) scenario_vmm();
    else if (!strcmp(name, "vmm-release-mapped")) scenario_vmm_release_mapped();
    else if (!strcmp(name, "errno-in-forked-child")) return scenario_errno_in_forked_child();
    else if (!strcmp(name, "sigchld-first-call")) return scenario_sigchld_first_call();
    else if (!strcmp(name, "signal-storm") && argc > 2) return scenario_signal_storm(atoi(argv[2]));
    else if (!strcmp(name, "switching") && argc > 3) return scenario_switching(argv[2], argv[3]);
    else if (!strcmp(name, "ptsz")) scenario_ptsz();
    else if (!strcmp(name, "driver-oom")) scenario_driver_oom();
    else if (!strcmp(name, "fork-under-load")) scenario_fork_under_load();
    else if (!strcmp(name, "init-only")) check("cuInit", cuInit(0));
    else if (!strcmp(name, "driver-self-lookup")) {
        /* First before any other CUDA call, then again once the tracer knows the driver. */
        printf("self-lookup-first %d\n", fakeCudaLooksItselfUp());
        CUdeviceptr p;
        check("cuMemAlloc_v2", cuMemAlloc_v2(&p, 4096));
        printf("self-lookup-later %d\n", fakeCudaLooksItselfUp());
    }
#endif
    else { printf("status unknown-scenario %s\n", name); return 2; }
    return 0;
}
