/* A library that allocates 12 native frames below its entry point, as an
 * extension's C++ layers do: the report must still open with the Python
 * line that called it. */
int cudaMalloc(void **block, unsigned long bytes);
#include <stddef.h>

#define LEVEL(name, next)                                                  \
    __attribute__((noinline)) static void name(size_t bytes) {            \
        next(bytes);                                                       \
        __asm__ volatile("" ::: "memory");                                 \
    }

__attribute__((noinline)) static void deep_level_12(size_t bytes) {
    void *block = 0;
    cudaMalloc(&block, bytes);
    __asm__ volatile("" ::: "memory");
}
LEVEL(deep_level_11, deep_level_12)
LEVEL(deep_level_10, deep_level_11)
LEVEL(deep_level_9, deep_level_10)
LEVEL(deep_level_8, deep_level_9)
LEVEL(deep_level_7, deep_level_8)
LEVEL(deep_level_6, deep_level_7)
LEVEL(deep_level_5, deep_level_6)
LEVEL(deep_level_4, deep_level_5)
LEVEL(deep_level_3, deep_level_4)
LEVEL(deep_level_2, deep_level_3)
LEVEL(deep_level_1, deep_level_2)

void deep_allocate(size_t bytes) {
    deep_level_1(bytes);
    __asm__ volatile("" ::: "memory");
}
