//! Writing what `-o` names (an HTML page, a Perfetto file, a snapshot), so
//! that a failed write never destroys anything.
//!
//! A regular file, or a path where nothing is yet, is written to a new
//! file beside it and renamed into place once complete: until then the
//! destination is untouched, and a failure removes only that new file. A
//! symbolic link is followed, and what it points to is written the same
//! way, so the link stays a link. Anything else (`/dev/stdout`, a pipe, a
//! device) is written straight through and never removed.

use super::beside_file::BesideFile;
use super::write_failure::WriteFailure;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An output being written.
pub struct OutputFile {
    /// The path `-o` named (or the default), as the user wrote it.
    pub destination: PathBuf,
    file: File,
    /// The new file beside the destination's target (what a link points
    /// to), renamed onto it at the end; `None` when writing straight through.
    staged: Option<BesideFile>,
}

impl OutputFile {
    /// Opens `destination` for writing. `private` creates a new file 0600
    /// (its source trace was private: it holds argv and environment), else
    /// 0644; a file replaced keeps neither its mode nor its owner.
    /// A regular file there already is replaced only with `force`.
    pub fn create(destination: &Path, private: bool, force: bool) -> Result<OutputFile, WriteFailure> {
        if !force && std::fs::metadata(destination).is_ok_and(|meta| meta.is_file()) {
            return Err(WriteFailure::Exists(destination.to_owned()));
        }
        let cannot = |error: std::io::Error| WriteFailure::Io {
            path: destination.to_owned(),
            error,
        };
        let target = match std::fs::symlink_metadata(destination) {
            Ok(meta) if meta.file_type().is_symlink() => {
                std::fs::canonicalize(destination).unwrap_or_else(|_| destination.to_owned())
            }
            _ => destination.to_owned(),
        };
        match std::fs::metadata(&target) {
            Ok(meta) if meta.is_dir() => {
                return Err(WriteFailure::Folder(destination.to_owned()));
            }
            Ok(meta) if !meta.is_file() => {
                // A device, a pipe, a socket: written through, never removed.
                let file = std::fs::OpenOptions::new().write(true).open(&target).map_err(cannot)?;
                return Ok(OutputFile {
                    destination: destination.to_owned(),
                    file,
                    staged: None,
                });
            }
            _ => {}
        }
        if target.file_name().is_none() {
            return Err(WriteFailure::NotAFileName(destination.to_owned()));
        }
        let (staged, file) = BesideFile::create(&target, private).map_err(cannot)?;
        Ok(OutputFile {
            destination: destination.to_owned(),
            file,
            staged: Some(staged),
        })
    }

    /// The file to write into.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Puts the finished output into place.
    pub fn finish(mut self) -> Result<(), WriteFailure> {
        let destination = self.destination.clone();
        let cannot = |error: std::io::Error| WriteFailure::Io {
            path: destination,
            error,
        };
        if let Err(e) = self.file.flush() {
            self.abandon();
            return Err(cannot(e));
        }
        let Some(staged) = self.staged.take() else {
            return Ok(());
        };
        staged.commit(self.file, true).map_err(cannot)
    }

    /// Gives up: removes what this command created, nothing else.
    pub fn abandon(self) {
        if let Some(staged) = self.staged {
            staged.abandon();
        }
    }
}

/// Whether a trace is private (no one but its owner may read it): outputs
/// made from it are created private too.
pub fn is_private(trace: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(trace).is_ok_and(|meta| meta.permissions().mode() & 0o044 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wording::write_failure_text as words;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cudatrace-output-file-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_regular_file_is_replaced_only_when_the_new_one_is_complete() {
        let dir = scratch("regular");
        let path = dir.join("out.html");
        std::fs::write(&path, b"old").unwrap();
        let mut output = OutputFile::create(&path, true, true).unwrap();
        output.file().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        output.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // Abandoned: the old file stays, and nothing is left beside it.
        let mut output = OutputFile::create(&path, false, true).unwrap();
        output.file().write_all(b"half").unwrap();
        output.abandon();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_stays_a_link_and_a_device_is_written_through_and_never_removed() {
        let dir = scratch("link");
        let real = dir.join("real.json");
        let link = dir.join("link.json");
        std::fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut output = OutputFile::create(&link, false, true).unwrap();
        output.file().write_all(b"new").unwrap();
        output.finish().unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        let output = OutputFile::create(Path::new("/dev/null"), false, true).unwrap();
        output.abandon();
        assert!(Path::new("/dev/null").exists());
        assert_eq!(
            words(&OutputFile::create(&dir, false, true).err().unwrap()),
            format!("cannot write {}: it is a folder", dir.display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_file_is_replaced_only_with_force() {
        let dir = std::env::temp_dir().join(format!("cudatrace-refuse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.html");
        std::fs::write(&path, "the user's page").unwrap();
        assert_eq!(
            words(&OutputFile::create(&path, false, false).err().unwrap()),
            format!("{} exists; pass --force to replace it", path.display())
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "the user's page");
        let mut output = OutputFile::create(&path, false, true).unwrap();
        output.file().write_all(b"new").unwrap();
        output.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        // Not a regular file: written through, no refusal.
        assert!(OutputFile::create(Path::new("/dev/null"), false, false).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
