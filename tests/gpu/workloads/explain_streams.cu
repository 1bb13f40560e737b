// Many streams and events, as a program with many concurrent pipelines
// has: 1,500 streams and 3,000 events, each used once, then the program's
// own readings of its memory, as JSON to the file named by argv[1].
#include "own_readings.h"

__global__ void touch(int *p) { *p += 1; }

int main(int argc, char **argv) {
    const int streams = 1500, events = 3000;
    int *cell;
    cudaMalloc(&cell, sizeof(int));
    static cudaStream_t stream[streams];
    static cudaEvent_t event[events];
    for (int i = 0; i < streams; i++) cudaStreamCreateWithFlags(&stream[i], cudaStreamNonBlocking);
    for (int i = 0; i < events; i++) cudaEventCreate(&event[i]);
    for (int i = 0; i < events; i++) {
        touch<<<1, 1, 0, stream[i % streams]>>>(cell);
        cudaEventRecord(event[i], stream[i % streams]);
    }
    cudaDeviceSynchronize();
    write_own_readings(argv[1]);
    return 0;
}
