//! The recording switch of a traced job, as `cudatrace pause`, `resume`
//! and `run --start-paused` write it: the page every traced process maps,
//! and the log the collector puts into the trace
//! (`cudatrace_events::recording_switch` has the layout).

use cudatrace_events::recording_switch::{self as layout, Switch, SwitchState};
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// One job's switch file, open for writing.
pub struct SwitchFile {
    file: File,
}

impl SwitchFile {
    /// Opens the switch of spool folder `dir`, making it (in state
    /// `initial`, logged at `time_ns` when not plain recording) when no
    /// process of the job has yet.
    pub fn open_or_make(dir: &Path, initial: SwitchState, time_ns: u64) -> std::io::Result<SwitchFile> {
        let path = dir.join(layout::FILE_NAME);
        match open(&path) {
            Ok(file) => return checked(file),
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
            Err(_) => {}
        }
        layout::make(dir, initial, time_ns)?;
        checked(open(&path)?)
    }

    /// What the switch says now.
    #[cfg(test)]
    pub fn state(&self) -> std::io::Result<SwitchState> {
        self.with_page(|word| SwitchState::from_word(word.load(Ordering::Acquire)))
    }

    /// Switches to `next(state before)`, at the time `now()` gives
    /// (`CLOCK_MONOTONIC`), both taken under a lock, so that two commands at
    /// once neither undo each other's choice nor log out of time order: the
    /// log entry first, then the word the processes read. Returns the
    /// states before and after; nothing is logged when they are the same.
    pub fn set(
        &self,
        next: impl FnOnce(SwitchState) -> SwitchState,
        now: impl FnOnce() -> u64,
    ) -> std::io::Result<(SwitchState, SwitchState)> {
        // SAFETY: flock on our own descriptor.
        if unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let result = self.with_page(|word| {
            let before = SwitchState::from_word(word.load(Ordering::Acquire));
            let state = next(before);
            if before != state {
                // Through the descriptor that holds the lock (never a file
                // put in its place since), at the end of the whole entries:
                // a torn one a full disk left is written over, not followed.
                let logged = self.file.metadata()?.len().saturating_sub(layout::PAGE_SIZE as u64);
                let at =
                    layout::PAGE_SIZE as u64 + logged / layout::LOG_ENTRY_SIZE as u64 * layout::LOG_ENTRY_SIZE as u64;
                let entry = layout::log_entry(Switch { time_ns: now(), state });
                std::os::unix::fs::FileExt::write_all_at(&self.file, &entry, at)?;
                word.store(state.to_word(), Ordering::Release);
            }
            Ok((before, state))
        });
        // SAFETY: unlocking our own descriptor.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
        result?
    }

    /// Runs `work` on the state word of the file's page, mapped shared.
    fn with_page<T>(&self, work: impl FnOnce(&AtomicU64) -> T) -> std::io::Result<T> {
        // SAFETY: a shared mapping of the file's first page, which exists
        // (checked when opened), unmapped below.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout::PAGE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the state word lies inside the page and is 8-byte aligned.
        let word = unsafe { &*page.cast::<u8>().add(layout::STATE_OFFSET).cast::<AtomicU64>() };
        let result = work(word);
        // SAFETY: unmapping the page mapped above.
        unsafe { libc::munmap(page, layout::PAGE_SIZE) };
        Ok(result)
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    // Neither a link nor a FIFO (whose open could wait) is followed.
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// Refuses a file that is not a switch file.
fn checked(file: File) -> std::io::Result<SwitchFile> {
    let mut magic = [0u8; 8];
    let meta = file.metadata()?;
    let whole = meta.is_file()
        && meta.len() >= layout::PAGE_SIZE as u64
        && std::os::unix::fs::FileExt::read_exact_at(&file, &mut magic, 0).is_ok()
        && magic == layout::MAGIC;
    if !whole {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a cudatrace recording switch",
        ));
    }
    Ok(SwitchFile { file })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudatrace_events::recording_switch::StackSetting;
    use std::io::Write;

    #[test]
    fn switching_logs_each_change_once_and_the_page_follows() {
        let dir = std::env::temp_dir().join(format!("cudatrace-switch-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let paused = SwitchState {
            paused: true,
            stacks: None,
        };
        let file = SwitchFile::open_or_make(&dir, paused, 1_000).unwrap();
        assert_eq!(file.state().unwrap(), paused);
        let python = SwitchState {
            paused: false,
            stacks: Some(StackSetting::Python),
        };
        assert_eq!(file.set(|_| python, || 5_000).unwrap(), (paused, python));
        assert_eq!(
            file.set(|_| python, || 6_000).unwrap(),
            (python, python),
            "no change, no entry"
        );
        let again = SwitchFile::open_or_make(&dir, SwitchState::RECORDING, 7_000).unwrap();
        assert_eq!(again.state().unwrap(), python, "an existing switch is kept");
        let log = layout::read_log(&std::fs::read(dir.join(layout::FILE_NAME)).unwrap()).unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(
            log[0],
            Switch {
                time_ns: 1_000,
                state: paused
            }
        );
        assert_eq!(
            log[1],
            Switch {
                time_ns: 5_000,
                state: python
            }
        );
        // A torn entry (a disk that filled mid-write) is written over by the
        // next switch, so the entries after it stay in line.
        let path = dir.join(layout::FILE_NAME);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&[9; 5])
            .unwrap();
        let third = SwitchState {
            paused: true,
            stacks: Some(StackSetting::Python),
        };
        assert_eq!(file.set(|_| third, || 7_500).unwrap(), (python, third));
        let log = layout::read_log(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(log.len(), 3);
        assert_eq!(
            log[2],
            Switch {
                time_ns: 7_500,
                state: third
            }
        );
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from(layout::FILE_NAME)],
            "no private copy left"
        );
        std::fs::write(dir.join(layout::FILE_NAME), b"short").unwrap();
        assert_eq!(
            SwitchFile::open_or_make(&dir, paused, 8_000).err().map(|e| e.kind()),
            Some(std::io::ErrorKind::InvalidData)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
