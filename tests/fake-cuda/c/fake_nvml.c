/*
 * A fake libnvidia-ml.so.1 for machines without a GPU, answering from the
 * files the fake driver writes in FAKE_NVML_DIR (one per process and device,
 * "<pid>.<device>", holding the process's bytes on that device).
 *  - Without FAKE_NVML_DIR, nvmlInit_v2 fails as on a machine without a driver.
 *  - FAKE_NVML_PID_OFFSET is added to every pid reported, as when the
 *    collector runs in another pid namespace than the processes.
 *  - The whole device's usage is FAKE_CUDA_OTHERS_BYTES plus every process's.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct { int index; } *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9 };

#define EXPORT __attribute__((visibility("default")))

static struct { int index; } devices[4] = { { 0 }, { 1 }, { 2 }, { 3 } };

static int device_count(void) {
    const char *text = getenv("FAKE_CUDA_DEVICES");
    int count = text ? atoi(text) : 2;
    return count < 1 ? 1 : (count > 4 ? 4 : count);
}

static unsigned long long env_bytes(const char *name, unsigned long long otherwise) {
    const char *text = getenv(name);
    return text ? strtoull(text, NULL, 0) : otherwise;
}

/* Calls visit(pid, bytes) for every process file of `device`. */
static void each_process(int device, void (*visit)(unsigned, unsigned long long, void *), void *data) {
    const char *dir = getenv("FAKE_NVML_DIR");
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return;
    struct dirent *entry;
    while ((entry = readdir(d))) {
        unsigned pid;
        int dev;
        char rest;
        if (sscanf(entry->d_name, "%u.%d%c", &pid, &dev, &rest) != 2 || dev != device) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
        FILE *f = fopen(path, "r");
        unsigned long long bytes = 0;
        if (f) {
            if (fscanf(f, "%llu", &bytes) != 1) bytes = 0;
            fclose(f);
        }
        visit(pid, bytes, data);
    }
    closedir(d);
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return getenv("FAKE_NVML_DIR") ? NVML_SUCCESS : NVML_ERROR_DRIVER_NOT_LOADED; }
EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    *count = (unsigned)device_count();
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    if ((int)index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&devices[index];
    return NVML_SUCCESS;
}
/* The same UUID the fake driver gives: f0 f1 ... fe, then the ordinal. */
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned length) {
    unsigned char b[16];
    for (int i = 0; i < 16; i++) b[i] = (unsigned char)(0xf0 + i);
    b[15] = (unsigned char)device->index;
    snprintf(uuid, length, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return NVML_SUCCESS;
}

static void add_bytes(unsigned pid, unsigned long long bytes, void *sum) {
    (void)pid;
    *(unsigned long long *)sum += bytes;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    unsigned long long used = env_bytes("FAKE_CUDA_OTHERS_BYTES", 0);
    each_process(device->index, add_bytes, &used);
    memory->total = env_bytes("FAKE_CUDA_CAPACITY", 1ull << 30);
    memory->used = used;
    memory->free = memory->total > used ? memory->total - used : 0;
    return NVML_SUCCESS;
}

typedef struct { nvmlProcessInfo_t *infos; unsigned capacity, count; } Listing;

static void list_process(unsigned pid, unsigned long long bytes, void *data) {
    Listing *listing = data;
    if (listing->count < listing->capacity) {
        nvmlProcessInfo_t *info = &listing->infos[listing->count];
        info->pid = pid + (unsigned)env_bytes("FAKE_NVML_PID_OFFSET", 0);
        info->usedGpuMemory = bytes;
        info->gpuInstanceId = info->computeInstanceId = 0xffffffffu;
    }
    listing->count++;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned *count, nvmlProcessInfo_t *infos) {
    Listing listing = { infos, infos ? *count : 0, 0 };
    each_process(device->index, list_process, &listing);
    nvmlReturn_t result = listing.count > listing.capacity ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    *count = listing.count;
    return result;
}
