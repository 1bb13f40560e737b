/* execl, execlp and execle, which take variable arguments (stable Rust
 * cannot define such functions): their arguments are gathered into an
 * argv array, as the C library does, and passed to this library's execv,
 * execvp and execve (src/hooks/exec.rs), which mark the spool. */
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

/* How many arguments come before the terminating NULL, `arg` included. */
static size_t count_arguments(const char *arg, va_list args) {
    if (!arg) return 0;
    va_list counting;
    va_copy(counting, args);
    size_t count = 1;
    while (va_arg(counting, const char *)) count++;
    va_end(counting);
    return count;
}

/* Fills argv[0..count] from `arg` and the variable arguments, then NULL. */
#define GATHER(argv, count, arg, args)                                          \
    do {                                                                        \
        if (count) argv[0] = arg;                                               \
        for (size_t i = 1; i < count; i++) argv[i] = va_arg(args, const char *); \
        argv[count] = NULL;                                                     \
    } while (0)

/* execl and execlp: the arguments gathered, then execv or execvp. */
#define EXEC_WITH_LIST(name, with_vector)                        \
    int name(const char *file, const char *arg, ...) {          \
        va_list args;                                            \
        va_start(args, arg);                                     \
        size_t count = count_arguments(arg, args);               \
        const char *argv[count + 1];                             \
        GATHER(argv, count, arg, args);                          \
        va_end(args);                                            \
        return with_vector(file, (char *const *)argv);           \
    }

EXEC_WITH_LIST(execl, execv)
EXEC_WITH_LIST(execlp, execvp)

int execle(const char *path, const char *arg, ...) {
    va_list args;
    va_start(args, arg);
    size_t count = count_arguments(arg, args);
    const char *argv[count + 1];
    GATHER(argv, count, arg, args);
    /* The terminating NULL (when `arg` was not it), then the environment. */
    if (count) (void)va_arg(args, const char *);
    char *const *envp = va_arg(args, char *const *);
    va_end(args);
    return execve(path, (char *const *)argv, envp);
}
