//! Writing a file beside its destination and renaming it into place once
//! complete: until then the destination is untouched, and a failure removes
//! only the new file. The one way both a collected trace and a command's
//! output (a page, a Perfetto file, a snapshot) are written.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
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

impl BesideFile {
    /// Creates the new file beside `target`: 0600 if `private`, else 0644.
    /// An error names `target` when it has no file name.
    pub fn create(target: &Path, private: bool) -> io::Result<(BesideFile, File)> {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let temporary = folder_of(target).join(format!(".{name}.cudatrace-{}.partial", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if private { 0o600 } else { 0o644 })
            .open(&temporary)?;
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
        let done = file.sync_all().and_then(|()| {
            drop(file);
            if replace {
                std::fs::rename(&self.temporary, &self.target)
            } else {
                rename_no_replace(&self.temporary, &self.target)
            }
        });
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
