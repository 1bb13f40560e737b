/* A program that loads the driver itself, unloads it and loads it again, as
 * launchers' GPU probes and health checks do. It is linked with neither
 * the driver nor the runtime, so `dlclose` really unloads the driver.
 *
 *   driver_reload MODE
 *
 * First load, by MODE:
 *   lookup  looks up cuInit and cuMemAlloc_v2, and calls nothing;
 *   init    calls cuInit(0) too;
 *   alloc   calls cuInit(0), makes device 0's primary context current,
 *           allocates 1 MiB, frees it and releases the context;
 *   held    as alloc, but the 1 MiB is never freed and the context is
 *           kept: the allocation goes with the driver when it unloads (the
 *           fake driver's state is gone with it, and the driver loaded
 *           again hands out the same address for the 2 MiB), while a
 *           driver that stays loaded through dlclose (the real one, after
 *           cuInit) keeps it.
 * Then it unloads the driver (printing `unloaded 1` when it is gone),
 * holds the driver's old address with a mapping of its own so that the
 * driver loads again elsewhere (printing `moved 1`), loads it, calls
 * cuInit(0), makes device 0's primary context current, allocates 2 MiB and
 * 3 MiB, frees the 2 MiB and exits 0 with the 3 MiB live. Prints `done`.
 * Over the real driver too (tests/gpu).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;

struct driver {
    void *handle;
    CUresult (*init)(unsigned);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*retain)(CUcontext *, int);
    CUresult (*release)(int);
    CUresult (*set_current)(CUcontext);
    uintptr_t base;
};

static int load(struct driver *d) {
    d->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d->handle) {
        printf("dlopen failed: %s\n", dlerror());
        return 0;
    }
    d->init = (CUresult(*)(unsigned))dlsym(d->handle, "cuInit");
    d->alloc = (CUresult(*)(CUdeviceptr *, size_t))dlsym(d->handle, "cuMemAlloc_v2");
    d->free = (CUresult(*)(CUdeviceptr))dlsym(d->handle, "cuMemFree_v2");
    d->retain = (CUresult(*)(CUcontext *, int))dlsym(d->handle, "cuDevicePrimaryCtxRetain");
    d->release = (CUresult(*)(int))dlsym(d->handle, "cuDevicePrimaryCtxRelease_v2");
    d->set_current = (CUresult(*)(CUcontext))dlsym(d->handle, "cuCtxSetCurrent");
    /* The driver's own load address, whatever the lookups returned. */
    struct link_map *map = NULL;
    d->base = dlinfo(d->handle, RTLD_DI_LINKMAP, &map) == 0 && map ? (uintptr_t)map->l_addr : 0;
    return d->init && d->alloc && d->free && d->retain && d->set_current && d->base;
}

/* cuInit, and device 0's primary context made current. */
static int start(struct driver *d) {
    CUcontext context = NULL;
    return d->init(0) == 0 && d->retain(&context, 0) == 0 && d->set_current(context) == 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "alloc";
    struct driver first, second;
    if (!load(&first)) return 10;
    if (!strcmp(mode, "init") && first.init(0) != 0) return 11;
    if (!strcmp(mode, "alloc")) {
        CUdeviceptr p;
        if (!start(&first)) return 11;
        if (first.alloc(&p, 1 << 20) != 0 || first.free(p) != 0) return 12;
        first.set_current(NULL);
        if (first.release) first.release(0);
    }
    if (!strcmp(mode, "held")) {
        CUdeviceptr p;
        if (!start(&first)) return 11;
        if (first.alloc(&p, 1 << 20) != 0) return 12;
    }
    if (dlclose(first.handle) != 0) return 13;
    void *still = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    printf("unloaded %d\n", still == NULL);
    if (still) dlclose(still);
    /* Hold the old place, so that the driver comes back elsewhere. */
    mmap((void *)first.base, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (!load(&second)) return 14;
    printf("moved %d\n", second.base != first.base);
    if (!start(&second)) return 15;
    CUdeviceptr a, b;
    if (second.alloc(&a, 2 << 20) != 0 || second.alloc(&b, 3 << 20) != 0) return 16;
    if (second.free(a) != 0) return 17;
    printf("done\n");
    fflush(stdout);
    return 0;
}
