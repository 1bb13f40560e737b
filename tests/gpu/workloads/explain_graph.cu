// A CUDA graph captured with cudaMallocAsync: one allocation freed inside
// the graph, one left for after it; the graph launched three times. Then the
// program's own readings of its memory (NVML per process, cuMemGetInfo),
// printed as JSON to the file named by argv[1].
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

__global__ void fill(float *p, size_t n, float v) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}

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

int main(int argc, char **argv) {
    const size_t n = 16 << 20;  // 64 MiB of floats
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    float *scratch, *kept;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    cudaMallocAsync((void **)&scratch, n * sizeof(float), stream);
    cudaMallocAsync((void **)&kept, n * sizeof(float), stream);
    fill<<<256, 256, 0, stream>>>(scratch, n, 1.0f);
    fill<<<256, 256, 0, stream>>>(kept, n, 2.0f);
    cudaFreeAsync(scratch, stream);
    cudaStreamEndCapture(stream, &graph);
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return 3;
    cudaGraphLaunch(exec, stream);
    cudaStreamSynchronize(stream);
    cudaFreeAsync(kept, stream);
    for (int i = 0; i < 2; i++) {
        cudaGraphLaunch(exec, stream);
        cudaStreamSynchronize(stream);
        cudaFreeAsync(kept, stream);
    }
    cudaStreamSynchronize(stream);
    cudaGraphLaunch(exec, stream);
    cudaStreamSynchronize(stream);
    usleep(500000);
    size_t free_bytes, total;
    cudaMemGetInfo(&free_bytes, &total);
    FILE *out = fopen(argv[1], "w");
    fprintf(out, "{\"pid\": %d, \"nvml_total\": %llu, \"device_used\": %llu, \"error\": %d}\n", getpid(),
            nvml_own_bytes(), (unsigned long long)(total - free_bytes), (int)cudaGetLastError());
    fclose(out);
    usleep(500000);
    return 0;
}
