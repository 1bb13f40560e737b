/*
 * A fake libcuda.so.1 for machines without a GPU.
 *
 * It reproduces the behaviour of the real driver that the tracer depends on:
 *  - every entry point is a hidden internal function; the exported name is an
 *    alias of it, so the address cuGetProcAddress hands out equals the export
 *    address (as on driver 580) and cannot be interposed by symbol lookup;
 *  - cuGetProcAddress / cuGetProcAddress_v2 choose the versioned export from
 *    the requested CUDA version and the per-thread-default-stream flag;
 *  - allocations fail with CUDA_ERROR_OUT_OF_MEMORY past a capacity set by
 *    FAKE_CUDA_CAPACITY (bytes per device, default 1 GiB);
 *  - freed device addresses are reused last-in first-out, across threads, so
 *    that tests see the same address handed out again immediately.
 * Memory is never really allocated for device pointers; host allocations are
 * real malloc() memory so that programs may touch them.
 *
 * The driver's own memory is modelled too, each cost set by the environment
 * (bytes; all 0 by default) so that tests can assert the split exactly:
 *  - FAKE_CUDA_CONTEXT_BYTES: a context, made by cuCtxCreate,
 *    cuDevicePrimaryCtxRetain or the first allocation on a device;
 *  - FAKE_CUDA_MODULE_BYTES: each module or library loaded;
 *  - FAKE_CUDA_KERNEL_BYTES: each function's first launch (lazy loading);
 *  - FAKE_CUDA_POOL_GRANULE: stream-ordered allocations come from a pool
 *    that grows in granules and keeps freed memory;
 *  - graph memory nodes reserve their bytes in the device's graph pool;
 *  - cuCtxSetLimit of the heap costs the growth of the heap;
 *  - FAKE_CUDA_OTHERS_BYTES: used on each device by processes not traced;
 *  - FAKE_CUDA_NO_UUID: cuDeviceGetUuid_v2 fails, as on a driver that cannot tell;
 *  - FAKE_CUDA_STREAM_BYTES, FAKE_CUDA_EVENT_BYTES: each stream or event
 *    created; FAKE_CUDA_STREAM_USE_BYTES: each stream's first launch;
 *  - FAKE_CUDA_GRAPH_EXEC_BYTES: each executable graph instantiated; its
 *    first launch reserves the graph memory its captured stream-ordered
 *    allocations need.
 * Streams and pools belong to a device, and stream-ordered allocations are
 * made on their stream's or pool's device, as on a real driver. Captures
 * are modelled: a stream-ordered allocation into a capture is the graph's.
 * With FAKE_NVML_DIR set, each process writes its usage per device to
 * FAKE_NVML_DIR/<pid>.<device>, which the fake NVML reports. With
 * FAKE_CUDA_SHARED_CARD=1 too, the processes share each card, as on a real
 * GPU: what the others (still alive) use is taken from its free memory and
 * from its capacity.
 *
 * Driver calls cost time on a real driver, hundreds of nanoseconds each.
 * The cost model makes that visible:
 *  - FAKE_CUDA_CALL_NS: every entry point busy-waits this long;
 *  - every call into an entry point is counted (calls an entry point makes
 *    into another count once): fakeCudaCallCount() returns the count so
 *    far, and with FAKE_CUDA_CALLS_OUT set each process appends
 *    "<pid> <entry point> <calls>" lines to that file when it exits.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
#include "cuda_types.h"
typedef unsigned int CUdeviceptr_v1;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef void *CUarray;
typedef void *CUmipmappedArray;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { size_t Width, Height; int Format; unsigned NumChannels; } CUDA_ARRAY_DESCRIPTOR;
typedef struct { unsigned Width, Height; int Format; unsigned NumChannels; } CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct { size_t Width, Height, Depth; int Format; unsigned NumChannels, Flags; } CUDA_ARRAY3D_DESCRIPTOR;
typedef struct { unsigned Width, Height, Depth; int Format; unsigned NumChannels, Flags; } CUDA_ARRAY3D_DESCRIPTOR_v1;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_FOUND = 500,
};
enum { SYMBOL_FOUND = 0, SYMBOL_NOT_FOUND = 1, VERSION_NOT_SUFFICIENT = 2 };
#define PER_THREAD_DEFAULT_STREAM 2ull
#define MAX_DEVICES 4

#define HIDDEN static __attribute__((used))
#define EXPORT(name) __attribute__((visibility("default"), alias("impl_" #name)))


/* ---- Cost model ------------------------------------------------------------ */

#define MAX_ENTRY_POINTS 256
static const char *entry_names[MAX_ENTRY_POINTS];
static unsigned long long entry_calls[MAX_ENTRY_POINTS];
static unsigned long long total_calls;
static __thread int entry_depth;
static long long call_ns = -1;

static uint64_t monotonic_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Counts a call into entry point `name` (an outermost one) and spends the
 * configured time in it. */
static int enter_entry_point(const char *name) {
    if (entry_depth++ > 0) return 0;
    __atomic_fetch_add(&total_calls, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < MAX_ENTRY_POINTS; i++) {
        const char *seen = __atomic_load_n(&entry_names[i], __ATOMIC_ACQUIRE);
        if (!seen) {
            const char *expected = NULL;
            if (__atomic_compare_exchange_n(&entry_names[i], &expected, name, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                seen = name;
            else
                seen = expected;
        }
        if (seen == name) {
            __atomic_fetch_add(&entry_calls[i], 1, __ATOMIC_RELAXED);
            break;
        }
    }
    long long ns = __atomic_load_n(&call_ns, __ATOMIC_RELAXED);
    if (ns < 0) {
        const char *text = getenv("FAKE_CUDA_CALL_NS");
        ns = text ? atoll(text) : 0;
        __atomic_store_n(&call_ns, ns, __ATOMIC_RELAXED);
    }
    if (ns > 0) {
        uint64_t until = monotonic_now() + (uint64_t)ns;
        while (monotonic_now() < until) {
        }
    }
    return 0;
}
static void leave_entry_point(int *unused) { (void)unused; entry_depth--; }
#define ENTRY_POINT() __attribute__((cleanup(leave_entry_point), unused)) int entry_guard_ = enter_entry_point(__func__)

static void write_call_counts(void) {
    const char *path = getenv("FAKE_CUDA_CALLS_OUT");
    if (!path) return;
    FILE *out = fopen(path, "a");
    if (!out) return;
    for (int i = 0; i < MAX_ENTRY_POINTS && entry_names[i]; i++)
        fprintf(out, "%d %s %llu\n", (int)getpid(), entry_names[i] + 5 /* "impl_" */, entry_calls[i]);
    fclose(out);
}
__attribute__((constructor)) static void count_calls_at_exit(void) { atexit(write_call_counts); }

/* Calls into the driver's entry points so far, in this process. */
HIDDEN unsigned long long impl_fakeCudaCallCount(void) { return __atomic_load_n(&total_calls, __ATOMIC_RELAXED); }

/* ---- Device address space ------------------------------------------------ */

typedef struct { uint64_t address, size; int device, live, next_free, pool; } Block;

#define MAX_BLOCKS (1 << 20)
#define ADDRESS_SLOTS (1 << 21)
#define FREE_LIST_SLOTS (1 << 16)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Unlike the real driver, usable in a child forked while another thread held
 * the lock, so that tests can have forked children allocate. */
static void reset_lock_in_child(void) { pthread_mutex_init(&lock, NULL); }

/* FAKE_CUDA_SIGNAL_SAFE set: the lock is held with every signal blocked, so
 * that a signal handler may call the driver whatever the code it interrupted
 * was doing (the real driver promises no such thing: only the tests of the
 * tracer's own re-entry from signal handlers need it). */
static int signal_safe = -1;
static __thread sigset_t mask_outside_lock;
static void lock_driver(void) {
    if (signal_safe < 0) signal_safe = getenv("FAKE_CUDA_SIGNAL_SAFE") != NULL;
    if (signal_safe) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &mask_outside_lock);
    }
    pthread_mutex_lock(&lock);
}
static void unlock_driver(void) {
    pthread_mutex_unlock(&lock);
    if (signal_safe) pthread_sigmask(SIG_SETMASK, &mask_outside_lock, NULL);
}
__attribute__((constructor)) static void fork_safe(void) { pthread_atfork(NULL, NULL, reset_lock_in_child); }
static Block blocks[MAX_BLOCKS];
static int block_count;
static uint64_t next_address[MAX_DEVICES];
static uint64_t next_low_address = 0x10000000ull;
static uint64_t used_bytes[MAX_DEVICES];
static __thread int current_device;
/* The driver's own memory, per device: contexts, modules and kernels, limits. */
static uint64_t context_bytes[MAX_DEVICES], module_bytes[MAX_DEVICES], limit_bytes[MAX_DEVICES];
static int has_context[MAX_DEVICES];
static uint64_t pool_used[MAX_DEVICES], pool_reserved[MAX_DEVICES];
static uint64_t graph_used[MAX_DEVICES], graph_reserved[MAX_DEVICES];

static uint64_t env_bytes(const char *name) {
    const char *text = getenv(name);
    return text ? strtoull(text, NULL, 0) : 0;
}

/* Everything this process holds on a device. Called with the lock held. */
static uint64_t object_bytes[MAX_DEVICES];
static uint64_t process_usage(int device) {
    return used_bytes[device] + context_bytes[device] + module_bytes[device] + limit_bytes[device] +
           pool_reserved[device] + graph_reserved[device] + object_bytes[device];
}

/* Tells the fake NVML. Called with the lock held. */
static void publish_usage(int device) {
    const char *dir = getenv("FAKE_NVML_DIR");
    if (!dir) return;
    char path[4000], tmp[4100], text[64];
    snprintf(path, sizeof path, "%s/%d.%d", dir, (int)getpid(), device);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    snprintf(text, sizeof text, "%llu\n", (unsigned long long)process_usage(device));
    fputs(text, f);
    fclose(f);
    rename(tmp, path);
}

/* NVML stops listing a process once it has ended: so do we. */
__attribute__((destructor)) static void unpublish_usage(void) {
    const char *dir = getenv("FAKE_NVML_DIR");
    if (!dir) return;
    for (int device = 0; device < MAX_DEVICES; device++) {
        char path[4000];
        snprintf(path, sizeof path, "%s/%d.%d", dir, (int)getpid(), device);
        unlink(path);
    }
}

/* FAKE_CUDA_SHARED_CARD: what the other live processes publish for `device`. */
static uint64_t others_on_card(int device) {
    /* Asked once: an allocation of the fake must cost what it did without
     * a shared card (the benchmarks' cost model). */
    static int shared = -1;
    if (shared < 0) {
        const char *flag = getenv("FAKE_CUDA_SHARED_CARD");
        shared = getenv("FAKE_NVML_DIR") && flag && strcmp(flag, "1") == 0;
    }
    if (!shared) return 0;
    const char *dir = getenv("FAKE_NVML_DIR");
    DIR *listing = opendir(dir);
    if (!listing) return 0;
    uint64_t sum = 0;
    struct dirent *file;
    while ((file = readdir(listing))) {
        int pid, on;
        if (sscanf(file->d_name, "%d.%d", &pid, &on) != 2 || on != device || pid == (int)getpid()) continue;
        if (strchr(file->d_name, 't') || kill(pid, 0) != 0) continue; /* a .tmp file, or a process gone */
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, file->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned long long bytes = 0;
        if (fscanf(f, "%llu", &bytes) == 1) sum += bytes;
        fclose(f);
    }
    closedir(listing);
    return sum;
}

/* Makes a context on `device` if it has none. Called with the lock held. */
static void ensure_context(int device) {
    if (has_context[device]) return;
    has_context[device] = 1;
    context_bytes[device] = env_bytes("FAKE_CUDA_CONTEXT_BYTES");
    publish_usage(device);
}

/* Live blocks by address (index + 1; 0 is empty, -1 a removed entry). */
static int by_address[ADDRESS_SLOTS];
/* Freed blocks of one (size, device, low) as a LIFO list through next_free. */
typedef struct { uint64_t size; int device, low, head, used; } FreeList;
static FreeList free_lists[FREE_LIST_SLOTS];

static uint64_t capacity(void) {
    const char *text = getenv("FAKE_CUDA_CAPACITY");
    return text ? strtoull(text, NULL, 0) : (1ull << 30);
}

static int device_count(void) {
    const char *text = getenv("FAKE_CUDA_DEVICES");
    int count = text ? atoi(text) : 2;
    return count < 1 ? 1 : (count > MAX_DEVICES ? MAX_DEVICES : count);
}

static uint64_t mix(uint64_t key) { return (key ^ (key >> 31)) * 0x9E3779B97F4A7C15ull; }

static int *address_slot(uint64_t address, int for_insert) {
    for (uint64_t i = mix(address) >> 43;; i = (i + 1) & (ADDRESS_SLOTS - 1)) {
        int *slot = &by_address[i];
        if (*slot == 0) return for_insert ? slot : NULL;
        if (*slot == -1) {
            if (for_insert) return slot;
            continue;
        }
        if (blocks[*slot - 1].address == address) return slot;
    }
}

static FreeList *free_list(uint64_t size, int device, int low) {
    uint64_t key = size * 8 + (uint64_t)device * 2 + (uint64_t)low;
    for (uint64_t i = mix(key) >> 48;; i = (i + 1) & (FREE_LIST_SLOTS - 1)) {
        FreeList *list = &free_lists[i];
        if (!list->used) {
            *list = (FreeList){ size, device, low, -1, 1 };
            return list;
        }
        if (list->size == size && list->device == device && list->low == low) return list;
    }
}

/* Reuses the most recently freed block of the same size, else takes new space. */
static CUresult allocate(uint64_t size, int device, int low, uint64_t *address) {
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    lock_driver();
    if (used_bytes[device] + others_on_card(device) + size > capacity()) {
        unlock_driver();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    FreeList *list = free_list(size, device, low);
    int reuse = list->head;
    if (reuse >= 0) {
        list->head = blocks[reuse].next_free;
    } else {
        if (block_count == MAX_BLOCKS) {
            unlock_driver();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        reuse = block_count++;
        uint64_t *next = low ? &next_low_address : &next_address[device];
        if (*next == 0) *next = 0x7e0000000000ull + ((uint64_t)device << 36);
        blocks[reuse].address = *next;
        blocks[reuse].size = size;
        blocks[reuse].device = device;
        *next += (size + 511) & ~511ull;
    }
    blocks[reuse].live = 1;
    blocks[reuse].pool = 0;
    *address_slot(blocks[reuse].address, 1) = reuse + 1;
    used_bytes[device] += size;
    ensure_context(device);
    publish_usage(device);
    *address = blocks[reuse].address;
    unlock_driver();
    return CUDA_SUCCESS;
}

static CUresult release(uint64_t address) {
    lock_driver();
    int *slot = address_slot(address, 0);
    if (!slot) {
        unlock_driver();
        return CUDA_ERROR_INVALID_VALUE;
    }
    Block *block = &blocks[*slot - 1];
    *slot = -1;
    block->live = 0;
    if (block->pool)
        pool_used[block->device] -= block->size;
    else
        used_bytes[block->device] -= block->size;
    publish_usage(block->device);
    FreeList *list = free_list(block->size, block->device, block->address < 0x100000000ull);
    block->next_free = list->head;
    list->head = (int)(block - blocks);
    unlock_driver();
    return CUDA_SUCCESS;
}

/* ---- Context ------------------------------------------------------------ */

HIDDEN CUresult impl_cuInit(unsigned flags) { ENTRY_POINT(); (void)flags; return CUDA_SUCCESS; }
HIDDEN CUresult impl_cuDeviceGetCount(int *count) { ENTRY_POINT(); *count = device_count(); return CUDA_SUCCESS; }
/* Set by fakeCudaDropContext: the context is gone, as after the runtime's
 * own exit handler tore it down. */
static int context_dropped;
/* FAKE_CUDA_NO_CONTEXT: no context is current, so the device of an allocation cannot be asked. */
HIDDEN CUresult impl_cuCtxGetDevice(CUdevice *device) { ENTRY_POINT();
    if (getenv("FAKE_CUDA_NO_CONTEXT") || context_dropped) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    *device = current_device;
    return CUDA_SUCCESS;
}
/* Contexts are the device ordinal plus one. */
HIDDEN CUresult impl_cuCtxSetCurrent(CUcontext ctx) { ENTRY_POINT();
    intptr_t device = (intptr_t)ctx - 1;
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    current_device = (int)device;
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { ENTRY_POINT();
    if (context_dropped) return 201;
    lock_driver();
    *total = capacity();
    uint64_t taken = process_usage(current_device) + env_bytes("FAKE_CUDA_OTHERS_BYTES") + others_on_card(current_device);
    *free_bytes = taken < capacity() ? capacity() - taken : 0;
    unlock_driver();
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemGetInfo(unsigned *free_bytes, unsigned *total) { ENTRY_POINT();
    size_t f, t;
    impl_cuMemGetInfo_v2(&f, &t);
    *free_bytes = (unsigned)f;
    *total = (unsigned)t;
    return CUDA_SUCCESS;
}

/* ---- Device memory ------------------------------------------------------ */

HIDDEN CUresult impl_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) { ENTRY_POINT();
    uint64_t address;
    CUresult result = allocate(size, current_device, 0, &address);
    if (result == CUDA_SUCCESS) *dptr = address;
    return result;
}
HIDDEN CUresult impl_cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned size) { ENTRY_POINT();
    uint64_t address;
    CUresult result = allocate(size, current_device, 1, &address);
    if (result == CUDA_SUCCESS) *dptr = (CUdeviceptr_v1)address;
    return result;
}
HIDDEN CUresult impl_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned element) { ENTRY_POINT();
    (void)element;
    size_t rounded = (width + 511) & ~(size_t)511;
    uint64_t address;
    CUresult result = allocate((uint64_t)rounded * height, current_device, 0, &address);
    if (result == CUDA_SUCCESS) { *dptr = address; *pitch = rounded; }
    return result;
}
HIDDEN CUresult impl_cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned *pitch, unsigned width, unsigned height, unsigned element) { ENTRY_POINT();
    (void)element;
    unsigned rounded = (width + 511) & ~511u;
    uint64_t address;
    CUresult result = allocate((uint64_t)rounded * height, current_device, 1, &address);
    if (result == CUDA_SUCCESS) { *dptr = (CUdeviceptr_v1)address; *pitch = rounded; }
    return result;
}
HIDDEN CUresult impl_cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags) { ENTRY_POINT();
    (void)flags;
    return impl_cuMemAlloc_v2(dptr, size);
}
/* With FAKE_CUDA_POOL_GRANULE set, a stream-ordered allocation is carved from
 * the device's pool, which grows in granules and never shrinks. */
static int device_of_stream(CUstream stream);
static int capturing(CUstream stream);
static uint64_t capture_graph_allocation(CUstream stream, size_t size);
static int device_of_pool(CUmemoryPool pool);

static CUresult allocate_on(CUdeviceptr *dptr, size_t size, int device, CUstream stream) {
    if (capturing(stream)) {
        *dptr = capture_graph_allocation(stream, size);
        return CUDA_SUCCESS;
    }
    int saved = current_device;
    current_device = device;
    CUresult result = impl_cuMemAlloc_v2(dptr, size);
    current_device = saved;
    uint64_t granule = env_bytes("FAKE_CUDA_POOL_GRANULE");
    if (result != CUDA_SUCCESS || !granule) return result;
    lock_driver();
    Block *block = &blocks[*address_slot(*dptr, 0) - 1];
    block->pool = 1;
    used_bytes[block->device] -= size;
    pool_used[block->device] += size;
    uint64_t needed = (pool_used[block->device] + granule - 1) / granule * granule;
    if (needed > pool_reserved[block->device]) pool_reserved[block->device] = needed;
    publish_usage(block->device);
    unlock_driver();
    return result;
}
HIDDEN CUresult impl_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream) { ENTRY_POINT();
    return allocate_on(dptr, size, device_of_stream(stream), stream);
}
HIDDEN CUresult impl_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream) { ENTRY_POINT();
    return impl_cuMemAllocAsync(dptr, size, stream);
}
HIDDEN CUresult impl_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream) { ENTRY_POINT();
    int device = device_of_pool(pool);
    return allocate_on(dptr, size, device >= 0 ? device : device_of_stream(stream), stream);
}
HIDDEN CUresult impl_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream) { ENTRY_POINT();
    return impl_cuMemAllocFromPoolAsync(dptr, size, pool, stream);
}
HIDDEN CUresult impl_cuMemFree_v2(CUdeviceptr dptr) { ENTRY_POINT(); return release(dptr); }
HIDDEN CUresult impl_cuMemFree(CUdeviceptr_v1 dptr) { ENTRY_POINT(); return release(dptr); }
static int is_graph_address(uint64_t address);
HIDDEN CUresult impl_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) { ENTRY_POINT();
    /* Into a capture, or of a graph's allocation: the graph's business. */
    if (capturing(stream) || is_graph_address(dptr)) return CUDA_SUCCESS;
    return release(dptr);
}
HIDDEN CUresult impl_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) { ENTRY_POINT(); return impl_cuMemFreeAsync(dptr, stream); }

/* ---- Virtual memory management ------------------------------------------ */

typedef struct { uint64_t size; int device, released, mappings, live; } Physical;
static Physical physical[4096];
static int physical_count;
static uint64_t next_reservation = 0x600000000000ull;

/* Handles are opaque numbers; index + 1, shifted so they look like no address. */
HIDDEN CUresult impl_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) { ENTRY_POINT();
    (void)flags;
    int device = prop->location.id;
    if (prop->location.type != 1 || device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    lock_driver();
    if (used_bytes[device] + size > capacity()) { unlock_driver(); return CUDA_ERROR_OUT_OF_MEMORY; }
    if (physical_count == 4096) { unlock_driver(); return CUDA_ERROR_OUT_OF_MEMORY; }
    int index = physical_count++;
    physical[index] = (Physical){ size, device, 0, 0, 1 };
    used_bytes[device] += size;
    unlock_driver();
    *handle = ((CUmemGenericAllocationHandle)(index + 1)) << 4;
    return CUDA_SUCCESS;
}
static Physical *physical_of(CUmemGenericAllocationHandle handle) {
    uint64_t index = (handle >> 4) - 1;
    if ((handle & 15) || index >= (uint64_t)physical_count || !physical[index].live) return NULL;
    return &physical[index];
}
static void drop_if_unused(Physical *p) {
    if (p->released && p->mappings == 0) { p->live = 0; used_bytes[p->device] -= p->size; }
}
HIDDEN CUresult impl_cuMemRelease(CUmemGenericAllocationHandle handle) { ENTRY_POINT();
    lock_driver();
    Physical *p = physical_of(handle);
    if (!p || p->released) { unlock_driver(); return CUDA_ERROR_INVALID_VALUE; }
    p->released = 1;
    drop_if_unused(p);
    unlock_driver();
    return CUDA_SUCCESS;
}
typedef struct { uint64_t address, size; CUmemGenericAllocationHandle handle; } Mapping;
static Mapping mappings[4096];
static int mapping_count;
HIDDEN CUresult impl_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) { ENTRY_POINT();
    (void)alignment; (void)addr; (void)flags;
    lock_driver();
    *ptr = next_reservation;
    next_reservation += (size + 0x1fffff) & ~0x1fffffull;
    unlock_driver();
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemAddressFree(CUdeviceptr ptr, size_t size) { ENTRY_POINT(); (void)ptr; (void)size; return CUDA_SUCCESS; }
HIDDEN CUresult impl_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) { ENTRY_POINT();
    (void)offset; (void)flags;
    lock_driver();
    Physical *p = physical_of(handle);
    if (!p || mapping_count == 4096) { unlock_driver(); return CUDA_ERROR_INVALID_VALUE; }
    mappings[mapping_count++] = (Mapping){ ptr, size, handle };
    p->mappings++;
    unlock_driver();
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemUnmap(CUdeviceptr ptr, size_t size) { ENTRY_POINT();
    lock_driver();
    int removed = 0;
    for (int i = 0; i < mapping_count;) {
        if (mappings[i].address >= ptr && mappings[i].address + mappings[i].size <= ptr + size) {
            Physical *p = physical_of(mappings[i].handle);
            if (p) { p->mappings--; drop_if_unused(p); }
            mappings[i] = mappings[--mapping_count];
            removed++;
        } else {
            i++;
        }
    }
    unlock_driver();
    return removed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- Pinned host memory --------------------------------------------------- */

static void *host_blocks[4096];
static int host_count;
static CUresult host_remember(void *p) {
    lock_driver();
    if (host_count == 4096) { unlock_driver(); return CUDA_ERROR_OUT_OF_MEMORY; }
    host_blocks[host_count++] = p;
    unlock_driver();
    return CUDA_SUCCESS;
}
static int host_forget(void *p) {
    lock_driver();
    for (int i = 0; i < host_count; i++) {
        if (host_blocks[i] == p) {
            host_blocks[i] = host_blocks[--host_count];
            unlock_driver();
            return 1;
        }
    }
    unlock_driver();
    return 0;
}
HIDDEN CUresult impl_cuMemHostAlloc(void **pp, size_t size, unsigned flags) { ENTRY_POINT();
    (void)flags;
    if (size > capacity()) return CUDA_ERROR_OUT_OF_MEMORY;
    *pp = malloc(size);
    return host_remember(*pp);
}
HIDDEN CUresult impl_cuMemAllocHost_v2(void **pp, size_t size) { ENTRY_POINT(); return impl_cuMemHostAlloc(pp, size, 0); }
HIDDEN CUresult impl_cuMemAllocHost(void **pp, unsigned size) { ENTRY_POINT(); return impl_cuMemHostAlloc(pp, size, 0); }
HIDDEN CUresult impl_cuMemFreeHost(void *p) { ENTRY_POINT();
    if (!host_forget(p)) return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemHostRegister_v2(void *p, size_t size, unsigned flags) { ENTRY_POINT(); (void)size; (void)flags; return host_remember(p); }
HIDDEN CUresult impl_cuMemHostRegister(void *p, size_t size, unsigned flags) { ENTRY_POINT(); return impl_cuMemHostRegister_v2(p, size, flags); }
HIDDEN CUresult impl_cuMemHostUnregister(void *p) { ENTRY_POINT(); return host_forget(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

/* ---- Arrays -------------------------------------------------------------- */

HIDDEN CUresult impl_cuArrayCreate_v2(CUarray *handle, const CUDA_ARRAY_DESCRIPTOR *desc) { ENTRY_POINT();
    if (desc->Width == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuArrayCreate(CUarray *handle, const CUDA_ARRAY_DESCRIPTOR_v1 *desc) { ENTRY_POINT();
    if (desc->Width == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuArray3DCreate_v2(CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc) { ENTRY_POINT();
    if (desc->Width == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuArray3DCreate(CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc) { ENTRY_POINT();
    if (desc->Width == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMipmappedArrayCreate(CUmipmappedArray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels) { ENTRY_POINT();
    if (desc->Width == 0 || levels == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuArrayDestroy(CUarray array) { ENTRY_POINT(); free(array); return CUDA_SUCCESS; }
HIDDEN CUresult impl_cuMipmappedArrayDestroy(CUmipmappedArray array) { ENTRY_POINT(); free(array); return CUDA_SUCCESS; }

/* ---- IPC ----------------------------------------------------------------- */

/* An imported pointer is whatever address the exporter wrote into the handle. */
HIDDEN CUresult impl_cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned flags) { ENTRY_POINT();
    (void)flags;
    uint64_t address;
    memcpy(&address, handle.reserved, sizeof address);
    if (address == 0) return CUDA_ERROR_INVALID_VALUE;
    *dptr = address + 0x100000000000ull;
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned flags) { ENTRY_POINT();
    return impl_cuIpcOpenMemHandle_v2(dptr, handle, flags);
}
HIDDEN CUresult impl_cuIpcCloseMemHandle(CUdeviceptr dptr) { ENTRY_POINT(); return dptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

/* ---- Contexts, modules, launches, pools, graphs, devices ---------------------- */

typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUlibrary;
typedef void *CUgraph;
typedef void *CUgraphNode;
typedef struct { unsigned char bytes[16]; } CUuuid;

static size_t limits[MAX_DEVICES][3];
static int limits_set[MAX_DEVICES];
static uintptr_t next_module = 0x51000;
/* Functions launched, per device: (function, device) pairs. */
static uintptr_t launched[4096][2];
static int launched_count;

HIDDEN CUresult impl_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) { ENTRY_POINT();
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    lock_driver();
    ensure_context(device);
    unlock_driver();
    *ctx = (CUcontext)(intptr_t)(device + 1);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuCtxCreate_v2(CUcontext *ctx, unsigned flags, CUdevice device) { ENTRY_POINT();
    (void)flags;
    CUresult result = impl_cuDevicePrimaryCtxRetain(ctx, device);
    if (result == CUDA_SUCCESS) current_device = device;
    return result;
}
HIDDEN CUresult impl_cuCtxPushCurrent_v2(CUcontext ctx) { ENTRY_POINT(); return impl_cuCtxSetCurrent(ctx); }

static size_t *limit_slot(int limit) {
    if (limit < 0 || limit > 2) return NULL;
    if (!limits_set[current_device]) {
        limits[current_device][0] = 1024;
        limits[current_device][1] = 1 << 20;
        limits[current_device][2] = 8 << 20;
        limits_set[current_device] = 1;
    }
    return &limits[current_device][limit];
}
HIDDEN CUresult impl_cuCtxGetLimit(size_t *value, int limit) { ENTRY_POINT();
    lock_driver();
    size_t *slot = limit_slot(limit);
    if (slot) *value = *slot;
    unlock_driver();
    return slot ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* A bigger device heap costs its growth. */
HIDDEN CUresult impl_cuCtxSetLimit(int limit, size_t value) { ENTRY_POINT();
    lock_driver();
    size_t *slot = limit_slot(limit);
    if (slot) {
        if (limit == 2 && value > *slot) limit_bytes[current_device] += value - *slot;
        *slot = value;
        publish_usage(current_device);
    }
    unlock_driver();
    return slot ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult load(void **handle) {
    lock_driver();
    ensure_context(current_device);
    module_bytes[current_device] += env_bytes("FAKE_CUDA_MODULE_BYTES");
    *handle = (void *)(next_module += 0x100);
    publish_usage(current_device);
    unlock_driver();
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuModuleLoadData(CUmodule *module, const void *image) { ENTRY_POINT(); (void)image; return load(module); }
HIDDEN CUresult impl_cuLibraryLoadData(CUlibrary *library, const void *code, void *jit_options, void **jit_values,
                                       unsigned jit_count, void *library_options, void **library_values,
                                       unsigned library_count) { ENTRY_POINT();
    return load(library);
}
/* Functions are the module handle plus a small hash of the name. */
HIDDEN CUresult impl_cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name) { ENTRY_POINT();
    uintptr_t hash = 0;
    for (const char *c = name; *c; c++) hash = hash * 31 + (unsigned char)*c;
    *function = (CUfunction)((uintptr_t)module + 1 + hash % 0xf0);
    return CUDA_SUCCESS;
}
/* The first launch of a function on a device loads it, as does the first
 * question about it (cuFuncGetAttribute). */
static CUresult launch(CUfunction f) {
    if (!f) return CUDA_ERROR_INVALID_VALUE;
    lock_driver();
    int seen = 0;
    for (int i = 0; i < launched_count && !seen; i++)
        seen = launched[i][0] == (uintptr_t)f && launched[i][1] == (uintptr_t)current_device;
    if (!seen && launched_count < 4096) {
        launched[launched_count][0] = (uintptr_t)f;
        launched[launched_count][1] = (uintptr_t)current_device;
        launched_count++;
        module_bytes[current_device] += env_bytes("FAKE_CUDA_KERNEL_BYTES");
        publish_usage(current_device);
    }
    unlock_driver();
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuFuncGetAttribute(int *value, int attribute, CUfunction f) { ENTRY_POINT();
    CUresult result = launch(f);
    if (result == CUDA_SUCCESS) *value = attribute == 0 ? 1024 : 0;
    return result;
}
static void first_launch_into(CUstream stream);
HIDDEN CUresult impl_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned shared, CUstream stream, void **params, void **extra) { ENTRY_POINT();
    CUresult result = launch(f);
    if (result == CUDA_SUCCESS) first_launch_into(stream);
    return result;
}
HIDDEN CUresult impl_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                         unsigned by, unsigned bz, unsigned shared, CUstream stream, void **params,
                                         void **extra) { ENTRY_POINT();
    return launch(f);
}
HIDDEN CUresult impl_cuLaunchKernelEx(const void *config, CUfunction f, void **params, void **extra) { ENTRY_POINT(); return launch(f); }
HIDDEN CUresult impl_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                               unsigned by, unsigned bz, unsigned shared, CUstream stream,
                                               void **params) { ENTRY_POINT();
    return launch(f);
}

/* One pool per device, 0x9000 + ordinal; other handles are device 0's. */
HIDDEN CUresult impl_cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice device) { ENTRY_POINT();
    *pool = (CUmemoryPool)(uintptr_t)(0x9000 + device);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemPoolGetAttribute(CUmemoryPool pool, int attribute, void *value) { ENTRY_POINT();
    uintptr_t device = (uintptr_t)pool - 0x9000;
    if (device >= MAX_DEVICES) device = 0;
    lock_driver();
    uint64_t result = attribute == 5 ? pool_reserved[device] : attribute == 7 ? pool_used[device] : 0;
    unlock_driver();
    *(uint64_t *)value = result;
    return attribute == 5 || attribute == 7 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
HIDDEN CUresult impl_cuDeviceGetGraphMemAttribute(CUdevice device, int attribute, void *value) { ENTRY_POINT();
    if (context_dropped) return 201;
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    lock_driver();
    uint64_t result = attribute == 2 ? graph_reserved[device] : attribute == 0 ? graph_used[device] : 0;
    unlock_driver();
    *(uint64_t *)value = result;
    return CUDA_SUCCESS;
}
static uint64_t next_graph_address = 0x700000000000ull;
HIDDEN CUresult impl_cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t count,
                                            CUDA_MEM_ALLOC_NODE_PARAMS *params) { ENTRY_POINT();
    if (!params || !params->bytesize) return CUDA_ERROR_INVALID_VALUE;
    lock_driver();
    int device = params->poolProps.location.id;
    if (device < 0 || device >= device_count()) device = current_device;
    ensure_context(device);
    graph_reserved[device] += params->bytesize;
    graph_used[device] += params->bytesize;
    params->dptr = next_graph_address;
    next_graph_address += (params->bytesize + 0xfff) & ~0xfffull;
    *node = (CUgraphNode)(uintptr_t)params->dptr;
    publish_usage(device);
    unlock_driver();
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t count,
                                           CUdeviceptr dptr) { ENTRY_POINT();
    *node = (CUgraphNode)(uintptr_t)(dptr + 1);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) { ENTRY_POINT();
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    /* FAKE_CUDA_NO_UUID: a driver that cannot tell a device's UUID. */
    if (getenv("FAKE_CUDA_NO_UUID")) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
    for (int i = 0; i < 16; i++) uuid->bytes[i] = (unsigned char)(0xf0 + i);
    uuid->bytes[15] = (unsigned char)device;
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuDeviceGetName(char *name, int length, CUdevice device) { ENTRY_POINT();
    if (device < 0 || device >= device_count() || length < 1) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)length, "Fake GPU %d", device);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) { ENTRY_POINT();
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    *bytes = capacity();
    return CUDA_SUCCESS;
}


/* ---- Streams, events, pools, captures and executable graphs ------------------ */

typedef void *CUevent;
typedef void *CUgraphExec;
#define MAX_OBJECTS 65536
/* Streams are 0x50000000 + 16 * n, events 0x60000000 + 16 * n; pools 0x9100 + n. */
static int stream_devices[MAX_OBJECTS];
static int stream_count;
static int event_count;
static int pool_devices[256];
static int pool_count;
/* Streams being captured, with the graph memory their allocations take. */
typedef struct { CUstream stream; uint64_t graph_bytes; int device; } Capture;
static Capture captures[64];
static uint64_t graph_bytes_of[MAX_OBJECTS];
static int graph_count;
typedef struct { uint64_t graph_bytes; int device, launched, live; } Exec;
static Exec execs[MAX_OBJECTS];
static int exec_count;

static int stream_index(CUstream stream) {
    uintptr_t s = (uintptr_t)stream;
    if (s < 0x50000000u || s >= 0x50000000u + 16u * MAX_OBJECTS || s % 16) return -1;
    int index = (int)((s - 0x50000000u) / 16);
    return index < stream_count ? index : -1;
}
static int device_of_stream(CUstream stream) {
    int index = stream_index(stream);
    return index >= 0 ? stream_devices[index] : current_device;
}
static int device_of_pool(CUmemoryPool pool) {
    uintptr_t p = (uintptr_t)pool;
    return p >= 0x9100 && p < 0x9100u + (uintptr_t)pool_count ? pool_devices[p - 0x9100] : -1;
}
static Capture *capture_of(CUstream stream) {
    for (int i = 0; i < 64; i++)
        if (captures[i].stream && captures[i].stream == stream) return &captures[i];
    return NULL;
}
static int capturing(CUstream stream) { return stream && capture_of(stream) != NULL; }
static int is_graph_address(uint64_t address) {
    return address >= 0x700000000000ull && address < next_graph_address;
}
/* A stream's resources are set up at its first launch. */
static unsigned char stream_launched[MAX_OBJECTS];
static void first_launch_into(CUstream stream) {
    int index = stream_index(stream);
    if (index < 0) return;
    lock_driver();
    if (!stream_launched[index]) {
        stream_launched[index] = 1;
        object_bytes[stream_devices[index]] += env_bytes("FAKE_CUDA_STREAM_USE_BYTES");
        publish_usage(stream_devices[index]);
    }
    unlock_driver();
}
static uint64_t capture_graph_allocation(CUstream stream, size_t size) {
    lock_driver();
    Capture *capture = capture_of(stream);
    capture->graph_bytes += size;
    uint64_t address = next_graph_address;
    next_graph_address += (size + 0xfff) & ~0xfffull;
    unlock_driver();
    return address;
}

static CUresult create_object(int *count, uintptr_t base, uint64_t bytes, int device, void **handle) {
    lock_driver();
    if (*count >= MAX_OBJECTS) {
        unlock_driver();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int index = (*count)++;
    ensure_context(device);
    object_bytes[device] += bytes;
    publish_usage(device);
    unlock_driver();
    *handle = (void *)(base + 16u * (uintptr_t)index);
    return CUDA_SUCCESS;
}
/* A destroyed stream's handle, given out again by the next creation, as a
 * real driver recycles its allocations; -1 when there is none. */
static int recycled_stream = -1;
HIDDEN CUresult impl_cuStreamCreate(CUstream *stream, unsigned flags) { ENTRY_POINT();
    if (recycled_stream >= 0) {
        lock_driver();
        int index = recycled_stream;
        recycled_stream = -1;
        stream_devices[index] = current_device;
        stream_launched[index] = 0;
        unlock_driver();
        *stream = (CUstream)(uintptr_t)(0x50000000u + 16u * (unsigned)index);
        return CUDA_SUCCESS;
    }
    CUresult result = create_object(&stream_count, 0x50000000u, env_bytes("FAKE_CUDA_STREAM_BYTES"), current_device,
                                    stream);
    if (result == CUDA_SUCCESS) stream_devices[stream_index(*stream)] = current_device;
    return result;
}
HIDDEN CUresult impl_cuStreamCreateWithPriority(CUstream *stream, unsigned flags, int priority) { ENTRY_POINT();
    return impl_cuStreamCreate(stream, flags);
}
HIDDEN CUresult impl_cuStreamDestroy_v2(CUstream stream) { ENTRY_POINT();
    int index = stream_index(stream);
    if (index < 0) return CUDA_ERROR_INVALID_VALUE;
    recycled_stream = index;
    return CUDA_SUCCESS;
}
/* Resets device's primary context: a no-op here, but a call every thread's
 * current context may depend on. */
HIDDEN CUresult impl_cuDevicePrimaryCtxReset_v2(CUdevice device) { ENTRY_POINT();
    return device >= 0 && device < device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* FAKE_CUDA_NO_STREAM_DEVICE: a driver older than 12.8, without the call. */
HIDDEN CUresult impl_cuStreamGetDevice(CUstream stream, CUdevice *device) { ENTRY_POINT();
    if (getenv("FAKE_CUDA_NO_STREAM_DEVICE")) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
    *device = device_of_stream(stream);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuEventCreate(CUevent *event, unsigned flags) { ENTRY_POINT();
    return create_object(&event_count, 0x60000000u, env_bytes("FAKE_CUDA_EVENT_BYTES"), current_device, event);
}
HIDDEN CUresult impl_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) { ENTRY_POINT();
    if (!props || props->location.id < 0 || props->location.id >= device_count() || pool_count >= 256)
        return CUDA_ERROR_INVALID_VALUE;
    pool_devices[pool_count] = props->location.id;
    *pool = (CUmemoryPool)(uintptr_t)(0x9100 + pool_count++);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuStreamBeginCapture_v2(CUstream stream, int mode) { ENTRY_POINT();
    if (!stream || capturing(stream)) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 64; i++)
        if (!captures[i].stream) {
            captures[i] = (Capture){ stream, 0, device_of_stream(stream) };
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_OUT_OF_MEMORY;
}
HIDDEN CUresult impl_cuStreamIsCapturing(CUstream stream, int *status) { ENTRY_POINT();
    *status = capturing(stream) ? 1 : 0;
    return CUDA_SUCCESS;
}
/* A graph remembers the graph memory its captured allocations need. */
HIDDEN CUresult impl_cuStreamEndCapture(CUstream stream, CUgraph *graph) { ENTRY_POINT();
    Capture *capture = capture_of(stream);
    if (!capture || graph_count >= MAX_OBJECTS) return CUDA_ERROR_INVALID_VALUE;
    graph_bytes_of[graph_count] = capture->graph_bytes;
    *graph = (CUgraph)(uintptr_t)(0x70000000u + 16u * (unsigned)graph_count++);
    capture->stream = NULL;
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags) { ENTRY_POINT();
    uintptr_t g = (uintptr_t)graph;
    int index = (int)((g - 0x70000000u) / 16);
    if (g < 0x70000000u || index >= graph_count || exec_count >= MAX_OBJECTS) return CUDA_ERROR_INVALID_VALUE;
    lock_driver();
    execs[exec_count] = (Exec){ graph_bytes_of[index], current_device, 0, 1 };
    object_bytes[current_device] += env_bytes("FAKE_CUDA_GRAPH_EXEC_BYTES");
    publish_usage(current_device);
    unlock_driver();
    *exec = (CUgraphExec)(uintptr_t)(0x78000000u + 16u * (unsigned)exec_count++);
    return CUDA_SUCCESS;
}
static Exec *exec_of(CUgraphExec exec) {
    uintptr_t e = (uintptr_t)exec;
    int index = (int)((e - 0x78000000u) / 16);
    return e >= 0x78000000u && index < exec_count && execs[index].live ? &execs[index] : NULL;
}
/* The first launch reserves the graph's memory in the device's graph pool. */
HIDDEN CUresult impl_cuGraphLaunch(CUgraphExec exec, CUstream stream) { ENTRY_POINT();
    Exec *e = exec_of(exec);
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    lock_driver();
    if (!e->launched) {
        e->launched = 1;
        graph_reserved[e->device] += e->graph_bytes;
        graph_used[e->device] += e->graph_bytes;
        publish_usage(e->device);
    }
    unlock_driver();
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuGraphExecDestroy(CUgraphExec exec) { ENTRY_POINT();
    Exec *e = exec_of(exec);
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    e->live = 0;
    return CUDA_SUCCESS;
}

/* ---- Test hooks: what a real driver does out of our sight ----------------------- */

/* Makes `device` current on this thread without any entry point, as the
 * runtime does through its private table. */
HIDDEN void impl_fakeCudaSetDeviceQuietly(int device) { current_device = device; }
/* The context is gone: readings fail from now on. */
HIDDEN void impl_fakeCudaDropContext(void) { context_dropped = 1; }

/* ---- Entry point lookup -------------------------------------------------- */

typedef struct {
    const char *name;
    int first_version;   /* oldest CUDA version that has the symbol at all */
    void *legacy;        /* export for versions below `versioned_since` */
    int versioned_since; /* 0 if there is a single version */
    void *versioned;
    void *per_thread;    /* _ptsz twin, or NULL */
} ProcEntry;

HIDDEN CUresult impl_cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);
HIDDEN CUresult impl_cuGetProcAddress(const char *, void **, int, unsigned long long);

static const ProcEntry entries[] = {
    { "cuGetProcAddress", 11030, (void *)impl_cuGetProcAddress, 12000, (void *)impl_cuGetProcAddress_v2, NULL },
    { "cuInit", 2000, (void *)impl_cuInit, 0, NULL, NULL },
    { "cuDeviceGetCount", 2000, (void *)impl_cuDeviceGetCount, 0, NULL, NULL },
    { "cuCtxGetDevice", 2000, (void *)impl_cuCtxGetDevice, 0, NULL, NULL },
    { "cuCtxSetCurrent", 4000, (void *)impl_cuCtxSetCurrent, 0, NULL, NULL },
    { "cuMemGetInfo", 2000, (void *)impl_cuMemGetInfo, 3020, (void *)impl_cuMemGetInfo_v2, NULL },
    { "cuMemAlloc", 2000, (void *)impl_cuMemAlloc, 3020, (void *)impl_cuMemAlloc_v2, NULL },
    { "cuMemAllocPitch", 2000, (void *)impl_cuMemAllocPitch, 3020, (void *)impl_cuMemAllocPitch_v2, NULL },
    { "cuMemFree", 2000, (void *)impl_cuMemFree, 3020, (void *)impl_cuMemFree_v2, NULL },
    { "cuMemAllocManaged", 6000, (void *)impl_cuMemAllocManaged, 0, NULL, NULL },
    { "cuMemAllocAsync", 11020, (void *)impl_cuMemAllocAsync, 0, NULL, (void *)impl_cuMemAllocAsync_ptsz },
    { "cuMemAllocFromPoolAsync", 11020, (void *)impl_cuMemAllocFromPoolAsync, 0, NULL, (void *)impl_cuMemAllocFromPoolAsync_ptsz },
    { "cuMemFreeAsync", 11020, (void *)impl_cuMemFreeAsync, 0, NULL, (void *)impl_cuMemFreeAsync_ptsz },
    { "cuMemCreate", 10020, (void *)impl_cuMemCreate, 0, NULL, NULL },
    { "cuMemRelease", 10020, (void *)impl_cuMemRelease, 0, NULL, NULL },
    { "cuMemAddressReserve", 10020, (void *)impl_cuMemAddressReserve, 0, NULL, NULL },
    { "cuMemAddressFree", 10020, (void *)impl_cuMemAddressFree, 0, NULL, NULL },
    { "cuMemMap", 10020, (void *)impl_cuMemMap, 0, NULL, NULL },
    { "cuMemUnmap", 10020, (void *)impl_cuMemUnmap, 0, NULL, NULL },
    { "cuMemHostAlloc", 2020, (void *)impl_cuMemHostAlloc, 0, NULL, NULL },
    { "cuMemAllocHost", 2000, (void *)impl_cuMemAllocHost, 3020, (void *)impl_cuMemAllocHost_v2, NULL },
    { "cuMemFreeHost", 2000, (void *)impl_cuMemFreeHost, 0, NULL, NULL },
    { "cuMemHostRegister", 4000, (void *)impl_cuMemHostRegister, 6050, (void *)impl_cuMemHostRegister_v2, NULL },
    { "cuMemHostUnregister", 4000, (void *)impl_cuMemHostUnregister, 0, NULL, NULL },
    { "cuArrayCreate", 2000, (void *)impl_cuArrayCreate, 3020, (void *)impl_cuArrayCreate_v2, NULL },
    { "cuArray3DCreate", 2000, (void *)impl_cuArray3DCreate, 3020, (void *)impl_cuArray3DCreate_v2, NULL },
    { "cuMipmappedArrayCreate", 5000, (void *)impl_cuMipmappedArrayCreate, 0, NULL, NULL },
    { "cuArrayDestroy", 2000, (void *)impl_cuArrayDestroy, 0, NULL, NULL },
    { "cuMipmappedArrayDestroy", 5000, (void *)impl_cuMipmappedArrayDestroy, 0, NULL, NULL },
    { "cuIpcOpenMemHandle", 4010, (void *)impl_cuIpcOpenMemHandle, 11000, (void *)impl_cuIpcOpenMemHandle_v2, NULL },
    { "cuIpcCloseMemHandle", 4010, (void *)impl_cuIpcCloseMemHandle, 0, NULL, NULL },
    { "cuDevicePrimaryCtxRetain", 7000, (void *)impl_cuDevicePrimaryCtxRetain, 0, NULL, NULL },
    { "cuCtxCreate", 3020, (void *)impl_cuCtxCreate_v2, 0, NULL, NULL },
    { "cuCtxPushCurrent", 4000, (void *)impl_cuCtxPushCurrent_v2, 0, NULL, NULL },
    { "cuCtxGetLimit", 3010, (void *)impl_cuCtxGetLimit, 0, NULL, NULL },
    { "cuCtxSetLimit", 3010, (void *)impl_cuCtxSetLimit, 0, NULL, NULL },
    { "cuModuleLoadData", 2000, (void *)impl_cuModuleLoadData, 0, NULL, NULL },
    { "cuModuleGetFunction", 2000, (void *)impl_cuModuleGetFunction, 0, NULL, NULL },
    { "cuLibraryLoadData", 12000, (void *)impl_cuLibraryLoadData, 0, NULL, NULL },
    { "cuFuncGetAttribute", 2020, (void *)impl_cuFuncGetAttribute, 0, NULL, NULL },
    { "cuLaunchKernel", 4000, (void *)impl_cuLaunchKernel, 0, NULL, (void *)impl_cuLaunchKernel_ptsz },
    { "cuLaunchKernelEx", 11060, (void *)impl_cuLaunchKernelEx, 0, NULL, NULL },
    { "cuLaunchCooperativeKernel", 9000, (void *)impl_cuLaunchCooperativeKernel, 0, NULL, NULL },
    { "cuDeviceGetMemPool", 11020, (void *)impl_cuDeviceGetMemPool, 0, NULL, NULL },
    { "cuMemPoolGetAttribute", 11020, (void *)impl_cuMemPoolGetAttribute, 0, NULL, NULL },
    { "cuDeviceGetGraphMemAttribute", 11040, (void *)impl_cuDeviceGetGraphMemAttribute, 0, NULL, NULL },
    { "cuGraphAddMemAllocNode", 11040, (void *)impl_cuGraphAddMemAllocNode, 0, NULL, NULL },
    { "cuGraphAddMemFreeNode", 11040, (void *)impl_cuGraphAddMemFreeNode, 0, NULL, NULL },
    { "cuDeviceGetUuid", 11040, (void *)impl_cuDeviceGetUuid_v2, 0, NULL, NULL },
    { "cuDeviceGetName", 2000, (void *)impl_cuDeviceGetName, 0, NULL, NULL },
    { "cuDeviceTotalMem", 2000, (void *)impl_cuDeviceTotalMem_v2, 0, NULL, NULL },
    { "cuStreamCreate", 2000, (void *)impl_cuStreamCreate, 0, NULL, NULL },
    { "cuStreamCreateWithPriority", 5050, (void *)impl_cuStreamCreateWithPriority, 0, NULL, NULL },
    { "cuStreamDestroy", 4000, (void *)impl_cuStreamDestroy_v2, 0, NULL, NULL },
    { "cuDevicePrimaryCtxReset", 7000, (void *)impl_cuDevicePrimaryCtxReset_v2, 0, NULL, NULL },
    { "cuStreamGetDevice", 12080, (void *)impl_cuStreamGetDevice, 0, NULL, NULL },
    { "cuEventCreate", 2000, (void *)impl_cuEventCreate, 0, NULL, NULL },
    { "cuMemPoolCreate", 11020, (void *)impl_cuMemPoolCreate, 0, NULL, NULL },
    { "cuStreamBeginCapture", 10010, (void *)impl_cuStreamBeginCapture_v2, 0, NULL, NULL },
    { "cuStreamIsCapturing", 10000, (void *)impl_cuStreamIsCapturing, 0, NULL, NULL },
    { "cuStreamEndCapture", 10000, (void *)impl_cuStreamEndCapture, 0, NULL, NULL },
    { "cuGraphInstantiate", 11040, (void *)impl_cuGraphInstantiateWithFlags, 0, NULL, NULL },
    { "cuGraphLaunch", 10000, (void *)impl_cuGraphLaunch, 0, NULL, NULL },
    { "cuGraphExecDestroy", 10000, (void *)impl_cuGraphExecDestroy, 0, NULL, NULL },
};

HIDDEN CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) { ENTRY_POINT();
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        const ProcEntry *e = &entries[i];
        if (strcmp(e->name, symbol) != 0) continue;
        if (version < e->first_version) {
            if (status) *status = VERSION_NOT_SUFFICIENT;
            return CUDA_ERROR_NOT_FOUND;
        }
        void *chosen = (e->versioned_since && version >= e->versioned_since) ? e->versioned : e->legacy;
        if ((flags & PER_THREAD_DEFAULT_STREAM) && e->per_thread) chosen = e->per_thread;
        *pfn = chosen;
        if (status) *status = SYMBOL_FOUND;
        return CUDA_SUCCESS;
    }
    if (status) *status = SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
HIDDEN CUresult impl_cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) { ENTRY_POINT();
    return impl_cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* ---- Test hook: the driver looking itself up --------------------------------- */

/* The real driver resolves some of its own entry points with dlsym. Such a
 * lookup must reach the driver's own function, never a tracer's hook: returns
 * 1 when dlsym on our own handle gives back our own cuMemAlloc_v2. */
HIDDEN int impl_fakeCudaLooksItselfUp(void) {
    void *self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return self && dlsym(self, "cuMemAlloc_v2") == (void *)impl_cuMemAlloc_v2;
}

/* ---- Exports ------------------------------------------------------------- */

CUresult cuInit(unsigned) EXPORT(cuInit);
CUresult cuDeviceGetCount(int *) EXPORT(cuDeviceGetCount);
CUresult cuCtxGetDevice(CUdevice *) EXPORT(cuCtxGetDevice);
CUresult cuCtxSetCurrent(CUcontext) EXPORT(cuCtxSetCurrent);
CUresult cuMemGetInfo(unsigned *, unsigned *) EXPORT(cuMemGetInfo);
CUresult cuMemGetInfo_v2(size_t *, size_t *) EXPORT(cuMemGetInfo_v2);
CUresult cuMemAlloc(CUdeviceptr_v1 *, unsigned) EXPORT(cuMemAlloc);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t) EXPORT(cuMemAlloc_v2);
CUresult cuMemAllocPitch(CUdeviceptr_v1 *, unsigned *, unsigned, unsigned, unsigned) EXPORT(cuMemAllocPitch);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned) EXPORT(cuMemAllocPitch_v2);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned) EXPORT(cuMemAllocManaged);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream) EXPORT(cuMemAllocAsync);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream) EXPORT(cuMemAllocAsync_ptsz);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream) EXPORT(cuMemAllocFromPoolAsync);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *, size_t, CUmemoryPool, CUstream) EXPORT(cuMemAllocFromPoolAsync_ptsz);
CUresult cuMemFree(CUdeviceptr_v1) EXPORT(cuMemFree);
CUresult cuMemFree_v2(CUdeviceptr) EXPORT(cuMemFree_v2);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream) EXPORT(cuMemFreeAsync);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream) EXPORT(cuMemFreeAsync_ptsz);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) EXPORT(cuMemCreate);
CUresult cuMemRelease(CUmemGenericAllocationHandle) EXPORT(cuMemRelease);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) EXPORT(cuMemAddressReserve);
CUresult cuMemAddressFree(CUdeviceptr, size_t) EXPORT(cuMemAddressFree);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) EXPORT(cuMemMap);
CUresult cuMemUnmap(CUdeviceptr, size_t) EXPORT(cuMemUnmap);
CUresult cuMemHostAlloc(void **, size_t, unsigned) EXPORT(cuMemHostAlloc);
CUresult cuMemAllocHost(void **, unsigned) EXPORT(cuMemAllocHost);
CUresult cuMemAllocHost_v2(void **, size_t) EXPORT(cuMemAllocHost_v2);
CUresult cuMemFreeHost(void *) EXPORT(cuMemFreeHost);
CUresult cuMemHostRegister(void *, size_t, unsigned) EXPORT(cuMemHostRegister);
CUresult cuMemHostRegister_v2(void *, size_t, unsigned) EXPORT(cuMemHostRegister_v2);
CUresult cuMemHostUnregister(void *) EXPORT(cuMemHostUnregister);
CUresult cuArrayCreate(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *) EXPORT(cuArrayCreate);
CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *) EXPORT(cuArrayCreate_v2);
CUresult cuArray3DCreate(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *) EXPORT(cuArray3DCreate);
CUresult cuArray3DCreate_v2(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *) EXPORT(cuArray3DCreate_v2);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned) EXPORT(cuMipmappedArrayCreate);
CUresult cuArrayDestroy(CUarray) EXPORT(cuArrayDestroy);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray) EXPORT(cuMipmappedArrayDestroy);
CUresult cuIpcOpenMemHandle(CUdeviceptr *, CUipcMemHandle, unsigned) EXPORT(cuIpcOpenMemHandle);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned) EXPORT(cuIpcOpenMemHandle_v2);
CUresult cuIpcCloseMemHandle(CUdeviceptr) EXPORT(cuIpcCloseMemHandle);
CUresult cuGetProcAddress(const char *, void **, int, unsigned long long) EXPORT(cuGetProcAddress);
CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *) EXPORT(cuGetProcAddress_v2);
int fakeCudaLooksItselfUp(void) EXPORT(fakeCudaLooksItselfUp);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice) EXPORT(cuDevicePrimaryCtxRetain);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice) EXPORT(cuCtxCreate_v2);
CUresult cuCtxPushCurrent_v2(CUcontext) EXPORT(cuCtxPushCurrent_v2);
CUresult cuCtxGetLimit(size_t *, int) EXPORT(cuCtxGetLimit);
CUresult cuCtxSetLimit(int, size_t) EXPORT(cuCtxSetLimit);
CUresult cuModuleLoadData(CUmodule *, const void *) EXPORT(cuModuleLoadData);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *) EXPORT(cuModuleGetFunction);
CUresult cuLibraryLoadData(CUlibrary *, const void *, void *, void **, unsigned, void *, void **, unsigned) EXPORT(cuLibraryLoadData);
CUresult cuFuncGetAttribute(int *, int, CUfunction) EXPORT(cuFuncGetAttribute);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **) EXPORT(cuLaunchKernel);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **) EXPORT(cuLaunchKernel_ptsz);
CUresult cuLaunchKernelEx(const void *, CUfunction, void **, void **) EXPORT(cuLaunchKernelEx);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **) EXPORT(cuLaunchCooperativeKernel);
CUresult cuDeviceGetMemPool(CUmemoryPool *, CUdevice) EXPORT(cuDeviceGetMemPool);
CUresult cuMemPoolGetAttribute(CUmemoryPool, int, void *) EXPORT(cuMemPoolGetAttribute);
CUresult cuDeviceGetGraphMemAttribute(CUdevice, int, void *) EXPORT(cuDeviceGetGraphMemAttribute);
CUresult cuGraphAddMemAllocNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *) EXPORT(cuGraphAddMemAllocNode);
CUresult cuGraphAddMemFreeNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr) EXPORT(cuGraphAddMemFreeNode);
CUresult cuDeviceGetUuid_v2(CUuuid *, CUdevice) EXPORT(cuDeviceGetUuid_v2);
CUresult cuDeviceGetName(char *, int, CUdevice) EXPORT(cuDeviceGetName);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice) EXPORT(cuDeviceTotalMem_v2);
CUresult cuStreamCreate(CUstream *, unsigned) EXPORT(cuStreamCreate);
CUresult cuStreamCreateWithPriority(CUstream *, unsigned, int) EXPORT(cuStreamCreateWithPriority);
CUresult cuStreamDestroy_v2(CUstream) EXPORT(cuStreamDestroy_v2);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice) EXPORT(cuDevicePrimaryCtxReset_v2);
CUresult cuStreamGetDevice(CUstream, CUdevice *) EXPORT(cuStreamGetDevice);
CUresult cuEventCreate(CUevent *, unsigned) EXPORT(cuEventCreate);
CUresult cuMemPoolCreate(CUmemoryPool *, const CUmemPoolProps *) EXPORT(cuMemPoolCreate);
CUresult cuStreamBeginCapture_v2(CUstream, int) EXPORT(cuStreamBeginCapture_v2);
CUresult cuStreamIsCapturing(CUstream, int *) EXPORT(cuStreamIsCapturing);
CUresult cuStreamEndCapture(CUstream, CUgraph *) EXPORT(cuStreamEndCapture);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long) EXPORT(cuGraphInstantiateWithFlags);
CUresult cuGraphLaunch(CUgraphExec, CUstream) EXPORT(cuGraphLaunch);
CUresult cuGraphExecDestroy(CUgraphExec) EXPORT(cuGraphExecDestroy);
unsigned long long fakeCudaCallCount(void) EXPORT(fakeCudaCallCount);
void fakeCudaSetDeviceQuietly(int) EXPORT(fakeCudaSetDeviceQuietly);
void fakeCudaDropContext(void) EXPORT(fakeCudaDropContext);
