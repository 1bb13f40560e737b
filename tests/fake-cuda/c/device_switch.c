/*
 * A thread's current device changes through a call the tracer does not
 * see (as the runtime changes it through its private table): allocates on
 * device 0, switches to device 1 quietly, waits past the tracer's reading
 * interval and allocates twice more. Prints the three addresses:
 *   A <on 0> B <first on 1> C <second on 1>
 */
#include <stdio.h>
#include <unistd.h>

typedef unsigned long long CUdeviceptr;
int cuInit(unsigned);
int cuCtxSetCurrent(void *);
int cuMemAlloc_v2(CUdeviceptr *, size_t);
void fakeCudaSetDeviceQuietly(int);

int main(void) {
    CUdeviceptr a, b, c;
    if (cuInit(0) || cuCtxSetCurrent((void *)1) || cuMemAlloc_v2(&a, 1 << 20)) return 1;
    fakeCudaSetDeviceQuietly(1);
    usleep(120 * 1000);
    if (cuMemAlloc_v2(&b, 2 << 20) || cuMemAlloc_v2(&c, 3 << 20)) return 1;
    printf("A 0x%llx B 0x%llx C 0x%llx\n", a, b, c);
    return 0;
}
