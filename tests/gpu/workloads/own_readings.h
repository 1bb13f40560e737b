// The workload's own reading of its memory, for the "every byte explained"
// scenarios: NVML's per-process figure and cuMemGetInfo's used bytes,
// written as JSON to the file the scenario names.
#pragma once
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

struct ProcessInfo { unsigned pid; unsigned long long used; unsigned gi, ci; };

static unsigned long long nvml_own_bytes(void) {
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!nvml) return 0;
    int (*init)(void) = (int (*)(void))dlsym(nvml, "nvmlInit_v2");
    int (*handle_of)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
    int (*count_of)(unsigned *) = (int (*)(unsigned *))dlsym(nvml, "nvmlDeviceGetCount_v2");
    int (*procs)(void *, unsigned *, ProcessInfo *) =
        (int (*)(void *, unsigned *, ProcessInfo *))dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!init || init() != 0) return 0;
    unsigned devices = 0;
    count_of(&devices);
    unsigned long long own = 0;
    for (unsigned d = 0; d < devices; d++) {
        void *h;
        ProcessInfo infos[64];
        unsigned n = 64;
        if (handle_of(d, &h) || procs(h, &n, infos)) continue;
        for (unsigned i = 0; i < n; i++)
            if (infos[i].pid == (unsigned)getpid()) own += infos[i].used;
    }
    return own;
}

// Waits for the device to settle, then writes the readings to `path`.
static void write_own_readings(const char *path) {
    usleep(500000);
    size_t free_bytes, total;
    cudaMemGetInfo(&free_bytes, &total);
    FILE *out = fopen(path, "w");
    fprintf(out, "{\"pid\": %d, \"nvml_total\": %llu, \"device_used\": %llu, \"error\": %d}\n", getpid(),
            nvml_own_bytes(), (unsigned long long)(total - free_bytes), (int)cudaGetLastError());
    fclose(out);
    usleep(500000);
}
