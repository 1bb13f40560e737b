/*
 * Scenarios for `tracer-cli/tests/held.rs`: behaviours an audit checked and
 * found holding, kept as regression tests. Run over the fake runtime and
 * driver; `held SCENARIO [ARGS]`. Every scenario prints `pid <pid>` first.
 *
 *   tiny SIZE            allocates SIZE bytes, keeps them, exits 0
 *   spawn N              fork+execs `held tiny 4097`, ..., `held tiny 4096+N`
 *                        one after the other; prints `spawned N`
 *   threads N BATCH      N threads (at most BATCH at once), each allocating
 *                        4096 bytes that it keeps; prints `threads N`
 *   altstack K first|warm  K times, raises SIGUSR1, whose handler runs on an
 *                        8 KiB sigaltstack (a guard page below it) and
 *                        allocates and frees 8192 bytes of pinned host
 *                        memory and an array of 2048 bytes; `first`: the
 *                        process's first CUDA call is the handler's, else
 *                        256 pinned bytes are allocated and freed first;
 *                        prints `altstack used N of 8192` (the deepest
 *                        byte the handlers touched) and `handled K failed 0`
 *   execveat-a           allocates 1000, execveat()s (the C library's
 *                        function, a path) `held execveat-b`, which
 *                        allocates 2000 and execveat()s (the raw system
 *                        call, AT_EMPTY_PATH on a descriptor) `held
 *                        execveat-c`, which allocates 3000 and exits 5
 *   args ...             allocates 1234 and frees it, whatever its arguments;
 *                        prints `argc N`
 *   errno                17 failing CUDA calls (8 out of memory, 9 invalid
 *                        arguments), the first the process's first; each
 *                        with errno set before it; prints one line a call
 *                        and `errno kept K of 17`
 *   fork-fail N          records, then forks N children one at a time that
 *                        setuid(65534) and allocate: they cannot record;
 *                        prints `failed-child PID` for each
 *   sigint-twice         allocates 4096, prints `ready`, counts SIGINTs
 *                        (`sigint N`) and dies of the second
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef int cudaError_t;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { size_t Width, Height; int Format; unsigned NumChannels; } CUDA_ARRAY_DESCRIPTOR;

cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
CUresult cuInit(unsigned);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, void *);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, void *, void *);
CUresult cuMemFreeAsync(CUdeviceptr, void *);
CUresult cuMemHostAlloc(void **, size_t, unsigned);
CUresult cuMemFreeHost(void *);
CUresult cuMemHostUnregister(void *);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned);
CUresult cuIpcCloseMemHandle(CUdeviceptr);
CUresult cuArrayCreate_v2(void **, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArrayDestroy(void *);

extern char **environ;

static void check(const char *what, int status) {
    if (status != 0) {
        printf("status %s %d\n", what, status);
        fflush(stdout);
        exit(10);
    }
}

static void *keep(size_t size) {
    void *p;
    check("cudaMalloc", cudaMalloc(&p, size));
    return p;
}

/* ---- spawn: many short-lived processes ------------------------------------ */

static int scenario_spawn(const char *self, int count) {
    for (int i = 1; i <= count; i++) {
        char size[32];
        snprintf(size, sizeof size, "%d", 4096 + i);
        pid_t child = fork();
        if (child == 0) {
            char *argv[] = { (char *)self, "tiny", size, NULL };
            execve(self, argv, environ);
            _exit(99);
        }
        int status;
        if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("status child %d %d\n", i, status);
            return 11;
        }
    }
    printf("spawned %d\n", count);
    return 0;
}

/* ---- threads: one allocation each ---------------------------------------- */

static void *one_allocation(void *unused) {
    (void)unused;
    keep(4096);
    return NULL;
}

static int scenario_threads(int count, int batch) {
    pthread_t *threads = calloc((size_t)batch, sizeof *threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    for (int done = 0; done < count;) {
        int now = count - done < batch ? count - done : batch;
        for (int i = 0; i < now; i++)
            if (pthread_create(&threads[i], &attr, one_allocation, NULL) != 0) {
                printf("status pthread_create %d\n", done + i);
                return 12;
            }
        for (int i = 0; i < now; i++) pthread_join(threads[i], NULL);
        done += now;
    }
    printf("threads %d\n", count);
    return 0;
}

/* ---- altstack: a handler on a small alternate signal stack ---------------- */

static volatile sig_atomic_t handled, handler_failed;

/* Pinned host memory and an array: the fake driver's device allocations
 * use more than 8 KiB of stack themselves (they publish the usage for the
 * fake NVML), these do not. */
static void allocate_and_free(int sig) {
    (void)sig;
    void *host, *array;
    CUDA_ARRAY_DESCRIPTOR desc = { 64, 32, 0x01, 1 };
    if (cuMemHostAlloc(&host, 8192, 0) != 0 || cuMemFreeHost(host) != 0) handler_failed = 1;
    if (cuArrayCreate_v2(&array, &desc) != 0 || cuArrayDestroy(array) != 0) handler_failed = 1;
    handled++;
}

static int scenario_altstack(int times, int first) {
    long page = sysconf(_SC_PAGESIZE);
    size_t size = 8 << 10;
    /* A guard page below the stack: an overflow faults at once. */
    unsigned char *region = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED || mprotect(region, page, PROT_NONE) != 0) return 20;
    /* Painted, to measure how deep the handlers reach. */
    memset(region + page, 0xa5, size);
    stack_t stack = { .ss_sp = region + page, .ss_size = size, .ss_flags = 0 };
    if (sigaltstack(&stack, NULL) != 0) {
        printf("status sigaltstack %s\n", strerror(errno));
        return 21;
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = allocate_and_free;
    action.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &action, NULL);
    if (!first) {
        void *host;
        check("cuMemHostAlloc", cuMemHostAlloc(&host, 256, 0));
        check("cuMemFreeHost", cuMemFreeHost(host));
    }
    for (int i = 0; i < times; i++) raise(SIGUSR1);
    size_t untouched = 0;
    while (untouched < size && region[page + untouched] == 0xa5) untouched++;
    printf("altstack used %zu of %zu\n", size - untouched, size);
    printf("handled %d failed %d\n", (int)handled, (int)handler_failed);
    return 0;
}

/* ---- execveat chains ------------------------------------------------------ */

static int scenario_execveat(const char *self, char which) {
    keep(which == 'a' ? 1000 : which == 'b' ? 2000 : 3000);
    printf("image %c %d\n", which, getpid());
    fflush(stdout);
    if (which == 'a') {
        char *argv[] = { (char *)self, "execveat-b", NULL };
        execveat(AT_FDCWD, "/proc/self/exe", argv, environ, 0);
        printf("status execveat %s\n", strerror(errno));
        return 30;
    }
    if (which == 'b') {
        int fd = open("/proc/self/exe", O_PATH);
        if (fd < 0) return 31;
        char *argv[] = { (char *)self, "execveat-c", NULL };
        syscall(SYS_execveat, fd, "", argv, environ, AT_EMPTY_PATH);
        printf("status SYS_execveat %s\n", strerror(errno));
        return 32;
    }
    return 5;
}

/* ---- errno across failing calls ------------------------------------------- */

static int kept, calls;

static void failing(const char *name, CUresult (*call)(void)) {
    int before = 7000 + calls++;
    errno = before;
    CUresult result = call();
    int after = errno;
    if (result != 0 && after == before) kept++;
    printf("%s result %d errno %s\n", name, result, after == before ? "kept" : "changed");
}

static const size_t too_big = 1ull << 40;
static CUresult alloc_too_big(void) { CUdeviceptr p; return cuMemAlloc_v2(&p, too_big); }
static CUresult runtime_too_big(void) { void *p; return cudaMalloc(&p, too_big); }
static CUresult pitch_too_big(void) { CUdeviceptr p; size_t pitch; return cuMemAllocPitch_v2(&p, &pitch, 1 << 20, 1 << 20, 4); }
static CUresult managed_too_big(void) { CUdeviceptr p; return cuMemAllocManaged(&p, too_big, 1); }
static CUresult async_too_big(void) { CUdeviceptr p; return cuMemAllocAsync(&p, too_big, (void *)0x1234); }
static CUresult pool_too_big(void) { CUdeviceptr p; return cuMemAllocFromPoolAsync(&p, too_big, (void *)0x5678, (void *)0x1234); }
static CUresult host_too_big(void) { void *p; return cuMemHostAlloc(&p, too_big, 0); }
static CUresult create_too_big(void) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = 1;
    CUmemGenericAllocationHandle handle;
    return cuMemCreate(&handle, too_big, &prop, 0);
}
static CUresult array_of_nothing(void) {
    void *array;
    CUDA_ARRAY_DESCRIPTOR empty = { 0, 0, 0x01, 1 };
    return cuArrayCreate_v2(&array, &empty);
}
static CUresult free_unknown(void) { return cuMemFree_v2(0x1230); }
static CUresult free_async_unknown(void) { return cuMemFreeAsync(0x4560, (void *)0x1234); }
static int host_word;
static CUresult free_host_unknown(void) { return cuMemFreeHost(&host_word); }
static CUresult unregister_unknown(void) { return cuMemHostUnregister(&host_word); }
static CUresult release_unknown(void) { return cuMemRelease(0x7770); }
static CUresult unmap_unmapped(void) { return cuMemUnmap(0x600000000000ull, 2 << 20); }
static CUresult close_null(void) { return cuIpcCloseMemHandle(0); }
static CUresult open_null(void) {
    CUipcMemHandle handle;
    memset(&handle, 0, sizeof handle);
    CUdeviceptr p;
    return cuIpcOpenMemHandle_v2(&p, handle, 1);
}

static int scenario_errno(void) {
    failing("cuMemAlloc_v2", alloc_too_big);
    failing("cudaMalloc", runtime_too_big);
    failing("cuMemAllocPitch_v2", pitch_too_big);
    failing("cuMemAllocManaged", managed_too_big);
    failing("cuMemAllocAsync", async_too_big);
    failing("cuMemAllocFromPoolAsync", pool_too_big);
    failing("cuMemHostAlloc", host_too_big);
    failing("cuMemCreate", create_too_big);
    failing("cuArrayCreate_v2", array_of_nothing);
    failing("cuMemFree_v2", free_unknown);
    failing("cuMemFreeAsync", free_async_unknown);
    failing("cuMemFreeHost", free_host_unknown);
    failing("cuMemHostUnregister", unregister_unknown);
    failing("cuMemRelease", release_unknown);
    failing("cuMemUnmap", unmap_unmapped);
    failing("cuIpcCloseMemHandle", close_null);
    failing("cuIpcOpenMemHandle_v2", open_null);
    printf("errno kept %d of %d\n", kept, calls);
    return 0;
}

/* ---- forked children that cannot record ----------------------------------- */

static int scenario_fork_fail(int count) {
    void *p = keep(5000);
    fflush(stdout);
    for (int i = 0; i < count; i++) {
        pid_t child = fork();
        if (child == 0) {
            if (setuid(65534) != 0) _exit(40);
            void *q;
            if (cudaMalloc(&q, 3000) != 0 || cudaFree(q) != 0) _exit(41);
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("status child %d\n", status);
            return 42;
        }
        printf("failed-child %d\n", child);
    }
    check("cudaFree", cudaFree(p));
    return 0;
}

/* ---- SIGINT twice --------------------------------------------------------- */

static volatile sig_atomic_t interrupts;

static void on_sigint(int sig) {
    interrupts++;
    char line[32];
    int length = snprintf(line, sizeof line, "sigint %d\n", (int)interrupts);
    if (write(1, line, (size_t)length) != length) _exit(50);
    if (interrupts == 2) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

static int scenario_sigint_twice(void) {
    keep(4096);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_sigint;
    sigaction(SIGINT, &action, NULL);
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < 600; i++) usleep(50000);
    return 51;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *name = argc > 1 ? argv[1] : "";
    printf("pid %d\n", getpid());
    if (!strcmp(name, "tiny") && argc > 2) {
        keep((size_t)atol(argv[2]));
        return 0;
    }
    if (!strcmp(name, "spawn") && argc > 2) return scenario_spawn(argv[0], atoi(argv[2]));
    if (!strcmp(name, "threads") && argc > 3) return scenario_threads(atoi(argv[2]), atoi(argv[3]));
    if (!strcmp(name, "altstack") && argc > 3) return scenario_altstack(atoi(argv[2]), !strcmp(argv[3], "first"));
    if (!strcmp(name, "execveat-a")) return scenario_execveat(argv[0], 'a');
    if (!strcmp(name, "execveat-b")) return scenario_execveat(argv[0], 'b');
    if (!strcmp(name, "execveat-c")) return scenario_execveat(argv[0], 'c');
    if (!strcmp(name, "args")) {
        cudaFree(keep(1234));
        printf("argc %d\n", argc);
        return 0;
    }
    if (!strcmp(name, "errno")) return scenario_errno();
    if (!strcmp(name, "fork-fail") && argc > 2) return scenario_fork_fail(atoi(argv[2]));
    if (!strcmp(name, "sigint-twice")) return scenario_sigint_twice();
    printf("status unknown-scenario %s\n", name);
    return 2;
}
