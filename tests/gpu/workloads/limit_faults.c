/*
 * The memory limit's faults of issue 48, over the real driver (built with
 * nvcc, linked with libcuda):
 *
 *   limit_faults refuse SIZE N    N allocations of SIZE; prints the first
 *                                 refused ("refused at I error E") and
 *                                 "allocated K"
 *   limit_faults idle N SIZE BIG  N threads each allocate SIZE and free it,
 *                                 then wait, alive, while the main thread
 *                                 allocates BIG (-M: what cuMemGetInfo says
 *                                 is free, less M); prints "thread refused E"
 *                                 for each thread refused and "big E"
 *   limit_faults cancel SIZE      a thread with a cancellation pending makes
 *                                 the process's first CUDA calls, then
 *                                 reaches a cancellation point of its own;
 *                                 prints "alloc E" and "cancelled yes|no"
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static CUcontext context;
static size_t thread_bytes;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t change = PTHREAD_COND_INITIALIZER;
static int ready, released;

static void use_device(void) {
    CUdevice device;
    cuInit(0);
    cuDeviceGet(&device, 0);
    cuDevicePrimaryCtxRetain(&context, device);
    cuCtxSetCurrent(context);
}

static void *allocate_free_and_wait(void *unused) {
    (void)unused;
    cuCtxSetCurrent(context);
    CUdeviceptr ptr;
    CUresult result = cuMemAlloc(&ptr, thread_bytes);
    if (result == CUDA_SUCCESS) cuMemFree(ptr);
    pthread_mutex_lock(&lock);
    if (result != CUDA_SUCCESS) printf("thread refused %d\n", (int)result);
    ready++;
    pthread_cond_broadcast(&change);
    while (!released) pthread_cond_wait(&change, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void *cancelled_first_call(void *unused) {
    (void)unused;
    pthread_cancel(pthread_self());
    use_device();
    CUdeviceptr ptr;
    CUresult result = cuMemAlloc(&ptr, thread_bytes);
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    printf("alloc %d\n", (int)result);
    fflush(stdout);
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    pthread_testcancel();
    printf("not cancelled\n");
    return NULL;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 4 && !strcmp(argv[1], "refuse")) {
        use_device();
        size_t size = strtoull(argv[2], NULL, 0);
        int count = atoi(argv[3]), made = 0;
        for (int i = 0; i < count; i++) {
            CUdeviceptr ptr;
            CUresult result = cuMemAlloc(&ptr, size);
            if (result != CUDA_SUCCESS) {
                printf("refused at %d error %d\n", i, (int)result);
                break;
            }
            made++;
        }
        printf("allocated %d\n", made);
    } else if (argc == 5 && !strcmp(argv[1], "idle")) {
        use_device();
        int count = atoi(argv[2]);
        thread_bytes = strtoull(argv[3], NULL, 0);
        pthread_t *threads = calloc((size_t)count, sizeof *threads);
        for (int i = 0; i < count; i++) pthread_create(&threads[i], NULL, allocate_free_and_wait, NULL);
        pthread_mutex_lock(&lock);
        while (ready < count) pthread_cond_wait(&change, &lock);
        pthread_mutex_unlock(&lock);
        /* BIG "-M": all that cuMemGetInfo says is free, less M bytes. */
        size_t big = strtoull(argv[4], NULL, 0);
        if (argv[4][0] == '-') {
            size_t free_bytes = 0, total_bytes = 0;
            cuMemGetInfo(&free_bytes, &total_bytes);
            big = free_bytes - strtoull(argv[4] + 1, NULL, 0);
            printf("free %zu of %zu, asking %zu\n", free_bytes, total_bytes, big);
        }
        CUdeviceptr ptr;
        CUresult result = cuMemAlloc(&ptr, big);
        printf("big %d\n", (int)result);
        if (result == CUDA_SUCCESS) cuMemFree(ptr);
        pthread_mutex_lock(&lock);
        released = 1;
        pthread_cond_broadcast(&change);
        pthread_mutex_unlock(&lock);
        for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
    } else if (argc == 3 && !strcmp(argv[1], "cancel")) {
        thread_bytes = strtoull(argv[2], NULL, 0);
        pthread_t thread;
        pthread_create(&thread, NULL, cancelled_first_call, NULL);
        void *result = NULL;
        pthread_join(thread, &result);
        printf("cancelled %s\n", result == PTHREAD_CANCELED ? "yes" : "no");
    } else {
        fprintf(stderr, "usage: limit_faults refuse SIZE N | idle N SIZE BIG | cancel SIZE\n");
        return 2;
    }
    return 0;
}
