/* The inner of two libraries that each allocate with cudaMalloc. */
#include <stddef.h>

int cudaMalloc(void **, size_t);

__attribute__((visibility("default"), noinline)) int owner_inner_allocate(size_t bytes, void **out) {
    return cudaMalloc(out, bytes);
}
