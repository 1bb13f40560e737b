//! Running a program that the traced program cannot see as its child.
//!
//! A child made the usual way (`fork`, `posix_spawn`) raises SIGCHLD in its
//! parent when it exits, and any `wait(-1)` of the parent may reap it: a
//! program that never forks would get a signal it never expected, and a
//! supervisor thread waiting for its own workers could reap ours instead
//! and take it for one of them.
//!
//! So the library's child is made with `clone` and no exit signal: the
//! kernel raises nothing when it exits, and only a wait that asks for such
//! children (`__WCLONE` or `__WALL`) sees it. An `exec` would make its exit
//! signal SIGCHLD again, so that child never execs: it starts the program
//! as a child of its own and exits at once, and the library reaps it. The
//! program's process, orphaned, goes to `init` (or to the nearest
//! subreaper: a traced program that made itself one, with
//! `PR_SET_CHILD_SUBREAPER`, does see it).
//!
//! Both children share the parent's memory until the program is exec'd (as
//! `vfork` and `posix_spawn` do: nothing is copied, whatever the process's
//! size), run on stacks of their own, with every signal blocked until the
//! traced program's handlers are set back to their defaults, and make
//! nothing but system calls.

use std::ffi::{c_char, c_int, c_void};

/// What the child needs, on the parent's stack (the child shares it).
struct ChildArgs {
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    /// The parent's signal mask, which the program it runs inherits.
    mask: libc::sigset_t,
    /// The top of the stack the program's process starts on.
    program_stack: *mut c_void,
    /// 1 once the program's process was made.
    started: c_int,
}

/// Each child's stack: they only set signals, clone and call `execve`.
const CHILD_STACK_BYTES: usize = 64 << 10;

/// Starts `program` with `argv` and `envp` (NULL-terminated arrays of
/// NUL-terminated strings) through an unseen child, and reaps that child
/// once the program is exec'd. `None` when it could not be started; else
/// the unseen child's wait status (0 when the program was started).
///
/// # Safety
/// `program`, `argv` and `envp` must be valid as `execve`'s arguments.
pub(crate) unsafe fn start(
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> Option<c_int> {
    // SAFETY: a fresh private anonymous mapping for the children's stacks.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * CHILD_STACK_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return None;
    }
    let mut args = ChildArgs {
        program,
        argv,
        envp,
        // SAFETY: a zeroed sigset_t is valid; filled below.
        mask: unsafe { std::mem::zeroed() },
        // SAFETY: the top of the mapping: the second half is the program's
        // process's stack, the first the unseen child's.
        program_stack: unsafe { stack.cast::<u8>().add(2 * CHILD_STACK_BYTES) }.cast(),
        started: 0,
    };
    // SAFETY: sigset_t values owned here; no handler runs in this thread
    // between blocking and unblocking, so none can see the child's memory
    // half set up.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut args.mask);
    }
    // No exit signal in the flags' low byte: the child's end raises nothing.
    // CLONE_VFORK: this thread waits until the child has exited (after the
    // program was exec'd), so the stacks and `args` outlive their use.
    // SAFETY: the child runs `unseen_main` on its own stack and touches
    // only `args` and the stacks.
    let pid = unsafe {
        libc::clone(
            unseen_main,
            stack.cast::<u8>().add(CHILD_STACK_BYTES).cast(),
            libc::CLONE_VM | libc::CLONE_VFORK,
            (&raw mut args).cast(),
        )
    };
    // SAFETY: restores this thread's mask; unmaps the stack the child no
    // longer uses (it exec'd or exited: CLONE_VFORK waited for that).
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &args.mask, std::ptr::null_mut());
        libc::munmap(stack, 2 * CHILD_STACK_BYTES);
    }
    if pid <= 0 {
        return None;
    }
    let started = args.started == 1;
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child, which only __WCLONE finds.
        let waited = unsafe { libc::waitpid(pid, &mut status, libc::__WCLONE) };
        if waited == pid {
            return started.then_some(status);
        }
        // SAFETY: reads this thread's errno.
        if waited < 0 && unsafe { *libc::__errno_location() } != libc::EINTR {
            return None;
        }
    }
}

/// The kernel's `struct sigaction` for `rt_sigaction` on x86-64 (the C
/// library's has another layout).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// The unseen child: the traced program's signal handlers back to their
/// defaults (a signal before the `exec` must not run them in memory shared
/// with the parent) and the parent's signal mask, then the program's
/// process, made as a `vfork` of this one; then it exits, never exec'ing.
/// Only raw system calls: it shares the parent's memory, locks included.
extern "C" fn unseen_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's ChildArgs, alive until this child exits.
    let args = unsafe { &mut *arg.cast::<ChildArgs>() };
    for signal in 1..=64 {
        let mut old = KernelSigaction {
            handler: 0,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        // SAFETY: the kernel's own layout, 8-byte signal sets.
        let read = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                std::ptr::null::<KernelSigaction>(),
                &mut old,
                8,
            )
        };
        if read == 0 && old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN {
            let default = KernelSigaction {
                handler: libc::SIG_DFL,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            // SAFETY: as above.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal,
                    &default,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8,
                )
            };
        }
    }
    // SAFETY: the parent's mask, 8 bytes of it as the kernel reads.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &args.mask,
            std::ptr::null_mut::<libc::sigset_t>(),
            8,
        )
    };
    // The program's process: a child of this one (its SIGCHLD comes here),
    // orphaned when this one exits right after.
    // SAFETY: runs `program_main` on the second stack; CLONE_VFORK waits
    // until it has exec'd or exited.
    let pid = unsafe {
        libc::clone(
            program_main,
            args.program_stack,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg,
        )
    };
    if pid > 0 {
        args.started = 1;
    }
    0
}

/// The program's process: `execve`, through the raw system call. The C
/// library's `execve` is not called: this library exports one, and its
/// bookkeeping must not run here.
extern "C" fn program_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's ChildArgs, alive until the exec.
    let args = unsafe { &*arg.cast::<ChildArgs>() };
    // SAFETY: the parent's valid arguments.
    unsafe { libc::syscall(libc::SYS_execve, args.program, args.argv, args.envp) };
    127
}
