// A CUDA graph captured with cudaMallocAsync: one allocation freed inside
// the graph, one left for after it; the graph launched three times. Then the
// program's own readings of its memory (NVML per process, cuMemGetInfo),
// printed as JSON to the file named by argv[1].
#include "own_readings.h"

__global__ void fill(float *p, size_t n, float v) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
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
    write_own_readings(argv[1]);
    return 0;
}
