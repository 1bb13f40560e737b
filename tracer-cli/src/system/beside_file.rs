//! Writing a file beside its destination and renaming it into place once
//! complete: until then the destination is untouched, and a failure removes
//! only the new file. The one way both a collected trace and a command's
//! output (a page, a Perfetto file, a snapshot) are written.
//!
//! Each new file is locked (`flock`) by its writer for as long as it is
//! written, so that a file of this kind left by a writer that was killed
//! (a `.partial` file, or a fold's `.folding` one) can be told from one
//! being written: nobody holds its lock. [`remove_leftovers`] removes
//! those of a destination, whatever pid their name holds.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A new file being written beside the file it will replace.
pub struct BesideFile {
    /// The new file, hidden beside the target until it is complete.
    temporary: PathBuf,
    /// What it becomes: a regular file it replaces, or a free name.
    target: PathBuf,
}

/// The folder a path is in (`.` for a bare name).
pub fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// The hidden name of a new file of `pid`'s beside `target`, ending in
/// `kind` (`partial`, or `folding` for a fold's rewrite).
pub fn hidden_name(target: &Path, pid: u32, kind: &str) -> Option<PathBuf> {
    let name = target.file_name()?.to_string_lossy().into_owned();
    Some(folder_of(target).join(format!(".{name}.cudatrace-{pid}.{kind}")))
}

/// Creates the new file `path` (which must not exist), readable and
/// writable, with `mode`, and locks it. A new file removed before its lock
/// was taken (by [`remove_leftovers`] of another cudatrace, which saw it
/// unlocked) is made again.
pub fn create_locked(path: &Path, mode: u32) -> io::Result<File> {
    loop {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)?;
        // Blocking: only a remover can hold it, and for a moment.
        // SAFETY: locking our own descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if file.metadata()?.nlink() > 0 {
            return Ok(file);
        }
    }
}

/// A file a killed writer left beside a destination, now removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Where it was.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
}

/// Whether the file name `file` is a new file's beside the file named
/// `target`: `.TARGET.cudatrace-PID.partial` or `.TARGET.cudatrace-PID.folding`,
/// or a fold's `.folding` file beside one of these (a fold of a trace that
/// `collect` was writing).
fn is_new_file_of(file: &str, target: &str) -> bool {
    let Some((body, folding)) = file
        .strip_suffix(".partial")
        .map(|body| (body, false))
        .or_else(|| file.strip_suffix(".folding").map(|body| (body, true)))
    else {
        return false;
    };
    let Some((inner, pid)) = body.strip_prefix('.').and_then(|body| body.rsplit_once(".cudatrace-")) else {
        return false;
    };
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    inner == target || (folding && is_new_file_of(inner, target))
}

/// Removes the new files that writers killed mid-way left beside `target`
/// (see [`is_new_file_of`]): those of this user that nobody holds locked.
/// A file being written is locked by its writer and stays, as does
/// anything that is not a regular file. Returns what was removed.
pub fn remove_leftovers(target: &Path) -> Vec<Leftover> {
    let Some(name) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Vec::new();
    };
    let folder = folder_of(target);
    let Ok(entries) = std::fs::read_dir(&folder) else {
        return Vec::new();
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut removed = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        if !is_new_file_of(&entry.file_name().to_string_lossy(), &name) {
            continue;
        }
        let path = entry.path();
        let Ok(seen) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !seen.is_file() || seen.uid() != me {
            continue;
        }
        // Not following a link, nor waiting on a FIFO put there meanwhile.
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        else {
            continue;
        };
        // SAFETY: locking our own descriptor; held until `file` is closed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue;
        }
        // Removed only if the name still holds the file locked.
        let same = |m: &std::fs::Metadata| (m.dev(), m.ino());
        let (Ok(locked), Ok(there)) = (file.metadata(), std::fs::symlink_metadata(&path)) else {
            continue;
        };
        if same(&locked) == same(&there) && std::fs::remove_file(&path).is_ok() {
            removed.push(Leftover {
                path,
                bytes: locked.len(),
            });
        }
    }
    removed.sort_by(|a, b| a.path.cmp(&b.path));
    removed
}

impl BesideFile {
    /// Creates the new file beside `target`, locked for as long as it is
    /// written: 0600 if `private`, else 0644. An error names `target` when
    /// it has no file name.
    pub fn create(target: &Path, private: bool) -> io::Result<(BesideFile, File)> {
        let temporary = hidden_name(target, std::process::id(), "partial")
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let file = create_locked(&temporary, if private { 0o600 } else { 0o644 })?;
        let beside = BesideFile {
            temporary,
            target: target.to_owned(),
        };
        Ok((beside, file))
    }

    /// Syncs `file` (the new file) and renames it onto the target: over a
    /// file there only if `replace`, else failing with `AlreadyExists`.
    /// Whatever fails, the new file is removed.
    pub fn commit(self, file: File, replace: bool) -> io::Result<()> {
        // Renamed while still open, so locked: a new file that nobody
        // holds is a leftover to remove.
        let done = file.sync_all().and_then(|()| {
            if replace {
                std::fs::rename(&self.temporary, &self.target)
            } else {
                rename_no_replace(&self.temporary, &self.target)
            }
        });
        drop(file);
        if let Err(error) = done {
            let _ = std::fs::remove_file(&self.temporary);
            return Err(error);
        }
        // The rename itself reaches the disk with its folder.
        if let Ok(folder) = File::open(folder_of(&self.target)) {
            let _ = folder.sync_all();
        }
        Ok(())
    }

    /// Where the new file is until it is renamed into place (a fold
    /// rewrites it there; the tests check that it is gone after a commit).
    pub fn temporary(&self) -> &Path {
        &self.temporary
    }

    /// Gives up: removes the new file.
    pub fn abandon(self) {
        let _ = std::fs::remove_file(&self.temporary);
    }
}

fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    let from = std::ffi::CString::new(from.as_os_str().as_encoded_bytes())?;
    let to = std::ffi::CString::new(to.as_os_str().as_encoded_bytes())?;
    // SAFETY: NUL-terminated paths relative to the working directory.
    let done = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_of_a_target_is_told_by_its_name_alone() {
        for name in [
            ".t.trace.cudatrace-12.partial",
            ".t.trace.cudatrace-12.folding",
            "..t.trace.cudatrace-12.partial.cudatrace-12.folding",
        ] {
            assert!(is_new_file_of(name, "t.trace"), "{name}");
        }
        for name in [
            "t.trace",
            ".t.trace.cudatrace-.partial",
            ".t.trace.cudatrace-1x.partial",
            ".t.trace.cudatrace-12.partial.new",
            ".u.trace.cudatrace-12.partial",
            ".t.trace.cudatrace-12.folding.cudatrace-12.partial",
            "..t.trace.cudatrace-12.folding.cudatrace-12.folding.x",
        ] {
            assert!(!is_new_file_of(name, "t.trace"), "{name}");
        }
    }

    #[test]
    fn a_new_file_is_locked_until_its_rename_and_only_unlocked_ones_are_removed() {
        let dir = std::env::temp_dir().join(format!("cudatrace-beside-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.trace");
        let (beside, mut file) = BesideFile::create(&target, false).unwrap();
        io::Write::write_all(&mut file, b"half").unwrap();
        let left = hidden_name(&target, 1, "partial").unwrap();
        std::fs::write(&left, b"killed").unwrap();
        // Another cudatrace (here another descriptor) sees only the
        // unlocked one as left.
        let removed = remove_leftovers(&target);
        assert_eq!(removed, [Leftover { path: left, bytes: 6 }]);
        assert!(beside.temporary().exists());
        beside.commit(file, false).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"half");
        assert_eq!(remove_leftovers(&target), []);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
