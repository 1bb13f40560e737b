/*
 * A fake of PyTorch 2.11's libc10_cuda.so, reduced to its CUDA caching
 * allocator as a tracer inside the process sees it.
 *
 * Binary interface, as in the real 2.11.0+cu130 library (C++11 ABI
 * libstdc++, x86-64 Itanium ABI):
 *  - .dynsym exports c10::cuda::CUDACachingAllocator::allocator, a
 *    std::atomic<CUDAAllocator*>, and nothing of the classes; the classes
 *    are hidden, so their vtables and methods are local symbols of .symtab;
 *  - NativeCachingAllocator (the default backend) derives from
 *    CUDAAllocator; virtual bool initialized() is slot 9 of its vtable and
 *    attachAllocatorTraceTracker(std::function<void(const TraceEntry&)>)
 *    slot 44, counted from the address point (vtable symbol + 16), the
 *    virtual destructor taking slots 0 and 1;
 *  - TraceEntry is 136 bytes: action_ 0, device_ 4, addr_ 8, context_ 16,
 *    stream_ 32, size_ 40, mempool_ 48, time_ 64, compile_context_ 72,
 *    user_metadata_ 104.
 * Built with FAKE_TORCH_OTHER_LAYOUT, it is a PyTorch whose layout no
 * tracer knows: TraceEntry starts with an extra 8-byte field and has size_
 * before addr_ (144 bytes), and attach sits at slot 45.
 *
 * Behaviour, as PyTorch's DeviceCachingAllocator calls trackers:
 *  - one DeviceCachingAllocator per device, each with a recursive mutex held
 *    for the whole of every public operation, cudaMalloc and cudaFree
 *    included (PYTORCH_CUDA_ALLOC_CONF=release_lock_on_cudamalloc:True
 *    releases it around cudaMalloc only);
 *  - NativeCachingAllocator::attachAllocatorTraceTracker takes the tracker
 *    by value and hands each device allocator a copy, which it keeps; the
 *    allocator is a heap object deleted by a static destructor at exit, so
 *    those copies are destroyed after main returns;
 *  - record_trace returns at once without trackers, else builds one
 *    TraceEntry and calls every tracker in order, with the device's mutex
 *    held. compile_context_ is the top of this thread's compile-context
 *    stack ("N/A" when empty), user_metadata_ this thread's metadata.
 * The cache, simplified: sizes round up to 512 bytes; a request is carved
 * from the start of the smallest free range that fits in a segment of the
 * same device, stream and pool, else a segment of max(2 MiB, size rounded
 * up to 2 MiB) comes from cudaMalloc. When cudaMalloc fails, fully free
 * segments of the default pool are given back (SEGMENT_FREE) and the
 * cudaMalloc retried once, as PyTorch does, before OOM is reported.
 * Expandable segments reserve 1 GiB of addresses per device and map 2 MiB
 * pages. ALLOC, FREE_REQUESTED and FREE_COMPLETED carry the rounded size
 * (PyTorch's own carry the size asked for; OOM carries the rounded size in
 * both). Emptying the cache first completes the frees waiting for streams,
 * as PyTorch's synchronize_and_free_events does.
 *
 * With PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync the allocator is a
 * CudaMallocAsyncAllocator instead: plain cudaMallocAsync / cudaFreeAsync,
 * no actions, and its attachAllocatorTraceTracker throws.
 *
 * Test programs drive it through the extern "C" fake_torch_* functions.
 */
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stack>
#include <stdexcept>
#include <string>
#include <time.h>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "cuda_types.h"

typedef struct CUstream_st *cudaStream_t;
typedef int cudaError_t;
typedef int CUresult;
typedef unsigned long long CUmemGenericAllocationHandle;

extern "C" {
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void **ptr, size_t size);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                             unsigned long long flags, int *driver_status);
}

/* Driver types for the VMM calls, laid out as in the CUDA 12/13 headers. */
struct CUmemAllocationProp {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
};
struct CUmemAccessDesc {
    CUmemLocation location;
    int flags;
};

#define FAKE_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {

using CaptureId_t = unsigned long long;
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;

/* What the real allocator's context recorder returns; always null here. */
struct GatheredContext {
    virtual ~GatheredContext() = default;
};

struct TraceEntry {
    enum Action {
        ALLOC,
        FREE_REQUESTED,
        FREE_COMPLETED,
        SEGMENT_ALLOC,
        SEGMENT_FREE,
        SEGMENT_MAP,
        SEGMENT_UNMAP,
        SNAPSHOT,
        OOM,
    };
    TraceEntry(Action action, int8_t device, size_t addr, size_t size, cudaStream_t stream, MempoolId_t mempool,
               uint64_t time, std::string compile_context, std::string user_metadata)
        : action_(action),
          device_(device),
#ifdef FAKE_TORCH_OTHER_LAYOUT
          size_(size),
          addr_(addr),
#else
          addr_(addr),
#endif
          stream_(stream),
#ifndef FAKE_TORCH_OTHER_LAYOUT
          size_(size),
#endif
          mempool_(std::move(mempool)),
          time_(time),
          compile_context_(std::move(compile_context)),
          user_metadata_(std::move(user_metadata)) {
    }

#ifdef FAKE_TORCH_OTHER_LAYOUT
    uint64_t serial_ = 0;
#endif
    Action action_;
    int8_t device_;
#ifdef FAKE_TORCH_OTHER_LAYOUT
    size_t size_;
    size_t addr_;
#else
    size_t addr_;
#endif
    std::shared_ptr<GatheredContext> context_;
    cudaStream_t stream_;
#ifndef FAKE_TORCH_OTHER_LAYOUT
    size_t size_;
#endif
    MempoolId_t mempool_;
    uint64_t time_;
    std::string compile_context_;
    std::string user_metadata_;
};

#ifdef FAKE_TORCH_OTHER_LAYOUT
static_assert(sizeof(TraceEntry) == 144, "the other layout is 144 bytes");
static_assert(offsetof(TraceEntry, action_) == 8 && offsetof(TraceEntry, size_) == 16 &&
                  offsetof(TraceEntry, addr_) == 24,
              "the other layout moves size_ before addr_");
#else
static_assert(sizeof(TraceEntry) == 136, "PyTorch 2.11's TraceEntry is 136 bytes");
static_assert(offsetof(TraceEntry, action_) == 0, "action_");
static_assert(offsetof(TraceEntry, device_) == 4, "device_");
static_assert(offsetof(TraceEntry, addr_) == 8, "addr_");
static_assert(offsetof(TraceEntry, context_) == 16, "context_");
static_assert(offsetof(TraceEntry, stream_) == 32, "stream_");
static_assert(offsetof(TraceEntry, size_) == 40, "size_");
static_assert(offsetof(TraceEntry, mempool_) == 48, "mempool_");
static_assert(offsetof(TraceEntry, time_) == 64, "time_");
static_assert(offsetof(TraceEntry, compile_context_) == 72, "compile_context_");
static_assert(offsetof(TraceEntry, user_metadata_) == 104, "user_metadata_");
#endif
static_assert(sizeof(TraceEntry::Action) == 4 && sizeof(std::string) == 32, "an int enum, the C++11 ABI string");

using AllocatorTraceTracker = std::function<void(const TraceEntry &)>;
static_assert(sizeof(AllocatorTraceTracker) == 32, "libstdc++'s std::function is 32 bytes");

/* The slot attachAllocatorTraceTracker must have, from the address point. */
#ifdef FAKE_TORCH_OTHER_LAYOUT
constexpr int kAttachSlot = 45;
#else
constexpr int kAttachSlot = 44;
#endif

/*
 * The allocator interface. Only the positions of initialized() (9) and
 * attachAllocatorTraceTracker (44) matter to a tracer; the methods before
 * attach keep its slot where 2.11 has it, and those after it are the fake's
 * own operations, called by the fake_torch_* functions.
 */
class CUDAAllocator {
  public:
    virtual ~CUDAAllocator() = default;                       // slots 0 and 1
    virtual void *allocate(size_t size) { return nullptr; }   // 2
    virtual void *raw_deleter() const { return nullptr; }     // 3
    virtual void copy_data(void *dest, const void *src, size_t count) const {  // 4
        std::memcpy(dest, src, count);
    }
    virtual void *raw_alloc(size_t size) { return nullptr; }                               // 5
    virtual void *raw_alloc_with_stream(size_t size, cudaStream_t stream) { return nullptr; }  // 6
    virtual void raw_delete(void *ptr) {}                                                 // 7
    virtual void init(int device_count) = 0;                                              // 8
    virtual bool initialized() = 0;                                                       // 9
    virtual double getMemoryFraction(int device) { return 1.0; }                          // 10
    virtual void setMemoryFraction(double fraction, int device) {}                        // 11
    virtual void emptyCache(MempoolId_t mempool) = 0;                                     // 12
    virtual void enable(bool value) {}                                                    // 13
    virtual bool isEnabled() const { return true; }                                       // 14
    virtual void cacheInfo(int device, size_t *largest) {}                                // 15
    virtual void *getBaseAllocation(void *ptr, size_t *size) { return ptr; }              // 16
    virtual void recordStream(void *ptr, cudaStream_t stream) = 0;                        // 17
    virtual void getDeviceStats(int device) {}                                            // 18
    virtual void resetAccumulatedStats(int device) {}                                     // 19
    virtual void resetPeakStats(int device) {}                                            // 20
    virtual void snapshot(MempoolId_t mempool) = 0;                                       // 21
    virtual void beginAllocateToPool(int device, MempoolId_t mempool) {}                  // 22
    virtual void endAllocateToPool(int device, MempoolId_t mempool) {}                    // 23
    virtual void releasePool(int device, MempoolId_t mempool) {}                          // 24
    virtual int getPoolUseCount(int device, MempoolId_t mempool) { return 0; }            // 25
    virtual void createOrIncrefPool(int device, MempoolId_t mempool) {}                   // 26
    virtual void setUseOnOOM(int device, MempoolId_t mempool) {}                          // 27
    virtual void setNoSplit(int device, MempoolId_t mempool) {}                           // 28
    virtual bool checkPoolLiveAllocations(int device, MempoolId_t mempool) { return true; }  // 29
    virtual void *shareIpcHandle(void *ptr) { return nullptr; }                           // 30
    virtual void *getIpcDevPtr(const std::string &handle) { return nullptr; }             // 31
    virtual bool isHistoryEnabled() { return false; }                                     // 32
    virtual void recordHistory(bool enabled) {}                                           // 33
    virtual void recordAnnotation(const std::string &name) {}                             // 34
    virtual void pushCompileContext(std::string &context) {                               // 35
        compile_context().push(context);
    }
    virtual void popCompileContext() {  // 36
        if (!compile_context().empty()) compile_context().pop();
    }
    virtual void setUserMetadata(const std::string &metadata) { user_metadata() = metadata; }  // 37
    virtual std::string getUserMetadata() { return user_metadata(); }                          // 38
    virtual void attachOutOfMemoryObserver(std::function<void(int64_t, size_t, size_t, size_t)> observer) {}  // 39
    virtual bool checkAllocatorSlot40() { return false; }                                 // 40
    virtual bool checkAllocatorSlot41() { return false; }                                 // 41
    virtual bool checkAllocatorSlot42() { return false; }                                 // 42
    virtual bool checkAllocatorSlot43() { return false; }                                 // 43
#ifdef FAKE_TORCH_OTHER_LAYOUT
    virtual bool checkAllocatorSlotOther() { return false; }  // 44: a method 2.11 does not have
#endif
    virtual void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) = 0;  // 44 (45 in the other layout)
    virtual const char *name() = 0;

    /* The fake's own operations, past the slots a tracer relies on. */
    virtual void *fakeMalloc(size_t size, int device, cudaStream_t stream, MempoolId_t mempool,
                             bool expandable) = 0;
    virtual void fakeFree(void *ptr) = 0;
    virtual void fakeProcessEvents() = 0;
    virtual void fakeShrinkExpandable(int device) = 0;

    /* This thread's compile-context stack and user metadata, shared by the
     * devices, as PyTorch keeps them. */
    static std::stack<std::string> &compile_context() {
        static thread_local std::stack<std::string> stack;
        return stack;
    }
    static std::string &user_metadata() {
        static thread_local std::string metadata;
        return metadata;
    }
};

/* The slot of attachAllocatorTraceTracker in the vtable, as the compiler laid
 * it out: a pointer to a virtual member function is 1 + its byte offset
 * from the address point (Itanium C++ ABI). */
static int attach_slot_of_layout() {
    auto method = &CUDAAllocator::attachAllocatorTraceTracker;
    struct {
        ptrdiff_t ptr, adj;
    } raw;
    static_assert(sizeof(method) == sizeof(raw), "an Itanium pointer to member function");
    std::memcpy(&raw, &method, sizeof raw);
    return (raw.ptr & 1) ? static_cast<int>((raw.ptr - 1) / static_cast<ptrdiff_t>(sizeof(void *))) : -1;
}

/* The allocator in use: a pointer to a heap object, as in PyTorch. */
__attribute__((visibility("default"))) std::atomic<CUDAAllocator *> allocator;

/* How many actions of each kind went to trackers. */
static std::atomic<unsigned long long> action_counts[9];

static uint64_t approximate_time() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
#endif
}

static bool alloc_conf_has(const char *option) {
    const char *conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
    return conf && std::strstr(conf, option);
}

namespace Native {

constexpr size_t kRound = 512;
constexpr size_t kPage = size_t(2) << 20;
/* PyTorch's pools: requests up to kSmallSize come from 2 MiB segments;
 * larger ones under kMinLargeAlloc from 20 MiB ones; the rest from
 * segments rounded up to 2 MiB. */
constexpr size_t kSmallSize = size_t(1) << 20;
constexpr size_t kLargeBuffer = size_t(20) << 20;
constexpr size_t kMinLargeAlloc = size_t(10) << 20;
constexpr size_t kReservation = size_t(1) << 30;

static size_t round_up(size_t size, size_t to) { return (size + to - 1) / to * to; }

/* The VMM entry points, reached as PyTorch reaches them: through the
 * runtime's cudaGetDriverEntryPointByVersion. */
struct DriverApi {
    CUresult (*cuMemAddressReserve_)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
    CUresult (*cuMemCreate_)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                             unsigned long long) = nullptr;
    CUresult (*cuMemMap_)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
    CUresult (*cuMemSetAccess_)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) = nullptr;
    CUresult (*cuMemUnmap_)(CUdeviceptr, size_t) = nullptr;
    CUresult (*cuMemRelease_)(CUmemGenericAllocationHandle) = nullptr;

    template <typename F> static void lookup(const char *name, F &fn, bool required) {
        void *found = nullptr;
        int status = 0;
        if (cudaGetDriverEntryPointByVersion(name, &found, 12000, 0, &status) != 0 || !found) {
            if (!required) return;
            std::fprintf(stderr, "fake libc10_cuda: no driver entry point %s\n", name);
            std::abort();
        }
        fn = reinterpret_cast<F>(found);
    }
    static const DriverApi &get() {
        static const DriverApi api = [] {
            DriverApi a;
            lookup("cuMemAddressReserve", a.cuMemAddressReserve_, true);
            lookup("cuMemCreate", a.cuMemCreate_, true);
            lookup("cuMemMap", a.cuMemMap_, true);
            lookup("cuMemSetAccess", a.cuMemSetAccess_, false);
            lookup("cuMemUnmap", a.cuMemUnmap_, true);
            lookup("cuMemRelease", a.cuMemRelease_, true);
            return a;
        }();
        return api;
    }
};

enum class State : uint8_t { Free, Live, Pending };

/* A range of a segment: free, handed out, or freed but in use by a stream. */
struct Chunk {
    uintptr_t addr;
    size_t size;
    State state;
};

/* A cudaMalloc'd segment, or a device's expandable segment (addr its
 * reservation, size its mapped bytes, one handle per mapped page). */
struct Segment {
    uintptr_t addr = 0;
    size_t size = 0;
    cudaStream_t stream = nullptr;
    MempoolId_t mempool{0, 0};
    /* A small-pool segment (2 MiB, for requests up to 1 MiB); expandable
     * segments split as the small pool does. */
    bool small = false;
    std::vector<Chunk> chunks;  // by address, covering [addr, addr + size)
    std::vector<CUmemGenericAllocationHandle> pages;

    size_t index_of(uintptr_t address) const {
        auto it = std::lower_bound(chunks.begin(), chunks.end(), address,
                                   [](const Chunk &c, uintptr_t a) { return c.addr < a; });
        return static_cast<size_t>(it - chunks.begin());
    }
    bool unused() const {
        return std::all_of(chunks.begin(), chunks.end(), [](const Chunk &c) { return c.state == State::Free; });
    }
    /* Hands out `size` bytes from the start of free chunk `i`, splitting
     * the rest off as PyTorch does: when at least 512 bytes remain in the
     * small pool (and expandable segments), more than 1 MiB in the large
     * one; otherwise the whole chunk goes. */
    uintptr_t carve(size_t i, size_t size) {
        Chunk &chunk = chunks[i];
        uintptr_t address = chunk.addr;
        size_t remaining = chunk.size - size;
        bool split = small ? remaining >= kRound : remaining > kSmallSize;
        if (split) {
            Chunk rest{chunk.addr + size, chunk.size - size, State::Free};
            chunk.size = size;
            chunk.state = State::Live;
            chunks.insert(chunks.begin() + static_cast<ptrdiff_t>(i) + 1, rest);
        } else {
            chunk.state = State::Live;
        }
        return address;
    }
    /* Makes the chunk at `address` free and merges it with free neighbours. */
    void release(uintptr_t address) {
        size_t i = index_of(address);
        chunks[i].state = State::Free;
        if (i + 1 < chunks.size() && chunks[i + 1].state == State::Free) {
            chunks[i].size += chunks[i + 1].size;
            chunks.erase(chunks.begin() + static_cast<ptrdiff_t>(i) + 1);
        }
        if (i > 0 && chunks[i - 1].state == State::Free) {
            chunks[i - 1].size += chunks[i].size;
            chunks.erase(chunks.begin() + static_cast<ptrdiff_t>(i));
        }
    }
};

/* Each live block's size as carved, for fake_torch_block_size: blocks
 * may be larger than the rounded request when the rest was too small to
 * split off. */
std::mutex block_sizes_mutex;
std::unordered_map<uintptr_t, size_t> block_sizes;

void note_block(const Segment &segment, uintptr_t address) {
    std::lock_guard<std::mutex> lock(block_sizes_mutex);
    block_sizes[address] = segment.chunks[segment.index_of(address)].size;
}

class DeviceCachingAllocator {
  public:
    DeviceCachingAllocator(int device, bool release_lock_on_cudamalloc)
        : device_(device), release_lock_on_cudamalloc_(release_lock_on_cudamalloc) {}

    void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) {
        std::unique_lock<std::recursive_mutex> lock(mutex_);
        trace_trackers_.emplace_back(std::move(tracker));
    }

    /* A block of `size` bytes, or 0 when the device is out of memory. */
    uintptr_t malloc(size_t size, cudaStream_t stream, MempoolId_t mempool) {
        std::unique_lock<std::recursive_mutex> lock(mutex_);
        size_t rounded = round_up(size, kRound);
        bool small = rounded <= kSmallSize;
        Segment *segment = nullptr;
        size_t index = 0;
        if (!best_fit(rounded, small, stream, mempool, segment, index)) {
            size_t segment_size = small ? kPage : rounded < kMinLargeAlloc ? kLargeBuffer : round_up(rounded, kPage);
            void *ptr = cuda_malloc(segment_size, lock);
            if (!ptr && release_cached_segments(MempoolId_t{0, 0})) ptr = cuda_malloc(segment_size, lock);
            if (!ptr) {
                size_t free_bytes = 0, total = 0;
                cudaMemGetInfo(&free_bytes, &total);
                record_trace(TraceEntry::OOM, free_bytes, rounded, stream, mempool);
                return 0;
            }
            auto added = std::make_unique<Segment>();
            added->addr = reinterpret_cast<uintptr_t>(ptr);
            added->size = segment_size;
            added->stream = stream;
            added->mempool = mempool;
            added->small = small;
            added->chunks.push_back(Chunk{added->addr, segment_size, State::Free});
            segment = added.get();
            segments_.push_back(std::move(added));
            record_trace(TraceEntry::SEGMENT_ALLOC, segment->addr, segment_size, stream, mempool);
        }
        uintptr_t address = segment->carve(index, rounded);
        blocks_[address] = segment;
        requested_[address] = size;
        note_block(*segment, address);
        // As PyTorch's, the entry carries the bytes asked for, not the block's.
        record_trace(TraceEntry::ALLOC, address, size, stream, mempool);
        return address;
    }

    /* A block of an expandable segment, mapping pages at its end as needed. */
    uintptr_t malloc_expandable(size_t size) {
        std::unique_lock<std::recursive_mutex> lock(mutex_);
        size_t rounded = round_up(size, kRound);
        const DriverApi &driver = DriverApi::get();
        if (!expandable_) {
            CUdeviceptr base = 0;
            if (driver.cuMemAddressReserve_(&base, kReservation, kPage, 0, 0) != 0) return out_of_memory(rounded);
            expandable_ = std::make_unique<Segment>();
            expandable_->addr = base;
            expandable_->small = true;  // expandable segments split as the small pool does
        }
        Segment &segment = *expandable_;
        size_t index = best_fit_in(segment, rounded);
        if (index == segment.chunks.size()) {
            size_t tail = !segment.chunks.empty() && segment.chunks.back().state == State::Free
                              ? segment.chunks.back().size
                              : 0;
            size_t bytes = round_up(rounded - tail, kPage);
            if (segment.size + bytes > kReservation) return out_of_memory(rounded);
            uintptr_t start = segment.addr + segment.size;
            CUmemAllocationProp prop{};
            prop.type = 1;           // CU_MEM_ALLOCATION_TYPE_PINNED
            prop.location.type = 1;  // CU_MEM_LOCATION_TYPE_DEVICE
            prop.location.id = device_;
            CUmemAccessDesc access{};
            access.location = prop.location;
            access.flags = 3;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            for (size_t offset = 0; offset < bytes; offset += kPage) {
                CUmemGenericAllocationHandle handle = 0;
                bool mapped = driver.cuMemCreate_(&handle, kPage, &prop, 0) == 0;
                if (mapped && driver.cuMemMap_(start + offset, kPage, 0, handle, 0) != 0) {
                    driver.cuMemRelease_(handle);
                    mapped = false;
                }
                if (!mapped) {
                    for (size_t undo = 0; undo < offset; undo += kPage) {
                        driver.cuMemUnmap_(start + undo, kPage);
                        driver.cuMemRelease_(segment.pages.back());
                        segment.pages.pop_back();
                    }
                    return out_of_memory(rounded);
                }
                if (driver.cuMemSetAccess_) driver.cuMemSetAccess_(start + offset, kPage, &access, 1);
                segment.pages.push_back(handle);
            }
            segment.size += bytes;
            if (tail)
                segment.chunks.back().size += bytes;
            else
                segment.chunks.push_back(Chunk{start, bytes, State::Free});
            index = segment.chunks.size() - 1;
            record_trace(TraceEntry::SEGMENT_MAP, start, bytes, nullptr, segment.mempool);
        }
        uintptr_t address = segment.carve(index, rounded);
        blocks_[address] = &segment;
        requested_[address] = size;
        note_block(segment, address);
        record_trace(TraceEntry::ALLOC, address, size, nullptr, segment.mempool);
        return address;
    }

    /* Unmaps the pages at the end of the expandable segment that no block uses. */
    void shrink_expandable() {
        std::unique_lock<std::recursive_mutex> lock(mutex_);
        if (!expandable_ || expandable_->chunks.empty() || expandable_->chunks.back().state != State::Free) return;
        Segment &segment = *expandable_;
        const DriverApi &driver = DriverApi::get();
        Chunk &tail = segment.chunks.back();
        uintptr_t end = segment.addr + segment.size;
        uintptr_t from = segment.addr + round_up(tail.addr - segment.addr, kPage);
        if (from >= end) return;
        for (uintptr_t page = end; page > from; page -= kPage) {
            driver.cuMemUnmap_(page - kPage, kPage);
            driver.cuMemRelease_(segment.pages.back());
            segment.pages.pop_back();
        }
        segment.size -= end - from;
        tail.size -= end - from;
        if (tail.size == 0) segment.chunks.pop_back();
        record_trace(TraceEntry::SEGMENT_UNMAP, from, end - from, nullptr, segment.mempool);
    }

    /* Frees a block: now, or, when streams still use it, at the next
     * process_events. Returns false if the block is not this device's. */
    bool free(uintptr_t address, bool after_stream_use) {
        std::unique_lock<std::recursive_mutex> lock(mutex_);
        auto found = blocks_.find(address);
        if (found == blocks_.end()) return false;
        Segment *segment = found->second;
        Chunk &chunk = segment->chunks[segment->index_of(address)];
        (void)chunk;
        record_trace(TraceEntry::FREE_REQUESTED, address, requested_.at(address), segment->stream, segment->mempool);
        if (after_stream_use) {
            chunk.state = State::Pending;
            pending_.push_back(address);
        } else {
            complete_free(address);
        }
        return true;
    }

    /* The frees waiting for streams complete (their events have fired). */
    void process_events() {
        std::unique_lock<std::recursive_mutex> lock(mutex_);
        std::vector<uintptr_t> ready;
        ready.swap(pending_);
        for (uintptr_t address : ready) complete_free(address);
    }

    /* Gives every segment without a live block back with cudaFree. */
    void empty_cache() {
        std::unique_lock<std::recursive_mutex> lock(mutex_);
        process_events();
        release_cached_segments(std::nullopt);
    }

    void snapshot() {
        std::unique_lock<std::recursive_mutex> lock(mutex_);
        record_trace(TraceEntry::SNAPSHOT, 0, 0, nullptr, MempoolId_t{0, 0});
    }

  private:
    /* The smallest free chunk of at least `size` bytes in a segment of this
     * stream and pool, the lowest address first among equals. */
    bool best_fit(size_t size, bool small, cudaStream_t stream, MempoolId_t mempool, Segment *&segment, size_t &index) {
        segment = nullptr;
        for (auto &candidate : segments_) {
            if (candidate->stream != stream || candidate->mempool != mempool || candidate->small != small) continue;
            size_t i = best_fit_in(*candidate, size);
            if (i == candidate->chunks.size()) continue;
            const Chunk &chunk = candidate->chunks[i];
            if (!segment || chunk.size < segment->chunks[index].size ||
                (chunk.size == segment->chunks[index].size && chunk.addr < segment->chunks[index].addr)) {
                segment = candidate.get();
                index = i;
            }
        }
        return segment != nullptr;
    }
    static size_t best_fit_in(const Segment &segment, size_t size) {
        size_t best = segment.chunks.size();
        for (size_t i = 0; i < segment.chunks.size(); i++) {
            const Chunk &c = segment.chunks[i];
            if (c.state == State::Free && c.size >= size && (best == segment.chunks.size() || c.size < segment.chunks[best].size))
                best = i;
        }
        return best;
    }

    void *cuda_malloc(size_t size, std::unique_lock<std::recursive_mutex> &lock) {
        cudaSetDevice(device_);
        void *ptr = nullptr;
        if (release_lock_on_cudamalloc_) lock.unlock();
        cudaError_t error = cudaMalloc(&ptr, size);
        if (release_lock_on_cudamalloc_) lock.lock();
        return error == 0 ? ptr : nullptr;
    }

    /* Frees the segments without a live block: of one pool, or of all.
     * Returns whether any was freed. */
    bool release_cached_segments(std::optional<MempoolId_t> only) {
        bool released = false;
        for (size_t i = 0; i < segments_.size();) {
            Segment &segment = *segments_[i];
            if (!segment.unused() || (only && segment.mempool != *only)) {
                i++;
                continue;
            }
            cudaSetDevice(device_);
            cudaFree(reinterpret_cast<void *>(segment.addr));
            record_trace(TraceEntry::SEGMENT_FREE, segment.addr, segment.size, segment.stream, segment.mempool);
            segments_.erase(segments_.begin() + static_cast<ptrdiff_t>(i));
            released = true;
        }
        return released;
    }

    void complete_free(uintptr_t address) {
        Segment *segment = blocks_.at(address);
        size_t size = requested_.at(address);
        segment->release(address);
        blocks_.erase(address);
        requested_.erase(address);
        std::lock_guard<std::mutex> sizes(block_sizes_mutex);
        block_sizes.erase(address);
        record_trace(TraceEntry::FREE_COMPLETED, address, size, segment->stream, segment->mempool);
    }

    uintptr_t out_of_memory(size_t rounded) {
        size_t free_bytes = 0, total = 0;
        cudaSetDevice(device_);
        cudaMemGetInfo(&free_bytes, &total);
        record_trace(TraceEntry::OOM, free_bytes, rounded, nullptr, MempoolId_t{0, 0});
        return 0;
    }

    /* Called with mutex_ held. */
    void record_trace(TraceEntry::Action action, size_t addr, size_t size, cudaStream_t stream, MempoolId_t mempool) {
        if (trace_trackers_.empty()) return;
        action_counts[action].fetch_add(1, std::memory_order_relaxed);
        auto &contexts = CUDAAllocator::compile_context();
        TraceEntry entry(action, static_cast<int8_t>(device_), addr, size, stream, mempool, approximate_time(),
                         contexts.empty() ? std::string("N/A") : contexts.top(), CUDAAllocator::user_metadata());
        for (const auto &tracker : trace_trackers_) tracker(entry);
    }

    int device_;
    bool release_lock_on_cudamalloc_;
    std::recursive_mutex mutex_;
    /* The bytes asked for, per live block. */
    std::unordered_map<uintptr_t, size_t> requested_;
    std::vector<std::unique_ptr<Segment>> segments_;
    std::unique_ptr<Segment> expandable_;
    std::unordered_map<uintptr_t, Segment *> blocks_;  // live and pending blocks
    std::vector<uintptr_t> pending_;
    std::vector<AllocatorTraceTracker> trace_trackers_;
};

class NativeCachingAllocator final : public CUDAAllocator {
  public:
    void init(int device_count) override {
        bool release_lock = alloc_conf_has("release_lock_on_cudamalloc:True");
        for (int device = static_cast<int>(device_allocator.size()); device < device_count; device++)
            device_allocator.push_back(std::make_unique<DeviceCachingAllocator>(device, release_lock));
    }
    bool initialized() override { return !device_allocator.empty(); }
    void emptyCache(MempoolId_t mempool) override {
        for (auto &a : device_allocator) a->empty_cache();
    }
    void recordStream(void *ptr, cudaStream_t stream) override { free_block(ptr, true); }
    void snapshot(MempoolId_t mempool) override {
        for (auto &a : device_allocator) a->snapshot();
    }
    void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override {
        for (auto &a : device_allocator) a->attachAllocatorTraceTracker(tracker);
    }
    const char *name() override { return "native"; }

    void *fakeMalloc(size_t size, int device, cudaStream_t stream, MempoolId_t mempool, bool expandable) override {
        if (size == 0 || device < 0 || device >= static_cast<int>(device_allocator.size())) return nullptr;
        DeviceCachingAllocator &a = *device_allocator[static_cast<size_t>(device)];
        uintptr_t address = expandable ? a.malloc_expandable(size) : a.malloc(size, stream, mempool);
        if (!address) return nullptr;
        std::lock_guard<std::mutex> lock(blocks_mutex);
        allocated_blocks[address] = device;
        return reinterpret_cast<void *>(address);
    }
    void fakeFree(void *ptr) override { free_block(ptr, false); }
    void fakeProcessEvents() override {
        for (auto &a : device_allocator) a->process_events();
    }
    void fakeShrinkExpandable(int device) override {
        if (device >= 0 && device < static_cast<int>(device_allocator.size()))
            device_allocator[static_cast<size_t>(device)]->shrink_expandable();
    }

  private:
    void free_block(void *ptr, bool after_stream_use) {
        int device;
        {
            std::lock_guard<std::mutex> lock(blocks_mutex);
            auto found = allocated_blocks.find(reinterpret_cast<uintptr_t>(ptr));
            if (found == allocated_blocks.end()) {
                std::fprintf(stderr, "fake libc10_cuda: free of %p, not a block\n", ptr);
                return;
            }
            device = found->second;
            allocated_blocks.erase(found);
        }
        device_allocator[static_cast<size_t>(device)]->free(reinterpret_cast<uintptr_t>(ptr), after_stream_use);
    }

    std::vector<std::unique_ptr<DeviceCachingAllocator>> device_allocator;
    std::mutex blocks_mutex;
    std::unordered_map<uintptr_t, int> allocated_blocks;
};

}  // namespace Native

namespace CudaMallocAsync {

class CudaMallocAsyncAllocator final : public CUDAAllocator {
  public:
    void init(int device_count) override { devices_ = device_count; }
    bool initialized() override { return devices_ > 0; }
    void emptyCache(MempoolId_t mempool) override {}
    void recordStream(void *ptr, cudaStream_t stream) override { fakeFree(ptr); }
    void snapshot(MempoolId_t mempool) override {}
    void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override {
        throw std::runtime_error(
            "cudaMallocAsync does not support attachAllocatorTraceTracker (fake libc10_cuda, backend:cudaMallocAsync)");
    }
    const char *name() override { return "cudaMallocAsync"; }

    void *fakeMalloc(size_t size, int device, cudaStream_t stream, MempoolId_t mempool, bool expandable) override {
        if (size == 0 || device < 0 || device >= devices_) return nullptr;
        cudaSetDevice(device);
        void *ptr = nullptr;
        if (cudaMallocAsync(&ptr, size, stream) != 0) return nullptr;
        std::lock_guard<std::mutex> lock(mutex_);
        live_[ptr] = Live{stream, device};
        return ptr;
    }
    void fakeFree(void *ptr) override {
        Live block;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto found = live_.find(ptr);
            if (found == live_.end()) return;
            block = found->second;
            live_.erase(found);
        }
        cudaSetDevice(block.device);
        cudaFreeAsync(ptr, block.stream);
    }
    void fakeProcessEvents() override {}
    void fakeShrinkExpandable(int device) override {}

  private:
    struct Live {
        cudaStream_t stream;
        int device;
    };
    int devices_ = 0;
    std::mutex mutex_;
    std::unordered_map<void *, Live> live_;
};

}  // namespace CudaMallocAsync

/* PyTorch never frees its allocator before exit; static destruction does, and
 * with it the trackers' copies, after main has returned. */
namespace {
struct DestroyAtExit {
    ~DestroyAtExit() { delete allocator.load(); }
} destroy_at_exit;
}  // namespace

}  // namespace CUDACachingAllocator
}  // namespace cuda
}  // namespace c10

using namespace c10::cuda::CUDACachingAllocator;

static CUDAAllocator *current() {
    CUDAAllocator *a = allocator.load();
    if (!a || !a->initialized()) {
        std::fprintf(stderr, "fake libc10_cuda: fake_torch_init was not called\n");
        std::abort();
    }
    return a;
}

/* Creates the allocator of PYTORCH_CUDA_ALLOC_CONF's backend for
 * `device_count` devices. 0 on success, -1 if there is one already. */
FAKE_TORCH_EXPORT int fake_torch_init(int device_count) {
    if (attach_slot_of_layout() != kAttachSlot) {
        std::fprintf(stderr, "fake libc10_cuda: attachAllocatorTraceTracker is at slot %d, not %d\n",
                     attach_slot_of_layout(), kAttachSlot);
        std::abort();
    }
    if (allocator.load()) return -1;
    CUDAAllocator *created;
    if (alloc_conf_has("backend:cudaMallocAsync"))
        created = new CudaMallocAsync::CudaMallocAsyncAllocator();
    else
        created = new Native::NativeCachingAllocator();
    allocator.store(created);
    created->init(device_count);
    return 0;
}

/* The backend in use: "native" or "cudaMallocAsync". */
FAKE_TORCH_EXPORT const char *fake_torch_backend(void) { return current()->name(); }

/* The vtable slot of attachAllocatorTraceTracker in this build. */
FAKE_TORCH_EXPORT int fake_torch_attach_slot(void) { return attach_slot_of_layout(); }

FAKE_TORCH_EXPORT void *fake_torch_malloc(size_t size, int device, void *stream) {
    return current()->fakeMalloc(size, device, static_cast<cudaStream_t>(stream), MempoolId_t{0, 0}, false);
}

FAKE_TORCH_EXPORT void *fake_torch_malloc_in_pool(size_t size, int device, uint64_t pool_first,
                                                  uint64_t pool_second) {
    return current()->fakeMalloc(size, device, nullptr, MempoolId_t{pool_first, pool_second}, false);
}

FAKE_TORCH_EXPORT void *fake_torch_malloc_expandable(size_t size, int device) {
    return current()->fakeMalloc(size, device, nullptr, MempoolId_t{0, 0}, true);
}

FAKE_TORCH_EXPORT void fake_torch_shrink_expandable(int device) { current()->fakeShrinkExpandable(device); }

FAKE_TORCH_EXPORT void fake_torch_free(void *ptr) { current()->fakeFree(ptr); }

/* A free of a block another stream still uses (record_stream): completed at
 * the next fake_torch_process_events. */
FAKE_TORCH_EXPORT void fake_torch_free_after_stream_use(void *ptr) { current()->recordStream(ptr, nullptr); }

FAKE_TORCH_EXPORT void fake_torch_process_events(void) { current()->fakeProcessEvents(); }

FAKE_TORCH_EXPORT void fake_torch_empty_cache(void) { current()->emptyCache(MempoolId_t{0, 0}); }

FAKE_TORCH_EXPORT void fake_torch_snapshot(void) { current()->snapshot(MempoolId_t{0, 0}); }

/* This thread's compile context (torch.compile's frame) and user metadata,
 * which every action the thread causes carries. */
FAKE_TORCH_EXPORT void fake_torch_push_compile_context(const char *context) {
    std::string text(context);
    current()->pushCompileContext(text);
}
FAKE_TORCH_EXPORT void fake_torch_pop_compile_context(void) { current()->popCompileContext(); }
FAKE_TORCH_EXPORT void fake_torch_set_user_metadata(const char *metadata) { current()->setUserMetadata(metadata); }

/* The size of the live block at `ptr` (0 if none): the rounded request, or
 * more where the rest of a free block was too small to split off. */
FAKE_TORCH_EXPORT size_t fake_torch_block_size(void *ptr) {
    std::lock_guard<std::mutex> lock(c10::cuda::CUDACachingAllocator::Native::block_sizes_mutex);
    auto found = c10::cuda::CUDACachingAllocator::Native::block_sizes.find(reinterpret_cast<uintptr_t>(ptr));
    return found == c10::cuda::CUDACachingAllocator::Native::block_sizes.end() ? 0 : found->second;
}

/* How many actions of each code went to trackers so far. */
FAKE_TORCH_EXPORT void fake_torch_counts(unsigned long long out[9]) {
    for (int i = 0; i < 9; i++) out[i] = action_counts[i].load(std::memory_order_relaxed);
}
