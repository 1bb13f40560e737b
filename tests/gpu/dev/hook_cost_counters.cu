// Scenario z's loop (cudaMallocAsync + cudaFreeAsync pairs) with the CPU's
// hardware counters read around it (perf_event_open, user space only):
// cycles, instructions, cache and TLB misses a pair. On the H100 machine
// (a KVM guest) every hardware event is refused with ENOENT: the guest has
// no performance counters, which is why the cost work there relies on
// timings, knockout builds and callgrind on the development machine.
//
//   hook_cost_counters [pairs]   (prints one line of key value pairs)
#include <cuda_runtime.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
static uint64_t now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec; }
static cudaStream_t stream;
struct ev { const char *name; uint32_t type; uint64_t config; int fd; };
#define CACHE(id, op, res) ((id) | ((op) << 8) | ((res) << 16))
static struct ev evs[] = {
    {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, -1},
    {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, -1},
    {"L1I_miss", PERF_TYPE_HW_CACHE, CACHE(PERF_COUNT_HW_CACHE_L1I, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS), -1},
    {"L1D_miss", PERF_TYPE_HW_CACHE, CACHE(PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS), -1},
    {"LLC_miss", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, -1},
    {"branch_miss", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, -1},
    {"dTLB_miss", PERF_TYPE_HW_CACHE, CACHE(PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS), -1},
    {"iTLB_miss", PERF_TYPE_HW_CACHE, CACHE(PERF_COUNT_HW_CACHE_ITLB, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS), -1},
};
#define NEV (int)(sizeof evs / sizeof evs[0])
static void open_all(void) {
    for (int i = 0; i < NEV; i++) {
        struct perf_event_attr a; memset(&a, 0, sizeof a);
        a.size = sizeof a; a.type = evs[i].type; a.config = evs[i].config;
        a.disabled = 1; a.exclude_kernel = 1; a.exclude_hv = 1;
        a.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
        evs[i].fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
        if (evs[i].fd < 0) fprintf(stderr, "open %s: %s\n", evs[i].name, strerror(errno));
    }
}
static void read_all(double *out) {
    for (int i = 0; i < NEV; i++) {
        uint64_t v[3] = {0, 0, 0};
        if (evs[i].fd >= 0 && read(evs[i].fd, v, sizeof v) == sizeof v && v[2] > 0) out[i] = (double)v[0] * v[1] / v[2];
        else out[i] = -1;
    }
}
__attribute__((noinline)) static void pairs(int n) {
    for (int i = 0; i < n; i++) { void *p; if (cudaMallocAsync(&p, 4096, stream) != cudaSuccess || cudaFreeAsync(p, stream) != cudaSuccess) exit(2); }
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    cudaSetDevice(0); cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    pairs(5000);
    double qb = 1e18;
    for (int r = 0; r < 3; r++) { uint64_t s = now(); for (int i = 0; i < 20000; i++) cudaStreamQuery(stream); double q = (double)(now() - s) / 20000; if (q < qb) qb = q; }
    open_all();
    double before[NEV], after[NEV];
    for (int i = 0; i < NEV; i++) if (evs[i].fd >= 0) ioctl(evs[i].fd, PERF_EVENT_IOC_ENABLE, 0);
    read_all(before);
    uint64_t s = now(); pairs(n); uint64_t ns = now() - s;
    read_all(after);
    printf("pair_ns %.1f query_ns %.1f", (double)ns / n, qb);
    for (int i = 0; i < NEV; i++) printf(" %s %.1f", evs[i].name, after[i] < 0 ? -1.0 : (after[i] - before[i]) / n);
    printf("\n");
    return 0;
}
