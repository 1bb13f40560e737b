//! Reading the run folder's notice file: the processes that could not
//! record (see `cudatrace_events::notices`).

use crate::wording::spool_faults::notice_reason_text;
use cudatrace_events::notices::{Notice, MAX_NOTICE_LINE, NOTICE_FILE};
use cudatrace_trace::UnrecordedProcess;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Most bytes of notices read from one folder: thousands of processes.
const MAX_NOTICE_BYTES: u64 = 4 << 20;

/// Follows a notice file as lines are appended to it.
pub struct NoticeTail {
    path: PathBuf,
    /// Bytes read and taken, up to the end of the last whole line.
    offset: u64,
}

impl NoticeTail {
    /// The notice file of `dir` (it need not exist yet).
    pub fn new(dir: &Path) -> NoticeTail {
        NoticeTail {
            path: dir.join(NOTICE_FILE),
            offset: 0,
        }
    }

    /// The processes noticed since the last call. A line still being
    /// written waits for the next call; a file that is not this user's
    /// regular file is not read.
    pub fn read_new(&mut self) -> Vec<UnrecordedProcess> {
        if self.offset >= MAX_NOTICE_BYTES {
            return Vec::new();
        }
        let Some(mut file) = open_own_regular_file(&self.path) else {
            return Vec::new();
        };
        let mut bytes = Vec::new();
        let read = file
            .seek(SeekFrom::Start(self.offset))
            .and_then(|_| file.take(MAX_NOTICE_BYTES - self.offset).read_to_end(&mut bytes));
        if read.is_err() {
            return Vec::new();
        }
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |last| last + 1);
        self.offset += whole as u64;
        bytes[..whole]
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty() && line.len() < MAX_NOTICE_LINE)
            .filter_map(|line| Notice::parse(std::str::from_utf8(line).ok()?))
            .map(|notice| Notice {
                reason: notice_reason_text(&notice.reason),
                ..notice
            })
            .collect()
    }
}

/// Opens `path` only if it is, once opened, a regular file of this user's:
/// never through a link, and without blocking on a FIFO someone put there
/// (the check is made on what was opened, so it cannot be swapped after).
fn open_own_regular_file(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let metadata = file.metadata().ok()?;
    // SAFETY: no preconditions.
    let own = metadata.uid() == unsafe { libc::geteuid() };
    (metadata.file_type().is_file() && own).then_some(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn notice(pid: u32) -> Notice {
        Notice {
            pid,
            ppid: 1,
            uid: 0,
            time_ns: 5,
            errno: libc::EMFILE,
            name: "w".into(),
            reason: "cannot create its spool in /x".into(),
        }
    }

    #[test]
    fn whole_lines_are_read_once_and_a_half_written_one_waits() {
        let dir = std::env::temp_dir().join(format!("cudatrace-notices-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(NOTICE_FILE);
        let mut tail = NoticeTail::new(&dir);
        assert_eq!(tail.read_new(), vec![]);
        let mut file = std::fs::File::create(&path).unwrap();
        let second = notice(8).to_line();
        let (head, rest) = second.split_at(10);
        write!(file, "{}garbage line\n{head}", notice(7).to_line()).unwrap();
        assert_eq!(tail.read_new(), vec![notice(7)]);
        write!(file, "{rest}").unwrap();
        assert_eq!(tail.read_new(), vec![notice(8)]);
        assert_eq!(tail.read_new(), vec![]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_or_a_link_in_its_place_is_not_read_and_never_blocks() {
        let dir = std::env::temp_dir().join(format!("cudatrace-notices-odd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(NOTICE_FILE);
        let fifo = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(NoticeTail::new(&dir).read_new(), vec![]);
        std::fs::remove_file(&path).unwrap();
        let target = dir.join("elsewhere");
        std::fs::write(&target, notice(9).to_line()).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert_eq!(NoticeTail::new(&dir).read_new(), vec![]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
