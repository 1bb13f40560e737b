#!/usr/bin/env bash
# What the tensors issue needs to know about the installed PyTorch's caching
# allocator, read from the wheel on the GPU machine: the symbols of
# libc10_cuda.so that an in-process tracker attach would use (dynamic and
# static symbol tables), the headers' declarations of the tracker and of
# TraceEntry, and TraceEntry's layout (size and field offsets) as the
# installed headers compile it. Prints a report; nothing is changed.
set -uo pipefail
py=${PYTHON:-python3}
torch_dir=$($py -c "import torch, os; print(os.path.dirname(torch.__file__))")
$py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cxx11 abi', torch._C._GLIBCXX_USE_CXX11_ABI)"
lib=$torch_dir/lib/libc10_cuda.so
inc=$torch_dir/include
echo "== $lib: $(stat -c %s "$lib") bytes; sections with symbols:"
readelf -S -W "$lib" | grep -E "\.(dynsym|symtab|dynstr|strtab) " | awk '{print "  ", $2, $3}'
echo "== dynamic symbols: the allocator object and trace-tracker methods"
nm -D -C --defined-only "$lib" | grep -E "CUDACachingAllocator::allocator\b|TraceTracker|recordHistory|NativeCachingAllocator" | head -40
echo "== static symbols (mangled and demangled): attach and vtables"
nm --defined-only "$lib" 2>/dev/null | grep -E "attachAllocatorTraceTracker|TraceTracker|_ZTV.*NativeCachingAllocator|_ZTV.*CudaMallocAsync|CUDACachingAllocator9allocatorE" | head -40
nm -C --defined-only "$lib" 2>/dev/null | grep -E "attachAllocatorTraceTracker|vtable for .*(NativeCachingAllocator|CudaMallocAsyncAllocator)" | head -20
echo "== headers: declarations"
for header in c10/cuda/CUDACachingAllocator.h c10/core/CachingDeviceAllocator.h c10/core/Allocator.h; do
    [ -f "$inc/$header" ] || { echo "  (no $header)"; continue; }
    echo "-- $header"
    grep -n -E "AllocatorTraceTracker|attachAllocatorTraceTracker|struct TraceEntry|enum Action|^\s+(ALLOC|FREE_REQUESTED|FREE_COMPLETED|SEGMENT_ALLOC|SEGMENT_FREE|SEGMENT_MAP|SEGMENT_UNMAP|SNAPSHOT|OOM|USER_DEFINED)\b" "$inc/$header" | head -40
done
for header in c10/cuda/CUDACachingAllocator.h c10/core/CachingDeviceAllocator.h; do
    [ -f "$inc/$header" ] || continue
    start=$(grep -n "struct TraceEntry" "$inc/$header" | head -1 | cut -d: -f1)
    [ -n "$start" ] && { echo "-- TraceEntry in $header from line $start"; sed -n "${start},$((start + 75))p" "$inc/$header"; }
done
echo "== TraceEntry as the installed headers compile it"
work=$(mktemp -d)
cat >"$work/layout.cpp" <<'CPP'
#include <c10/cuda/CUDACachingAllocator.h>
#include <cstddef>
#include <cstdio>
#include <functional>
using c10::cuda::CUDACachingAllocator::TraceEntry;
int main() {
    printf("sizeof(TraceEntry) %zu\n", sizeof(TraceEntry));
#define F(f) printf("  %-16s offset %3zu size %2zu\n", #f, offsetof(TraceEntry, f), sizeof(((TraceEntry*)0)->f));
    F(action_) F(device_) F(addr_) F(context_) F(stream_) F(size_) F(time_) F(compile_context_) F(user_metadata_)
    printf("sizeof(std::function<void(const TraceEntry&)>) %zu\n", sizeof(std::function<void(const TraceEntry&)>));
    printf("ALLOC %d FREE_REQUESTED %d FREE_COMPLETED %d SEGMENT_ALLOC %d SEGMENT_FREE %d SEGMENT_MAP %d SEGMENT_UNMAP %d SNAPSHOT %d OOM %d\n",
        (int)TraceEntry::ALLOC, (int)TraceEntry::FREE_REQUESTED, (int)TraceEntry::FREE_COMPLETED, (int)TraceEntry::SEGMENT_ALLOC,
        (int)TraceEntry::SEGMENT_FREE, (int)TraceEntry::SEGMENT_MAP, (int)TraceEntry::SEGMENT_UNMAP, (int)TraceEntry::SNAPSHOT, (int)TraceEntry::OOM);
    return 0;
}
CPP
abi=$($py -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))")
cuda_inc=$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/../include
if g++ -std=c++17 -D_GLIBCXX_USE_CXX11_ABI=$abi -I"$inc" -I"$cuda_inc" -o "$work/layout" "$work/layout.cpp" 2>"$work/err"; then
    "$work/layout"
else
    echo "  (compile failed; first errors:)"; head -15 "$work/err"
fi
rm -rf "$work"
echo "== the caching allocators' vtables: each slot's target (from the relative relocations)"
readelf -r -W "$lib" >"${TMPDIR:-/tmp}/relocs.txt"
nm -S --defined-only "$lib" >"${TMPDIR:-/tmp}/syms.txt"
nm -C --defined-only "$lib" >"${TMPDIR:-/tmp}/names.txt"
$py - "${TMPDIR:-/tmp}" <<'PY'
import sys
d = sys.argv[1]
names = {}
for line in open(f"{d}/names.txt"):
    parts = line.split(None, 2)
    if len(parts) == 3:
        names.setdefault(int(parts[0], 16), parts[2].strip())
tables = {}
for line in open(f"{d}/syms.txt"):
    parts = line.split()
    if len(parts) == 4 and parts[3].startswith("_ZTVN3c104cuda20CUDACachingAllocator"):
        tables[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
relocs = {}
for line in open(f"{d}/relocs.txt"):
    parts = line.split()
    if len(parts) >= 4 and parts[2] == "R_X86_64_RELATIVE":
        relocs[int(parts[0], 16)] = int(parts[3], 16)
    elif len(parts) >= 5 and parts[2] == "R_X86_64_64":
        relocs[int(parts[0], 16)] = int(parts[3], 16)
for table, (start, size) in sorted(tables.items()):
    print(f"-- {table}: at {start:#x}, {size} bytes")
    for offset in range(start, start + size, 8):
        target = relocs.get(offset)
        name = names.get(target, "?") if target else "(not relocated)"
        name = name.replace("c10::cuda::CUDACachingAllocator::", "")
        print(f"  slot {(offset - start) // 8:2d}: {target or 0:#x} {name[:140]}")
PY
rm -f "${TMPDIR:-/tmp}/relocs.txt" "${TMPDIR:-/tmp}/syms.txt" "${TMPDIR:-/tmp}/names.txt"
