// An executable graph of 4,000 kernel nodes, captured, instantiated and
// replayed, then the program's own readings of its memory, as JSON to the
// file named by argv[1].
#include "own_readings.h"

__global__ void step(float *p, float v) { p[threadIdx.x] += v; }

int main(int argc, char **argv) {
    const int nodes = 4000;
    float *data;
    cudaMalloc(&data, 1024 * sizeof(float));
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < nodes; i++) step<<<1, 256, 0, stream>>>(data, 1.0f);
    cudaStreamEndCapture(stream, &graph);
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return 3;
    for (int i = 0; i < 3; i++) cudaGraphLaunch(exec, stream);
    cudaStreamSynchronize(stream);
    write_own_readings(argv[1]);
    return 0;
}
