/* The outer of two libraries that each allocate with cudaMalloc; it also
 * calls the inner one, whose allocation is the inner library's. */
#include <stddef.h>

int cudaMalloc(void **, size_t);
int owner_inner_allocate(size_t, void **);

__attribute__((visibility("default"), noinline)) int owner_outer_allocate(size_t own, size_t inner, void **out) {
    int status = cudaMalloc(&out[0], own);
    if (status) return status;
    return owner_inner_allocate(inner, &out[1]);
}
