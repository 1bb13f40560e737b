/* Call stacks with names the tests look for.
 *
 *   stack_names direct       : main -> outer_frame -> inner_frame -> cudaMalloc
 *   stack_names plugin LIB   : dlopen(LIB) after start, then its plugin_allocate
 *                              calls cudaMalloc
 *   stack_names thread       : a thread of its own calls cudaMalloc
 *   stack_names fork         : 1 MiB from a call site, then a forked child
 *                              takes 4 MiB from the very same stack
 *
 * Each allocation stays live, so it shows in `live at exit`. Frames are
 * noinline so that every name survives optimisation; the file is built with
 * and without frame pointers. */
int cudaMalloc(void **block, unsigned long bytes); int atoi(const char *text); static void maze(int count); void trampoline_twice(void); void odd_name(unsigned long bytes) __asm__("odd_\xff\xfe_name");
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

NOINLINE void inner_frame(size_t bytes) {
    void *block = 0;
    if (cudaMalloc(&block, bytes) != 0) { /* line 25 */
        printf("cudaMalloc failed\n");
    }
    __asm__ volatile("" ::: "memory");
}

NOINLINE void outer_frame(size_t bytes) {
    inner_frame(bytes); /* line 32 */
    __asm__ volatile("" ::: "memory");
}

static void *thread_body(void *arg) {
    (void)arg;
    outer_frame(3 << 20);
    return 0;
}

/* Both allocations from one line: the child's stack is its parent's. */
NOINLINE void allocate_around_a_fork(void) {
    for (int i = 0; i < 2; i++) {
        if (i == 1) {
            pid_t child = fork();
            if (child != 0) {
                waitpid(child, 0, 0);
                return;
            }
        }
        outer_frame(i == 0 ? 1 << 20 : 4 << 20);
        __asm__ volatile("" ::: "memory"); /* no tail call: the frame stays */
    }
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "direct";
    if (strcmp(what, "direct") == 0) {
        outer_frame(1 << 20);
    } else if (strcmp(what, "plugin") == 0 && argc > 2) {
        void *plugin = dlopen(argv[2], RTLD_NOW);
        void (*allocate)(size_t) = plugin ? (void (*)(size_t))dlsym(plugin, "plugin_allocate") : 0;
        if (!allocate) {
            printf("cannot load %s\n", argv[2]);
            return 2;
        }
        allocate(2 << 20);
    } else if (strcmp(what, "fork") == 0) {
        allocate_around_a_fork();
    } else if (strcmp(what, "trampoline") == 0) {
        trampoline_twice();
    } else if (strcmp(what, "maze") == 0 && argc > 2) {
        maze(atoi(argv[2]));
    } else if (strcmp(what, "thread") == 0) {
        pthread_t thread;
        pthread_create(&thread, 0, thread_body, 0);
        pthread_join(thread, 0);
    } else if (strcmp(what, "odd") == 0) {
        odd_name(5 << 20);
    } else {
        return 2;
    }
    return 0;
}

/* stack_names maze N: N allocations, each down a pseudo-random path of
 * maze_a/maze_b/maze_c/maze_d calls; prints "maze BYTES PATH" (outermost
 * first).
 *
 * The maze: four functions calling each other down a path. maze_a and
 * maze_c have frames of one size, so that a path through either puts the
 * frames below at the very same stack addresses with the very same return
 * addresses: only the slot holding the caller's return address differs. */
static unsigned maze_seed = 12345;
static unsigned maze_next(void) {
    maze_seed = maze_seed * 1103515245u + 12345u;
    return (maze_seed >> 16) & 0x7fff;
}
NOINLINE void maze_step(const char *path, size_t bytes);
/* A maze function whose frame holds PAD bytes of its own; MARK keeps two
 * functions of one size from being folded into one by the compiler. */
#define MAZE_FUNCTION(name, PAD, MARK)                                           \
    NOINLINE void name(const char *path, size_t bytes) {                         \
        volatile char pad[PAD];                                                  \
        pad[0] = MARK;                                                           \
        (void)pad[0];                                                            \
        maze_step(path, bytes);                                                  \
        __asm__ volatile("" ::: "memory");                                       \
    }
MAZE_FUNCTION(maze_a, 32, 0)
MAZE_FUNCTION(maze_c, 32, 1)
MAZE_FUNCTION(maze_b, 96, 2)
NOINLINE void maze_d(const char *path, size_t bytes) {
    maze_step(path, bytes);
    __asm__ volatile("" ::: "memory");
}
NOINLINE void maze_step(const char *path, size_t bytes) {
    switch (*path) {
    case 'a': maze_a(path + 1, bytes); break;
    case 'b': maze_b(path + 1, bytes); break;
    case 'c': maze_c(path + 1, bytes); break;
    case 'd': maze_d(path + 1, bytes); break;
    default: {
        void *block = 0;
        if (cudaMalloc(&block, bytes) != 0) printf("cudaMalloc failed\n");
    }
    }
    __asm__ volatile("" ::: "memory");
}

static void maze(int count) {
    char path[16];
    for (int i = 0; i < count; i++) {
        int depth = 1 + maze_next() % 12;
        for (int k = 0; k < depth; k++) path[k] = "abcd"[maze_next() % 4];
        path[depth] = 0;
        size_t bytes = 4096 * (size_t)(i + 1);
        maze_step(path, bytes);
        printf("maze %zu %s\n", bytes, path);
    }
}

/* stack_names trampoline: 2 MiB, then 3 MiB, from one call site through a
 * frame-pointer frame whose frame pointer is data the first time. */
/* trampoline(frame_pointer, bytes): assembly without unwind information,
 * so it is walked by its frame pointer, which it sets to its first argument
 * before calling down. */
void trampoline(void *frame_pointer, size_t bytes);
__asm__(".text\n"
        ".globl trampoline\n"
        ".type trampoline,@function\n"
        "trampoline:\n"
        "  push %rbp\n"
        "  mov %rdi, %rbp\n"
        "  mov %rsi, %rdi\n"
        "  call inner_frame\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size trampoline, .-trampoline\n");

NOINLINE void through_trampoline(int usable, size_t bytes) {
    trampoline(usable ? __builtin_frame_address(0) : (void *)8, bytes);
    __asm__ volatile("" ::: "memory");
}

static void *learn_trampoline(void *arg) {
    (void)arg;
    through_trampoline(1, 1 << 20);
    return 0;
}

/* A thread first walks through the trampoline with a usable frame pointer
 * (its step is learnt as "follow the frame pointer"); then main, from one
 * call site and so one stack pointer, calls through it with a frame pointer
 * that leads nowhere (the walk ends there) and then with a usable one (the
 * walk goes on to main). */
void trampoline_twice(void) {
    pthread_t thread;
    pthread_create(&thread, 0, learn_trampoline, 0);
    pthread_join(thread, 0);
    for (int i = 0; i < 2; i++) {
        through_trampoline(i, (size_t)(2 + i) << 20);
        __asm__ volatile("" ::: "memory");
    }
}

/* stack_names odd: 5 MiB from a function whose symbol name is not UTF-8
 * (bytes 0xff 0xfe), in the symbol table and as DWARF's linkage name. */
NOINLINE void odd_name(unsigned long bytes) {
    void *block = 0;
    if (cudaMalloc(&block, bytes) != 0) printf("cudaMalloc failed\n");
    __asm__ volatile("" ::: "memory");
}
