//! Where a trace is written, and how two writers are kept apart.
//!
//! `run` (and the collector a plain `LD_PRELOAD` tree starts) writes its
//! trace in place, so that it can be read while it grows and found after a
//! crash; an exclusive `flock` on the file keeps a second cudatrace from
//! writing the same path at the same time. `collect` writes beside the
//! destination and renames the finished trace into place, so that the
//! destination is never a half-written file.

use super::write_failure::WriteFailure;
use cudatrace_analysis::{check_regular_file, NotRegular};
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use super::beside_file::{folder_of, remove_leftovers, BesideFile, Leftover};
use std::path::{Path, PathBuf};

/// A trace file claimed for writing in place.
pub struct InPlace {
    /// Its path.
    pub path: PathBuf,
    /// The open, locked, emptied file.
    pub file: File,
    created: bool,
    /// What writers killed mid-way had left beside it, removed when it
    /// was claimed: to be said.
    pub leftovers: Vec<Leftover>,
}

impl InPlace {
    /// Empties the file, to write the trace into it.
    pub fn start(&self) -> Result<(), WriteFailure> {
        self.file.set_len(0).map_err(|e| cannot_write(&self.path, e))
    }

    /// Removes the file again if this claim created it: nothing was written.
    pub fn abandon(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// "cannot write PATH: REASON", naming a missing folder rather than the file.
fn cannot_write(path: &Path, error: std::io::Error) -> WriteFailure {
    let parent = folder_of(path);
    match error.kind() {
        ErrorKind::NotFound if !parent.is_dir() => WriteFailure::NoFolder {
            path: path.to_owned(),
            folder: parent.to_owned(),
        },
        ErrorKind::IsADirectory => WriteFailure::Folder(path.to_owned()),
        _ => WriteFailure::Io {
            path: path.to_owned(),
            error,
        },
    }
}

/// Checks that a trace could be created in `folder`, before anything starts.
pub fn check_folder_writable(folder: &Path) -> Result<(), WriteFailure> {
    let c_path = std::ffi::CString::new(folder.as_os_str().as_encoded_bytes())
        .map_err(|_| WriteFailure::InvalidPath(folder.to_owned()))?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let error = std::io::Error::last_os_error();
        return Err(WriteFailure::FolderNotWritable {
            folder: folder.to_owned(),
            error,
        });
    }
    Ok(())
}

/// Refuses a destination that is there and is not a regular file: a folder,
/// or a pipe, a socket or a device, which a trace cannot be emptied, grown
/// and read back in (and which must never be replaced).
fn check_destination(path: &Path) -> Result<(), WriteFailure> {
    match check_regular_file(path) {
        Ok(()) => Ok(()),
        Err(NotRegular::Folder) => Err(WriteFailure::Folder(path.to_owned())),
        Err(what) => Err(WriteFailure::NotRegular {
            path: path.to_owned(),
            what,
        }),
    }
}

/// Claims `path` for writing in place. Refuses a folder, a pipe, a socket or
/// a device, a path in a missing or read-only folder, and a trace that
/// another cudatrace is writing now. A finished trace already there is
/// replaced once writing starts ([`InPlace::start`]); until then it is left
/// as it was.
pub fn claim_in_place(path: &Path) -> Result<InPlace, WriteFailure> {
    check_destination(path)?;
    let existed = path.exists();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        .map_err(|e| cannot_write(path, e))?;
    // What was opened, in case the path changed since it was checked.
    if !file.metadata().is_ok_and(|meta| meta.is_file()) {
        check_destination(path)?;
        return Err(cannot_write(path, std::io::Error::from(ErrorKind::InvalidInput)));
    }
    // SAFETY: locking our own descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(WriteFailure::BeingWritten(path.to_owned()));
    }
    Ok(InPlace {
        path: path.to_owned(),
        file,
        created: !existed,
        leftovers: leftovers_of(path),
    })
}

/// Removes what writers killed mid-way left beside the trace `path`: the
/// new files of `collect` beside it, and those of a fold, which writes
/// beside the file a link names.
fn leftovers_of(path: &Path) -> Vec<Leftover> {
    let mut removed = remove_leftovers(path);
    let named = std::fs::canonicalize(folder_of(path)).map(|folder| folder.join(path.file_name().unwrap_or_default()));
    if let (Ok(real), Ok(named)) = (std::fs::canonicalize(path), named) {
        if real != named {
            removed.extend(remove_leftovers(&real));
        }
    }
    removed
}

/// Like [`claim_in_place`], but when another cudatrace is writing `path`,
/// writes beside it (`NAME-2.trace`, `NAME-3.trace`, ...) instead; with
/// `keep_finished`, also when a file with something in it is there already
/// (a collector that a late process of a finished tree starts must never
/// truncate the tree's trace).
pub fn claim_in_place_or_beside(path: &Path, keep_finished: bool) -> Result<InPlace, WriteFailure> {
    let claim = |candidate: &Path| -> Result<InPlace, WriteFailure> {
        let claimed = claim_in_place(candidate)?;
        if keep_finished && claimed.file.metadata().is_ok_and(|m| m.len() > 0) {
            return Err(WriteFailure::HoldsTrace(candidate.to_owned()));
        }
        Ok(claimed)
    };
    let first = match claim(path) {
        Ok(claimed) => return Ok(claimed),
        Err(error) => error,
    };
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let extension = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    for n in 2..100 {
        let beside = path.with_file_name(format!("{stem}-{n}{extension}"));
        if let Ok(claimed) = claim(&beside) {
            return Ok(claimed);
        }
    }
    Err(first)
}

/// Opens `path` with a shared lock, which a cudatrace writing it in place
/// holds exclusively; `Err` while one does.
pub fn lock_shared(path: &Path) -> Result<Option<File>, ()> {
    let Ok(file) = File::open(path) else {
        return Ok(None);
    };
    // SAFETY: locking our own descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
        return Err(());
    }
    Ok(Some(file))
}

/// A trace written to a temporary file beside its destination.
pub struct Staged {
    /// Where the trace goes once finished.
    pub destination: PathBuf,
    beside: BesideFile,
    replace: bool,
    /// What writers killed mid-way had left beside the destination,
    /// removed before the new file was made: to be said.
    pub leftovers: Vec<Leftover>,
}

/// Prepares to write a trace to `destination`, returning the temporary file
/// to write (0600 if `private`, else 0644). Refuses an existing file unless
/// `replace`, a folder, a pipe, a socket or a device, and a missing or
/// read-only folder.
pub fn stage(destination: &Path, replace: bool, private: bool) -> Result<(Staged, File), WriteFailure> {
    check_destination(destination)?;
    if destination.exists() && !replace {
        return Err(WriteFailure::MayBeOnlyCopy(destination.to_owned()));
    }
    if destination.file_name().is_none() {
        return Err(WriteFailure::TraceNotAFileName(destination.to_owned()));
    }
    let leftovers = leftovers_of(destination);
    let (beside, file) = BesideFile::create(destination, private).map_err(|e| cannot_write(destination, e))?;
    let staged = Staged {
        destination: destination.to_owned(),
        beside,
        replace,
        leftovers,
    };
    Ok((staged, file))
}

impl Staged {
    /// Moves the finished, synced trace into place.
    pub fn commit(self, file: File) -> Result<(), WriteFailure> {
        let destination = self.destination;
        self.beside
            .commit(file, self.replace)
            .map_err(|error| match error.kind() {
                ErrorKind::AlreadyExists => WriteFailure::AppearedMeanwhile(destination),
                _ => WriteFailure::Io {
                    path: destination,
                    error,
                },
            })
    }

    /// The temporary file being written, until it is committed.
    pub fn writing(&self) -> &Path {
        self.beside.temporary()
    }

    /// Gives up: removes the temporary file.
    pub fn abandon(self) {
        self.beside.abandon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wording::write_failure_text as words;

    fn scratch(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cudatrace-output-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_trace_being_written_is_not_claimed_twice_and_the_second_writes_beside_it() {
        let dir = scratch("claim");
        let path = dir.join("run.trace");
        std::fs::write(&path, b"finished trace").unwrap();
        let first = claim_in_place(&path).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"finished trace",
            "untouched until writing starts"
        );
        first.start().unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "a finished trace is replaced"
        );
        let refused = claim_in_place(&path).err().unwrap();
        assert_eq!(
            words(&refused),
            format!(
                "{} is being written by another cudatrace right now; choose another -o",
                path.display()
            )
        );
        let beside = claim_in_place_or_beside(&path, false).unwrap();
        assert_eq!(beside.path, dir.join("run-2.trace"));
        drop(first);
        std::fs::write(&path, b"another finished trace").unwrap();
        let again = claim_in_place(&path).unwrap();
        again.abandon();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"another finished trace",
            "abandoning a claim leaves a file it did not create as it was"
        );
        beside.abandon();
        assert!(!dir.join("run-2.trace").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_claim_removes_what_killed_writers_left_beside_the_trace_and_the_file_a_link_names() {
        let dir = scratch("leftovers");
        let (real, link) = (dir.join("real.trace"), dir.join("link.trace"));
        std::fs::write(&real, b"").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        // A killed `collect` of the link, and a fold, which writes beside
        // the file the link names.
        let partial = dir.join(".link.trace.cudatrace-7.partial");
        let folding = dir.join(".real.trace.cudatrace-8.folding");
        std::fs::write(&partial, b"12").unwrap();
        std::fs::write(&folding, b"123").unwrap();
        let claimed = claim_in_place(&link).unwrap();
        let mut removed: Vec<(PathBuf, u64)> = claimed.leftovers.iter().map(|l| (l.path.clone(), l.bytes)).collect();
        removed.sort();
        let real_folder = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(
            removed,
            [
                (partial.clone(), 2),
                (real_folder.join(".real.trace.cudatrace-8.folding"), 3)
            ]
        );
        assert!(!partial.exists() && !folding.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_destinations_are_refused_with_the_reason() {
        let dir = scratch("refuse");
        let missing = dir.join("no-such-folder").join("x.trace");
        assert_eq!(
            words(&claim_in_place(&missing).err().unwrap()),
            format!(
                "cannot write {}: folder {} does not exist",
                missing.display(),
                dir.join("no-such-folder").display()
            )
        );
        assert_eq!(
            words(&claim_in_place(&dir).err().unwrap()),
            format!("cannot write {}: it is a folder", dir.display())
        );
        assert_eq!(
            words(&stage(&dir, true, false).err().unwrap()),
            format!("cannot write {}: it is a folder", dir.display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_staged_trace_replaces_an_existing_file_only_when_asked() {
        let dir = scratch("stage");
        let path = dir.join("out.trace");
        std::fs::write(&path, b"old").unwrap();
        assert_eq!(
            words(&stage(&path, false, false).err().unwrap()),
            format!(
                "{} exists and may be the only copy of a trace; pass --force to replace it",
                path.display()
            )
        );
        let (staged, mut file) = stage(&path, true, false).unwrap();
        std::io::Write::write_all(&mut file, b"new").unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"old",
            "the destination is untouched until commit"
        );
        let temporary = staged.beside.temporary().to_owned();
        staged.commit(file).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert!(!temporary.exists());
        // Something appearing at the destination meanwhile is not replaced.
        let fresh = dir.join("fresh.trace");
        let (staged, file) = stage(&fresh, false, false).unwrap();
        std::fs::write(&fresh, b"someone else's").unwrap();
        assert!(words(&staged.commit(file).err().unwrap()).contains("appeared while the trace was written"));
        assert_eq!(std::fs::read(&fresh).unwrap(), b"someone else's");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
