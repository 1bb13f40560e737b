//! Whether a traced process is still alive, without races on pid reuse once
//! the process has been seen: a pidfd keeps referring to the process it was
//! opened for.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Watches one process.
pub struct Liveness {
    pidfd: Option<OwnedFd>,
    dead: bool,
    /// Asked by pid when no pidfd could be had.
    pid: u32,
}

/// Whether `pid` names no running process: none at all, or a zombie (which
/// will write nothing more). Racy on pid reuse, so only the fallback where
/// no pidfd can be had.
fn gone_by_pid(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}

impl Liveness {
    /// Starts watching `pid`; a process that is already gone is dead.
    pub fn watch(pid: u32) -> Liveness {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            // Only "no such process" says it is gone. Out of descriptors (a
            // collector following a thousand short-lived processes) or no
            // pidfd in this kernel says nothing: it is asked by pid then.
            let gone = std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            return Liveness {
                pidfd: None,
                dead: gone || gone_by_pid(pid),
                pid,
            };
        }
        Liveness {
            // SAFETY: a descriptor we own from here on.
            pidfd: Some(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
            dead: false,
            pid,
        }
    }

    /// True once the process has exited (or was already gone when watched).
    pub fn is_dead(&mut self) -> bool {
        if self.dead {
            return true;
        }
        if let Some(fd) = &self.pidfd {
            let mut poll = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no waiting.
            let ready = unsafe { libc::poll(&mut poll, 1, 0) };
            if ready > 0 {
                self.dead = true;
                self.pidfd = None;
            }
        } else {
            self.dead = gone_by_pid(self.pid);
        }
        self.dead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_alive_until_it_exits() {
        let mut child = std::process::Command::new("sleep").arg("0.2").spawn().unwrap();
        let mut liveness = Liveness::watch(child.id());
        assert!(!liveness.is_dead());
        child.wait().unwrap();
        assert!(liveness.is_dead());
        assert!(Liveness::watch(child.id()).is_dead());
    }

    #[test]
    fn without_a_pidfd_a_process_is_asked_by_pid_and_a_zombie_is_gone() {
        // What `watch` falls back to when pidfd_open fails for want of a
        // descriptor (a collector following a thousand short-lived
        // processes): the process is asked by pid.
        let mut child = std::process::Command::new("sleep").arg("0.3").spawn().unwrap();
        let mut liveness = Liveness {
            pidfd: None,
            dead: false,
            pid: child.id(),
        };
        assert!(!liveness.is_dead());
        // Exited but not reaped yet: a zombie writes nothing more.
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert!(gone_by_pid(child.id()));
        assert!(liveness.is_dead());
        child.wait().unwrap();
        assert!(gone_by_pid(child.id()));
    }
}
