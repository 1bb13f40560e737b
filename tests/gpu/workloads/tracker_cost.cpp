// What an attached allocator trace tracker costs PyTorch itself, whatever
// the tracker does: with one attached, PyTorch's caching allocator builds a
// TraceEntry for every action (allocation, free requested, free completed)
// and calls the tracker. cudatrace's tensor recording is such a tracker.
//
// One process: blocks of cached allocate/free pairs of 1 MiB (no driver
// call once the first block has made the segment) with no tracker, then a
// tracker that does nothing is attached (it cannot be detached), then
// blocks with it. Prints JSON: the median ns per pair of each phase.
//
//   tracker_cost BLOCKS PAIRS_PER_BLOCK
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace alloc = c10::cuda::CUDACachingAllocator;

static double block_ns_per_pair(int pairs) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; i++) {
        void *p = alloc::raw_alloc(1 << 20);
        alloc::raw_delete(p);
    }
    auto end = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(end - start).count() / pairs;
}

static double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

int main(int argc, char **argv) {
    int blocks = argc > 1 ? std::atoi(argv[1]) : 15;
    int pairs = argc > 2 ? std::atoi(argv[2]) : 20000;
    alloc::init(c10::cuda::device_count());
    block_ns_per_pair(pairs);  // the segment, and warm caches
    std::vector<double> none, attached;
    for (int b = 0; b < blocks; b++) none.push_back(block_ns_per_pair(pairs));
    alloc::attachAllocatorTraceTracker([](const alloc::TraceEntry &) {});
    block_ns_per_pair(pairs);
    for (int b = 0; b < blocks; b++) attached.push_back(block_ns_per_pair(pairs));
    std::printf("{\"none_ns_per_pair\": %.1f, \"tracker_ns_per_pair\": %.1f, \"blocks\": %d, \"pairs\": %d}\n",
                median(none), median(attached), blocks, pairs);
    return 0;
}
