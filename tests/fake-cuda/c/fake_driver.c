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
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned int CUdeviceptr_v1;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef void *CUarray;
typedef void *CUmipmappedArray;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { int type; int id; } CUmemLocation;
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

/* ---- Device address space ------------------------------------------------ */

typedef struct { uint64_t address, size; int device, live, next_free; } Block;

#define MAX_BLOCKS (1 << 20)
#define ADDRESS_SLOTS (1 << 21)
#define FREE_LIST_SLOTS (1 << 16)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Unlike the real driver, usable in a child forked while another thread held
 * the lock, so that tests can have forked children allocate. */
static void reset_lock_in_child(void) { pthread_mutex_init(&lock, NULL); }
__attribute__((constructor)) static void fork_safe(void) { pthread_atfork(NULL, NULL, reset_lock_in_child); }
static Block blocks[MAX_BLOCKS];
static int block_count;
static uint64_t next_address[MAX_DEVICES];
static uint64_t next_low_address = 0x10000000ull;
static uint64_t used_bytes[MAX_DEVICES];
static __thread int current_device;

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
    pthread_mutex_lock(&lock);
    if (used_bytes[device] + size > capacity()) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    FreeList *list = free_list(size, device, low);
    int reuse = list->head;
    if (reuse >= 0) {
        list->head = blocks[reuse].next_free;
    } else {
        if (block_count == MAX_BLOCKS) {
            pthread_mutex_unlock(&lock);
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
    *address_slot(blocks[reuse].address, 1) = reuse + 1;
    used_bytes[device] += size;
    *address = blocks[reuse].address;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

static CUresult release(uint64_t address) {
    pthread_mutex_lock(&lock);
    int *slot = address_slot(address, 0);
    if (!slot) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    Block *block = &blocks[*slot - 1];
    *slot = -1;
    block->live = 0;
    used_bytes[block->device] -= block->size;
    FreeList *list = free_list(block->size, block->device, block->address < 0x100000000ull);
    block->next_free = list->head;
    list->head = (int)(block - blocks);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* ---- Context ------------------------------------------------------------ */

HIDDEN CUresult impl_cuInit(unsigned flags) { (void)flags; return CUDA_SUCCESS; }
HIDDEN CUresult impl_cuDeviceGetCount(int *count) { *count = device_count(); return CUDA_SUCCESS; }
/* FAKE_CUDA_NO_CONTEXT: no context is current, so the device of an allocation cannot be asked. */
HIDDEN CUresult impl_cuCtxGetDevice(CUdevice *device) {
    if (getenv("FAKE_CUDA_NO_CONTEXT")) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    *device = current_device;
    return CUDA_SUCCESS;
}
/* Contexts are the device ordinal plus one. */
HIDDEN CUresult impl_cuCtxSetCurrent(CUcontext ctx) {
    intptr_t device = (intptr_t)ctx - 1;
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    current_device = (int)device;
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    pthread_mutex_lock(&lock);
    *total = capacity();
    *free_bytes = capacity() - used_bytes[current_device];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemGetInfo(unsigned *free_bytes, unsigned *total) {
    size_t f, t;
    impl_cuMemGetInfo_v2(&f, &t);
    *free_bytes = (unsigned)f;
    *total = (unsigned)t;
    return CUDA_SUCCESS;
}

/* ---- Device memory ------------------------------------------------------ */

HIDDEN CUresult impl_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    uint64_t address;
    CUresult result = allocate(size, current_device, 0, &address);
    if (result == CUDA_SUCCESS) *dptr = address;
    return result;
}
HIDDEN CUresult impl_cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned size) {
    uint64_t address;
    CUresult result = allocate(size, current_device, 1, &address);
    if (result == CUDA_SUCCESS) *dptr = (CUdeviceptr_v1)address;
    return result;
}
HIDDEN CUresult impl_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned element) {
    (void)element;
    size_t rounded = (width + 511) & ~(size_t)511;
    uint64_t address;
    CUresult result = allocate((uint64_t)rounded * height, current_device, 0, &address);
    if (result == CUDA_SUCCESS) { *dptr = address; *pitch = rounded; }
    return result;
}
HIDDEN CUresult impl_cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned *pitch, unsigned width, unsigned height, unsigned element) {
    (void)element;
    unsigned rounded = (width + 511) & ~511u;
    uint64_t address;
    CUresult result = allocate((uint64_t)rounded * height, current_device, 1, &address);
    if (result == CUDA_SUCCESS) { *dptr = (CUdeviceptr_v1)address; *pitch = rounded; }
    return result;
}
HIDDEN CUresult impl_cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags) {
    (void)flags;
    return impl_cuMemAlloc_v2(dptr, size);
}
HIDDEN CUresult impl_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream) {
    (void)stream;
    return impl_cuMemAlloc_v2(dptr, size);
}
HIDDEN CUresult impl_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream) {
    return impl_cuMemAllocAsync(dptr, size, stream);
}
HIDDEN CUresult impl_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream) {
    (void)pool;
    return impl_cuMemAllocAsync(dptr, size, stream);
}
HIDDEN CUresult impl_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream) {
    return impl_cuMemAllocFromPoolAsync(dptr, size, pool, stream);
}
HIDDEN CUresult impl_cuMemFree_v2(CUdeviceptr dptr) { return release(dptr); }
HIDDEN CUresult impl_cuMemFree(CUdeviceptr_v1 dptr) { return release(dptr); }
HIDDEN CUresult impl_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) { (void)stream; return release(dptr); }
HIDDEN CUresult impl_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) { return impl_cuMemFreeAsync(dptr, stream); }

/* ---- Virtual memory management ------------------------------------------ */

typedef struct { uint64_t size; int device, released, mappings, live; } Physical;
static Physical physical[4096];
static int physical_count;
static uint64_t next_reservation = 0x600000000000ull;

/* Handles are opaque numbers; index + 1, shifted so they look like no address. */
HIDDEN CUresult impl_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
    (void)flags;
    int device = prop->location.id;
    if (prop->location.type != 1 || device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (used_bytes[device] + size > capacity()) { pthread_mutex_unlock(&lock); return CUDA_ERROR_OUT_OF_MEMORY; }
    if (physical_count == 4096) { pthread_mutex_unlock(&lock); return CUDA_ERROR_OUT_OF_MEMORY; }
    int index = physical_count++;
    physical[index] = (Physical){ size, device, 0, 0, 1 };
    used_bytes[device] += size;
    pthread_mutex_unlock(&lock);
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
HIDDEN CUresult impl_cuMemRelease(CUmemGenericAllocationHandle handle) {
    pthread_mutex_lock(&lock);
    Physical *p = physical_of(handle);
    if (!p || p->released) { pthread_mutex_unlock(&lock); return CUDA_ERROR_INVALID_VALUE; }
    p->released = 1;
    drop_if_unused(p);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
typedef struct { uint64_t address, size; CUmemGenericAllocationHandle handle; } Mapping;
static Mapping mappings[4096];
static int mapping_count;
HIDDEN CUresult impl_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    (void)alignment; (void)addr; (void)flags;
    pthread_mutex_lock(&lock);
    *ptr = next_reservation;
    next_reservation += (size + 0x1fffff) & ~0x1fffffull;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemAddressFree(CUdeviceptr ptr, size_t size) { (void)ptr; (void)size; return CUDA_SUCCESS; }
HIDDEN CUresult impl_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
    (void)offset; (void)flags;
    pthread_mutex_lock(&lock);
    Physical *p = physical_of(handle);
    if (!p || mapping_count == 4096) { pthread_mutex_unlock(&lock); return CUDA_ERROR_INVALID_VALUE; }
    mappings[mapping_count++] = (Mapping){ ptr, size, handle };
    p->mappings++;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemUnmap(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&lock);
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
    pthread_mutex_unlock(&lock);
    return removed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- Pinned host memory --------------------------------------------------- */

static void *host_blocks[4096];
static int host_count;
static CUresult host_remember(void *p) {
    pthread_mutex_lock(&lock);
    if (host_count == 4096) { pthread_mutex_unlock(&lock); return CUDA_ERROR_OUT_OF_MEMORY; }
    host_blocks[host_count++] = p;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
static int host_forget(void *p) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < host_count; i++) {
        if (host_blocks[i] == p) {
            host_blocks[i] = host_blocks[--host_count];
            pthread_mutex_unlock(&lock);
            return 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return 0;
}
HIDDEN CUresult impl_cuMemHostAlloc(void **pp, size_t size, unsigned flags) {
    (void)flags;
    if (size > capacity()) return CUDA_ERROR_OUT_OF_MEMORY;
    *pp = malloc(size);
    return host_remember(*pp);
}
HIDDEN CUresult impl_cuMemAllocHost_v2(void **pp, size_t size) { return impl_cuMemHostAlloc(pp, size, 0); }
HIDDEN CUresult impl_cuMemAllocHost(void **pp, unsigned size) { return impl_cuMemHostAlloc(pp, size, 0); }
HIDDEN CUresult impl_cuMemFreeHost(void *p) {
    if (!host_forget(p)) return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMemHostRegister_v2(void *p, size_t size, unsigned flags) { (void)size; (void)flags; return host_remember(p); }
HIDDEN CUresult impl_cuMemHostRegister(void *p, size_t size, unsigned flags) { return impl_cuMemHostRegister_v2(p, size, flags); }
HIDDEN CUresult impl_cuMemHostUnregister(void *p) { return host_forget(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

/* ---- Arrays -------------------------------------------------------------- */

HIDDEN CUresult impl_cuArrayCreate_v2(CUarray *handle, const CUDA_ARRAY_DESCRIPTOR *desc) {
    if (desc->Width == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuArrayCreate(CUarray *handle, const CUDA_ARRAY_DESCRIPTOR_v1 *desc) {
    if (desc->Width == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuArray3DCreate_v2(CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    if (desc->Width == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuArray3DCreate(CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc) {
    if (desc->Width == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuMipmappedArrayCreate(CUmipmappedArray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels) {
    if (desc->Width == 0 || levels == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = malloc(16);
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuArrayDestroy(CUarray array) { free(array); return CUDA_SUCCESS; }
HIDDEN CUresult impl_cuMipmappedArrayDestroy(CUmipmappedArray array) { free(array); return CUDA_SUCCESS; }

/* ---- IPC ----------------------------------------------------------------- */

/* An imported pointer is whatever address the exporter wrote into the handle. */
HIDDEN CUresult impl_cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned flags) {
    (void)flags;
    uint64_t address;
    memcpy(&address, handle.reserved, sizeof address);
    if (address == 0) return CUDA_ERROR_INVALID_VALUE;
    *dptr = address + 0x100000000000ull;
    return CUDA_SUCCESS;
}
HIDDEN CUresult impl_cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned flags) {
    return impl_cuIpcOpenMemHandle_v2(dptr, handle, flags);
}
HIDDEN CUresult impl_cuIpcCloseMemHandle(CUdeviceptr dptr) { return dptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

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
};

HIDDEN CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
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
HIDDEN CUresult impl_cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
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
