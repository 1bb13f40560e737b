/*
 * A program that uses the fake libc10_cuda.so the way Python uses PyTorch's:
 * dlopen(RTLD_NOW | RTLD_GLOBAL), then allocations through its caching
 * allocator.
 *
 *   torch_like <path of libc10_cuda.so> <scenario>
 *
 * Scenarios: basic, threads, record_stream, expandable, pool, oom,
 * limit_recover and limit_library (for a memory limit; see each), snapshot,
 * two_devices, late_attach, async, all (basic, record_stream, expandable,
 * pool, snapshot and oom in turn on one device), vtable, backward (a
 * training step's memory as autograd leaves it: parameters allocated on the
 * main thread, and on a second thread, as autograd's device thread does,
 * two autograd nodes that each keep a gradient and free a temporary; it
 * prints "parameters N", "gradients N" and "temporaries N", in bytes),
 * training, straight and serving (see "A training loop" below).
 *
 * Prints, at the end:
 *   actions alloc=N free_requested=N ... oom=N     what the library emitted
 *                                                  to trackers (fake_torch_counts)
 *   tracker alloc=N ... pooled=N long_context=N bad=N unseen=N live=N
 *                                                  what this program's own tracker
 *                                                  received, when attached: actions
 *                                                  in a private pool, compile contexts
 *                                                  of more than 15 bytes, malformed
 *                                                  entries, frees of blocks allocated
 *                                                  before the attach, blocks live
 *   tracker oom free=N size=N                      the last OOM's free bytes and size
 *   block 0x<address> <bytes>                      each block still live, in
 *                                                  address order (rounded size)
 *   main returned
 * and, from static destruction after main, one line per device allocator
 * holding a copy of the program's tracker:
 *   tracker copy destroyed after main
 *
 * Environment:
 *   FAKE_TORCH_SELF_TRACKER=1     attach a tracker of this program's own, as a
 *                                 C++ caller does: through the allocator
 *                                 object's vtable slot 44, right after init;
 *   FAKE_TORCH_SELF_TRACKER=late  the same, but late_attach attaches only
 *                                 after its first three tensors;
 *   FAKE_TORCH_PAUSE_MS=<ms>      late_attach sleeps this long between its
 *                                 two halves (after printing "late_attach: pause");
 *   FAKE_TORCH_AFTER_FAILURE=exit|kill|exec PATH ARGS...
 *                                 what limit_library does once its cuBLAS-like
 *                                 library failed (see limit_library).
 * The `vtable` scenario prints where attach is, as offsets from the
 * library's load base: "vtable slot=S vptr=0x.. entry=0x.. initialized=<0|1>".
 */
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

/* Autograd nodes, named as PyTorch's are, so that their frames read as
 * `torch::autograd::generated::ConvolutionBackward0::apply(...)`. Each calls
 * the allocator itself, as PyTorch's nodes reach it through framework code
 * only: no frame of the program's lies between. */
namespace torch {
namespace autograd {
namespace generated {
using Malloc = void *(*)(size_t, int, void *);
using Free = void (*)(void *);
struct ConvolutionBackward0 {
    __attribute__((noinline)) static void apply(Malloc malloc, Free free, std::vector<void *> &gradients) {
        for (int i = 0; i < 3; i++) gradients.push_back(malloc(size_t(4) << 20, 0, nullptr));
        free(malloc(size_t(8) << 20, 0, nullptr));
    }
};
struct AddmmBackward0 {
    __attribute__((noinline)) static void apply(Malloc malloc, Free free, std::vector<void *> &gradients) {
        gradients.push_back(malloc(size_t(2) << 20, 0, nullptr));
        free(malloc(size_t(1) << 20, 0, nullptr));
    }
};
}  // namespace generated
}  // namespace autograd
}  // namespace torch

namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kGiB = size_t(1) << 30;
const char *const kActionNames[9] = {"alloc",        "free_requested", "free_completed",
                                     "segment_alloc", "segment_free",   "segment_map",
                                     "segment_unmap", "snapshot",       "oom"};
const char *const kAllocatorSymbol = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";

struct Api {
    int (*init)(int);
    const char *(*backend)(void);
    int (*attach_slot)(void);
    void *(*malloc)(size_t, int, void *);
    void *(*malloc_in_pool)(size_t, int, uint64_t, uint64_t);
    void *(*malloc_expandable)(size_t, int);
    void (*shrink_expandable)(int);
    void (*free)(void *);
    void (*free_after_stream_use)(void *);
    void (*process_events)(void);
    void (*empty_cache)(void);
    void (*snapshot)(void);
    void (*push_compile_context)(const char *);
    void (*pop_compile_context)(void);
    void (*set_user_metadata)(const char *);
    void (*counts)(unsigned long long *);
    size_t (*block_size)(void *);
} api;
void *library;
int devices;

template <typename F> void find(F &fn, const char *name) {
    void *found = dlsym(library, name);
    if (!found) {
        std::fprintf(stderr, "torch_like: %s not in the library\n", name);
        std::exit(2);
    }
    fn = reinterpret_cast<F>(found);
}

/* ---- The program's own tracker ----------------------------------------- */

/* PyTorch 2.11's TraceEntry, read at its offsets as a tracer does. */
struct TraceEntry;
using Tracker = std::function<void(const TraceEntry &)>;

struct Tally {
    std::atomic<unsigned long long> actions[9];
    std::atomic<unsigned long long> pooled, long_context, bad;
    std::atomic<unsigned long long> unseen;  // frees of blocks allocated before the attach
    std::atomic<uint64_t> oom_free, oom_size;
    std::mutex mutex;
    std::map<uint64_t, uint64_t> live;  // what ALLOC and FREE_COMPLETED left
} tally;
std::atomic<bool> attached{false};
std::atomic<bool> main_returned{false};

void bad_entry(const char *why, int action) {
    tally.bad++;
    std::printf("bad entry: %s (action %d)\n", why, action);
}

struct SelfTracker {
    SelfTracker() = default;
    SelfTracker(const SelfTracker &) = default;
    ~SelfTracker() {
        if (main_returned.load()) {
            std::printf("tracker copy destroyed after main\n");
            std::fflush(stdout);
        }
    }
    void operator()(const TraceEntry &entry) const {
        const unsigned char *p = reinterpret_cast<const unsigned char *>(&entry);
        int action;
        int8_t device;
        uint64_t addr, size, pool_first, pool_second, time;
        std::memcpy(&action, p + 0, 4);
        std::memcpy(&device, p + 4, 1);
        std::memcpy(&addr, p + 8, 8);
        std::memcpy(&size, p + 40, 8);
        std::memcpy(&pool_first, p + 48, 8);
        std::memcpy(&pool_second, p + 56, 8);
        std::memcpy(&time, p + 64, 8);
        const std::string &compile_context = *reinterpret_cast<const std::string *>(p + 72);
        const std::string &user_metadata = *reinterpret_cast<const std::string *>(p + 104);
        if (action < 0 || action > 8) return bad_entry("action", action);
        if (device < 0 || device >= devices) return bad_entry("device", action);
        if (time == 0) return bad_entry("time", action);
        if (compile_context.empty() || user_metadata.size() > 4096) return bad_entry("strings", action);
        // Block actions carry the bytes asked for, as PyTorch's do.
        if (action <= 2 && size == 0) return bad_entry("block size", action);
        tally.actions[action]++;
        if (pool_first || pool_second) tally.pooled++;
        if (compile_context.size() > 15) tally.long_context++;
        std::lock_guard<std::mutex> lock(tally.mutex);
        if (action == 0 && !tally.live.emplace(addr, size).second) bad_entry("block allocated twice", action);
        if (action == 2) {
            auto found = tally.live.find(addr);
            if (found == tally.live.end())
                tally.unseen++;
            else if (found->second != size)
                bad_entry("free of another size", action);
            else
                tally.live.erase(found);
        }
        if (action == 8) {
            tally.oom_free = addr;
            tally.oom_size = size;
        }
    }
};

void *allocator_object() {
    auto *slot = static_cast<std::atomic<void *> *>(dlsym(library, kAllocatorSymbol));
    if (!slot) {
        std::fprintf(stderr, "torch_like: no %s\n", kAllocatorSymbol);
        std::exit(2);
    }
    return slot->load();
}

/* Attaches SelfTracker through slot 44 of the allocator's vtable, as C++
 * code calling attachAllocatorTraceTracker(tracker) does. */
void attach_self() {
    int slot = api.attach_slot();
    if (slot != 44) {
        std::printf("self tracker: attach is at slot %d, not 2.11's 44; not attached\n", slot);
        return;
    }
    void *object = allocator_object();
    void **vtable = *static_cast<void ***>(object);
    using Attach = void (*)(void *, Tracker);
    Attach attach = reinterpret_cast<Attach>(vtable[44]);
    try {
        attach(object, Tracker(SelfTracker()));
        attached = true;
        std::printf("self tracker attached\n");
    } catch (const std::exception &e) {
        std::printf("self tracker: attach failed: %s\n", e.what());
    }
}

enum class When { AfterInit, Late };
void maybe_attach(When when) {
    const char *mode = std::getenv("FAKE_TORCH_SELF_TRACKER");
    if (!mode || !*mode || std::strcmp(mode, "0") == 0) return;
    bool late = std::strcmp(mode, "late") == 0;
    if ((when == When::Late) == late) attach_self();
}

/* ---- Allocations, as tensors ---------------------------------------------- */

std::mutex live_mutex;
std::map<uintptr_t, size_t> live;  // this program's tensors: address, rounded request

size_t rounded(size_t size) { return (size + 511) / 512 * 512; }

void *keep(void *p, size_t size) {
    if (p) {
        std::lock_guard<std::mutex> lock(live_mutex);
        live[reinterpret_cast<uintptr_t>(p)] = rounded(size);
    }
    return p;
}
void *tensor(size_t size, int device = 0) { return keep(api.malloc(size, device, nullptr), size); }
void *pool_tensor(size_t size, uint64_t first, uint64_t second) {
    return keep(api.malloc_in_pool(size, 0, first, second), size);
}
void *expandable_tensor(size_t size) { return keep(api.malloc_expandable(size, 0), size); }
void forget(void *p) {
    std::lock_guard<std::mutex> lock(live_mutex);
    live.erase(reinterpret_cast<uintptr_t>(p));
}
void release(void *p) {
    forget(p);
    api.free(p);
}

void start(int device_count) {
    devices = device_count;
    if (api.init(device_count) != 0) {
        std::fprintf(stderr, "torch_like: init failed\n");
        std::exit(2);
    }
    maybe_attach(When::AfterInit);
}

/* ---- Scenarios -------------------------------------------------------------- */

/* Ten tensors of mixed sizes, half freed, the cache emptied, three more
 * (under a compile context), all but two freed, the cache emptied again. */
void basic() {
    const size_t sizes[10] = {1000, 4096, 3 * kMiB, 100, 2 * kMiB + 1, 512, 700000, kMiB, 5000, 64 * kMiB + 3};
    void *t[10];
    for (int i = 0; i < 10; i++) t[i] = tensor(sizes[i]);
    for (int i = 0; i < 10; i += 2) release(t[i]);
    api.empty_cache();
    api.push_compile_context("torch_like/compiled_region:basic");
    void *more[3] = {tensor(2 * kMiB), tensor(256), tensor(10 * kMiB)};
    api.pop_compile_context();
    for (int i = 3; i < 10; i += 2) release(t[i]);
    release(more[0]);
    release(more[1]);
    api.empty_cache();
    /* t[1] (4096 bytes) and more[2] (10 MiB) stay live. */
}

/* Parameters of 13 MiB, more than either node's gradients (12 and 2 MiB)
 * but less than the backward pass's (14 MiB). */
void backward() {
    void *parameters = api.malloc(13 * kMiB, 0, nullptr);
    std::vector<void *> gradients;
    std::thread engine([&gradients] {
        torch::autograd::generated::ConvolutionBackward0::apply(api.malloc, api.free, gradients);
        torch::autograd::generated::AddmmBackward0::apply(api.malloc, api.free, gradients);
    });
    engine.join();
    (void)parameters;
    std::printf("parameters %zu\ngradients %zu\ntemporaries %zu\n", 13 * kMiB, 14 * kMiB, 9 * kMiB);
}

/* ---- A training loop, for step finding and growth ----------------------------
 * `training`: three parameters, then FAKE_TORCH_STEPS steps (default 8),
 * each in its own functions, so that every step allocates from the same
 * call stacks: a forward pass (two activations and an output), a backward
 * pass (gradients, made at the first step only, and kept), an optimizer
 * step (a temporary). The previous step's output is freed once the new one
 * is made, unless FAKE_TORCH_LEAK=1 keeps every output in a list. Then
 * everything is freed, as Python frees it at exit, and it prints
 * "steps N" and "output bytes N". The allocator is called directly, not
 * through this program's helpers, so that each tensor's innermost frame of
 * the program is the line that made it, as a Python line is.
 * `straight`: the same calls once each, no loop. */
constexpr size_t kOutputBytes = kMiB;

struct Model {
    void *parameters[3] = {};
    void *gradients[3] = {};
};

__attribute__((noinline)) void *forward_pass() {
    void *first = api.malloc(4 * kMiB, 0, nullptr);
    void *second = api.malloc(2 * kMiB, 0, nullptr);
    void *output = api.malloc(kOutputBytes, 0, nullptr);
    api.free(first);
    api.free(second);
    return output;
}

__attribute__((noinline)) void backward_pass(Model &model) {
    void *activation_grad = api.malloc(3 * kMiB, 0, nullptr);
    for (int i = 0; i < 3; i++)
        if (!model.gradients[i]) model.gradients[i] = api.malloc((i + 1) * 256 * 1024, 0, nullptr);
    api.free(activation_grad);
}

__attribute__((noinline)) void optimizer_step() { api.free(api.malloc(512 * 1024, 0, nullptr)); }

__attribute__((noinline)) void *training_step(Model &model) {
    void *output = forward_pass();
    backward_pass(model);
    optimizer_step();
    return output;
}

void training() {
    const char *steps_text = std::getenv("FAKE_TORCH_STEPS");
    const char *leak_text = std::getenv("FAKE_TORCH_LEAK");
    long steps = steps_text ? std::atol(steps_text) : 8;
    bool leak = leak_text && std::strcmp(leak_text, "1") == 0;
    Model model;
    for (int i = 0; i < 3; i++) model.parameters[i] = api.malloc((i + 1) * 256 * 1024, 0, nullptr);
    std::vector<void *> kept;
    void *previous = nullptr;
    for (long step = 0; step < steps; step++) {
        void *output = training_step(model);
        if (leak) {
            kept.push_back(output);
        } else {
            if (previous) api.free(previous);
            previous = output;
        }
    }
    /* Exit: everything goes. */
    for (void *p : kept) api.free(p);
    if (previous) api.free(previous);
    for (void *p : model.gradients) api.free(p);
    for (void *p : model.parameters) api.free(p);
    std::printf("steps %ld\noutput bytes %zu\n", steps, kOutputBytes);
}

/* `serving`: 256 requests, each handled by one of five handlers chosen
 * pseudo-randomly (so no call stack repeats evenly: no steps), each making
 * and freeing a temporary; with FAKE_TORCH_LEAK=1 the upload handler also
 * keeps a 64 KiB buffer per request. FAKE_TORCH_REQUEST_US=<us> sleeps
 * that long after each request. Everything is freed at the end.
 * Prints "kept N". */
constexpr size_t kKeptBytes = 64 * 1024;

__attribute__((noinline)) void handle_read() { api.free(api.malloc(100 * 1024, 0, nullptr)); }
__attribute__((noinline)) void handle_write() { api.free(api.malloc(200 * 1024, 0, nullptr)); }
__attribute__((noinline)) void handle_list() { api.free(api.malloc(300 * 1024, 0, nullptr)); }
__attribute__((noinline)) void handle_stat() { api.free(api.malloc(400 * 1024, 0, nullptr)); }
__attribute__((noinline)) void handle_upload(std::vector<void *> &kept, bool leak) {
    void *scratch = api.malloc(500 * 1024, 0, nullptr);
    if (leak) kept.push_back(api.malloc(kKeptBytes, 0, nullptr));
    api.free(scratch);
}

void serving() {
    const char *leak_text = std::getenv("FAKE_TORCH_LEAK");
    bool leak = leak_text && std::strcmp(leak_text, "1") == 0;
    const char *pause_text = std::getenv("FAKE_TORCH_REQUEST_US");
    long pause_us = pause_text ? std::atol(pause_text) : 0;
    std::vector<void *> kept;
    uint32_t state = 12345;
    for (int request = 0; request < 256; request++) {
        if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
        state = state * 1103515245u + 12345u;
        switch ((state >> 16) % 5) {
            case 0: handle_read(); break;
            case 1: handle_write(); break;
            case 2: handle_list(); break;
            case 3: handle_stat(); break;
            default: handle_upload(kept, leak); break;
        }
    }
    std::printf("kept %zu\n", kept.size());
    for (void *p : kept) api.free(p);
}

void straight() {
    Model model;
    for (int i = 0; i < 3; i++) model.parameters[i] = api.malloc((i + 1) * 256 * 1024, 0, nullptr);
    api.free(forward_pass());
    backward_pass(model);
    optimizer_step();
    for (void *p : model.gradients) api.free(p);
}

/* One allocation and its free, called `Level` distinct frames deep (each
 * level its own function, so each frame has its own return address, as the
 * 40-odd native frames between a PyTorch operator and the allocator do). */
template <int Level>
__attribute__((noinline)) void pair_at_depth() {
    if constexpr (Level == 0) {
        api.free(api.malloc(4096, 0, nullptr));
    } else {
        pair_at_depth<Level - 1>();
        asm volatile("" ::: "memory");  // keeps the call from becoming a jump
    }
}

/* The cost of an action: FAKE_TORCH_BENCH_PAIRS (default 200,000)
 * allocations of 4 KiB and their frees, from one cached segment (no driver
 * call in the loop), timed as a whole. Each pair is three actions: alloc,
 * free requested, free completed. */
void bench() {
    const char *text = std::getenv("FAKE_TORCH_BENCH_PAIRS");
    long pairs = text ? std::atol(text) : 200000;
    api.free(api.malloc(4096, 0, nullptr));  // the segment, and the attach
    // FAKE_TORCH_BENCH_POLLUTE_KIB: before each pair, touch that much other
    // memory (untimed), as a training step's kernels and tensors do between
    // two allocations, so that the pair runs with a cold cache.
    // FAKE_TORCH_BENCH_DEEP=1: each pair 40 frames deeper, see pair_at_depth.
    const char *deep_text = std::getenv("FAKE_TORCH_BENCH_DEEP");
    void (*pair)() = deep_text && std::strcmp(deep_text, "1") == 0 ? pair_at_depth<40> : pair_at_depth<0>;
    const char *pollute_text = std::getenv("FAKE_TORCH_BENCH_POLLUTE_KIB");
    size_t pollute = pollute_text ? size_t(std::atol(pollute_text)) * 1024 : 0;
    std::vector<unsigned char> junk(pollute);
    // The call-timing diagnostic build's window (tests/gpu/dev), if preloaded.
    auto mark = reinterpret_cast<void (*)(uint64_t)>(dlsym(RTLD_DEFAULT, "cudatrace_call_timing_mark"));
    if (mark) mark(0);
    double ns = 0;
    if (pollute == 0) {
        timespec start{}, end{};
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (long i = 0; i < pairs; i++) pair();
        clock_gettime(CLOCK_MONOTONIC, &end);
        ns = double(end.tv_sec - start.tv_sec) * 1e9 + double(end.tv_nsec - start.tv_nsec);
    } else {
        for (long i = 0; i < pairs; i++) {
            for (size_t j = 0; j < pollute; j += 64) junk[j] += 1;
            timespec start{}, end{};
            clock_gettime(CLOCK_MONOTONIC, &start);
            pair();
            clock_gettime(CLOCK_MONOTONIC, &end);
            ns += double(end.tv_sec - start.tv_sec) * 1e9 + double(end.tv_nsec - start.tv_nsec);
        }
    }
    if (mark) mark(uint64_t(pairs));
    std::printf("bench pairs=%ld ns_per_pair=%.1f\n", pairs, ns / double(pairs > 0 ? pairs : 1));
}

/* Four threads, two per device, 2000 allocations each of varying sizes,
 * each freed three allocations later, with some emptying of the cache.
 * As in a training script, the main thread allocates first (one tensor,
 * freed before the threads start). */
void threads() {
    release(tensor(1000, 0));
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; t++) {
        workers.emplace_back([t] {
            int device = t % 2;
            uint64_t seed = 0x9E3779B97F4A7C15ull * uint64_t(t + 1);
            std::vector<void *> ring;
            for (int i = 0; i < 2000; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                size_t size = 1 + size_t((seed >> 33) % (3 * kMiB));
                ring.push_back(tensor(size, device));
                if (ring.size() > 3) {
                    release(ring.front());
                    ring.erase(ring.begin());
                }
                if (i % 500 == 499) api.empty_cache();
            }
            for (void *p : ring) release(p);
        });
    }
    for (auto &w : workers) w.join();
    api.empty_cache();
}

/* A tensor freed while another stream uses it: its block is not reused until
 * the stream's event has fired (process_events). */
void record_stream() {
    api.set_user_metadata("record_stream: user metadata long enough for the heap");
    void *a = tensor(kMiB);
    forget(a);
    api.free_after_stream_use(a);
    void *b = tensor(kMiB);
    api.process_events();
    void *c = tensor(kMiB);
    std::printf("record_stream distinct=%d reused=%d\n", b != a, c == a);
    release(b);
    release(c);
    api.set_user_metadata("");
    api.empty_cache();
}

/* An expandable segment growing by whole pages and shrinking back. */
void expandable() {
    void *a = expandable_tensor(kMiB);
    void *b = expandable_tensor(5 * kMiB);
    void *c = expandable_tensor(512 * 1024);
    release(c);
    api.shrink_expandable(0);
    release(b);
    api.shrink_expandable(0);
    void *d = expandable_tensor(3 * kMiB);
    release(d);
    api.shrink_expandable(0);
    std::printf("expandable contiguous=%d\n",
                static_cast<char *>(b) == static_cast<char *>(a) + kMiB &&
                    static_cast<char *>(c) == static_cast<char *>(a) + 6 * kMiB &&
                    static_cast<char *>(d) == static_cast<char *>(a) + kMiB);
    /* a stays live. */
}

/* Tensors in the private pool (1, 0) and in the default pool side by side. */
void pool() {
    void *p1 = pool_tensor(kMiB, 1, 0);
    void *d1 = tensor(kMiB);
    void *p2 = pool_tensor(512 * 1024, 1, 0);
    void *d2 = tensor(512 * 1024);
    release(p1);
    release(p2);
    release(d1);
    api.empty_cache();
    void *p3 = pool_tensor(3 * kMiB, 1, 0);
    (void)d2;
    (void)p3;
    /* d2 and p3 stay live. */
}

/* A request larger than the device: the cached free segment is given back
 * and the request retried before OOM, with the device's free bytes. */
void oom() {
    void *a = tensor(kMiB);
    release(tensor(3 * kMiB));
    void *huge = api.malloc(2 * kGiB, 0, nullptr);
    std::printf("oom null=%d\n", huge == nullptr);
    release(a);
}

/* Under a memory limit of 40 MiB: 22 MiB held (2 MiB of a 1 MiB tensor's
 * segment, 20 MiB cached), then 24 MiB asked: refused until the cache is
 * given back, then granted, as on a card of that size. */
void limit_recover() {
    void *a = tensor(kMiB);
    release(tensor(3 * kMiB));
    void *big = api.malloc(24 * kMiB, 0, nullptr);
    std::printf("limit_recover granted=%d\n", big != nullptr);
    if (big) api.free(big);
    release(a);
}

/* Under a memory limit of 40 MiB: as limit_recover, PyTorch recovers from
 * one refusal and keeps its 24 MiB; then a cuBLAS-like library
 * (libcublas_fake.so, loaded as PyTorch loads cuBLAS) asks the driver for
 * 32 MiB itself, is refused, and fails as `cublasCreate` does. What the
 * program does then is FAKE_TORCH_AFTER_FAILURE's: "exit" exits 1, as an
 * uncaught RuntimeError does; "kill" is killed by SIGKILL, as by the
 * kernel's out-of-memory killer; "exec PATH ARGS..." execs PATH with the
 * arguments (split at spaces, PATH first); anything else goes on and
 * returns 0. */
void limit_library() {
    void *a = tensor(kMiB);
    release(tensor(3 * kMiB));
    void *big = api.malloc(24 * kMiB, 0, nullptr);
    void *blas = dlopen("libcublas_fake.so", RTLD_NOW);
    if (!blas) {
        std::fprintf(stderr, "torch_like: %s\n", dlerror());
        std::exit(2);
    }
    using Create = int (*)(size_t, unsigned long long *);
    auto create = reinterpret_cast<Create>(dlsym(blas, "cublas_fake_create"));
    unsigned long long handle = 0;
    int status = create(32 * kMiB, &handle);
    std::printf("limit_library granted=%d blas=%d\n", big != nullptr, status);
    std::fflush(stdout);
    const char *after = std::getenv("FAKE_TORCH_AFTER_FAILURE");
    std::string then = after ? after : "";
    if (then == "exit") std::exit(1);
    if (then == "kill") raise(SIGKILL);
    if (then.rfind("exec ", 0) == 0) {
        std::vector<std::string> words;
        for (size_t at = 5; at < then.size();) {
            size_t space = then.find(' ', at);
            if (space == std::string::npos) space = then.size();
            words.push_back(then.substr(at, space - at));
            at = space + 1;
        }
        std::vector<char *> args;
        for (std::string &word : words) args.push_back(&word[0]);
        args.push_back(nullptr);
        execv(args[0], args.data());
        std::exit(2);
    }
    if (big) api.free(big);
    release(a);
}

void snapshot() {
    void *a = tensor(4096);
    api.snapshot();
    release(a);
}

/* Tensors on two devices; a snapshot reaches both. */
void two_devices() {
    void *a = tensor(kMiB, 0);
    void *b = tensor(3 * kMiB, 0);
    void *c = tensor(kMiB, 1);
    void *d = tensor(512, 1);
    api.snapshot();
    release(a);
    release(d);
    api.empty_cache();
    (void)b;
    (void)c;
    /* b (device 0) and c (device 1) stay live. */
}

void late_attach() {
    void *a = tensor(kMiB);
    void *b = tensor(4096);
    void *c = tensor(3 * kMiB);
    maybe_attach(When::Late);
    std::printf("late_attach: pause\n");
    std::fflush(stdout);
    if (const char *ms = std::getenv("FAKE_TORCH_PAUSE_MS"))
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(ms)));
    void *d = tensor(2 * kMiB);
    release(b);
    void *e = tensor(512);
    release(d);
    (void)a;
    (void)c;
    (void)e;
    /* a, c and e stay live. */
}

void async() {
    if (std::strcmp(api.backend(), "cudaMallocAsync") != 0) {
        std::fprintf(stderr, "torch_like: the async scenario needs PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync\n");
        std::exit(2);
    }
    void *a = tensor(kMiB);
    void *b = tensor(1000);
    release(a);
    void *c = tensor(4 * kMiB);
    release(b);
    (void)c;
}

void vtable() {
    void *object = allocator_object();
    Dl_info info;
    if (!dladdr(dlsym(library, kAllocatorSymbol), &info)) {
        std::fprintf(stderr, "torch_like: dladdr failed\n");
        std::exit(2);
    }
    uintptr_t base = reinterpret_cast<uintptr_t>(info.dli_fbase);
    int slot = api.attach_slot();
    void **vptr = *static_cast<void ***>(object);
    std::printf("vtable slot=%d vptr=0x%lx entry=0x%lx\n", slot, static_cast<unsigned long>(reinterpret_cast<uintptr_t>(vptr) - base),
                static_cast<unsigned long>(reinterpret_cast<uintptr_t>(vptr[slot]) - base));
}

void the_dispatch(const std::string &scenario) {
    struct Entry {
        const char *name;
        int devices;
        void (*run)();
    };
    const Entry scenarios[] = {
        {"basic", 1, basic},
        {"threads", 2, threads},
        {"record_stream", 1, record_stream},
        {"expandable", 1, expandable},
        {"pool", 1, pool},
        {"oom", 1, oom},
        {"limit_recover", 1, limit_recover},
        {"limit_library", 1, limit_library},
        {"snapshot", 1, snapshot},
        {"two_devices", 2, two_devices},
        {"late_attach", 1, late_attach},
        {"async", 1, async},
        {"vtable", 1, vtable},
        {"bench", 1, bench},
        {"backward", 1, backward},
        {"training", 1, training},
        {"straight", 1, straight},
        {"serving", 1, serving},
    };
    if (scenario == "all") {
        start(1);
        for (auto run : {basic, record_stream, expandable, pool, snapshot, oom}) run();
        return;
    }
    for (const Entry &e : scenarios) {
        if (scenario == e.name) {
            start(e.devices);
            e.run();
            return;
        }
    }
    std::fprintf(stderr, "torch_like: no scenario %s\n", scenario.c_str());
    std::exit(2);
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: torch_like <libc10_cuda.so> <scenario>\n");
        return 2;
    }
    library = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!library) {
        std::fprintf(stderr, "torch_like: %s\n", dlerror());
        return 2;
    }
    find(api.init, "fake_torch_init");
    find(api.backend, "fake_torch_backend");
    find(api.attach_slot, "fake_torch_attach_slot");
    find(api.malloc, "fake_torch_malloc");
    find(api.malloc_in_pool, "fake_torch_malloc_in_pool");
    find(api.malloc_expandable, "fake_torch_malloc_expandable");
    find(api.shrink_expandable, "fake_torch_shrink_expandable");
    find(api.free, "fake_torch_free");
    find(api.free_after_stream_use, "fake_torch_free_after_stream_use");
    find(api.process_events, "fake_torch_process_events");
    find(api.empty_cache, "fake_torch_empty_cache");
    find(api.snapshot, "fake_torch_snapshot");
    find(api.push_compile_context, "fake_torch_push_compile_context");
    find(api.pop_compile_context, "fake_torch_pop_compile_context");
    find(api.set_user_metadata, "fake_torch_set_user_metadata");
    find(api.counts, "fake_torch_counts");
    find(api.block_size, "fake_torch_block_size");

    the_dispatch(argv[2]);

    unsigned long long counts[9];
    api.counts(counts);
    std::printf("actions");
    for (int i = 0; i < 9; i++) std::printf(" %s=%llu", kActionNames[i], counts[i]);
    std::printf("\n");
    if (attached) {
        std::lock_guard<std::mutex> lock(tally.mutex);
        std::printf("tracker");
        for (int i = 0; i < 9; i++) std::printf(" %s=%llu", kActionNames[i], tally.actions[i].load());
        std::printf(" pooled=%llu long_context=%llu bad=%llu unseen=%llu live=%zu\n", tally.pooled.load(),
                    tally.long_context.load(), tally.bad.load(), tally.unseen.load(), tally.live.size());
        if (tally.actions[8])
            std::printf("tracker oom free=%llu size=%llu\n", static_cast<unsigned long long>(tally.oom_free.load()),
                        static_cast<unsigned long long>(tally.oom_size.load()));
    }
    for (const auto &block : live) {
        // The caching allocator's block; the async backend has none.
        size_t size = api.block_size(reinterpret_cast<void *>(block.first));
        std::printf("block 0x%lx %zu\n", static_cast<unsigned long>(block.first), size ? size : block.second);
    }
    std::printf("main returned\n");
    std::fflush(stdout);
    main_returned = true;
    return 0;
}
