/* A library loaded with dlopen after the program started; its frames must
 * be symbolized too. */
int cudaMalloc(void **block, unsigned long bytes);
#include <stddef.h>

__attribute__((noinline)) static void plugin_inner(size_t bytes) {
    void *block = 0;
    cudaMalloc(&block, bytes); /* line 8 */
    __asm__ volatile("" ::: "memory");
}

void plugin_allocate(size_t bytes) {
    plugin_inner(bytes); /* line 13 */
    __asm__ volatile("" ::: "memory");
}

#include <pthread.h>

static void *thread_body(void *arg) {
    (void)arg;
    plugin_allocate(4 << 20);
    return 0;
}

/* Allocates from a thread of its own, which has no Python thread state. */
void run_thread_allocation(void) {
    pthread_t thread;
    pthread_create(&thread, 0, thread_body, 0);
    pthread_join(thread, 0);
}
