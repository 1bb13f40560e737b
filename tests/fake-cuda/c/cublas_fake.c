/* A stand-in for cuBLAS's handle creation (`cublasCreate`): it asks the
 * driver for the handle's device memory itself, not through PyTorch's
 * caching allocator, and fails with CUBLAS_STATUS_ALLOC_FAILED when that
 * allocation fails. Its file name starts as NVIDIA's library's does, so
 * that reports treat its frames as they treat cuBLAS's. */
#include <stddef.h>

#include "cuda_types.h"

int cuMemAlloc_v2(CUdeviceptr *, size_t);

enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_ALLOC_FAILED = 3 };

__attribute__((visibility("default"), noinline)) int cublas_fake_create(size_t bytes, CUdeviceptr *memory) {
    int result = cuMemAlloc_v2(memory, bytes);
    return result == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
