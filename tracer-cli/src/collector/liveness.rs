//! Whether a traced process is still alive, without races on pid reuse once
//! the process has been seen: a pidfd keeps referring to the process it was
//! opened for.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Watches one process.
pub struct Liveness {
    pidfd: Option<OwnedFd>,
    dead: bool,
}

impl Liveness {
    /// Starts watching `pid`; a process that is already gone is dead.
    pub fn watch(pid: u32) -> Liveness {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Liveness {
                pidfd: None,
                dead: true,
            };
        }
        Liveness {
            // SAFETY: a descriptor we own from here on.
            pidfd: Some(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
            dead: false,
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
}
