//! The folder a run's spools go to: private to the user who runs cudatrace.

use crate::wording::not_private_text;
use crate::wording::{collect_lines, collector_lines};
use cudatrace_events::{naming, notices, recording_switch, settings};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

fn uid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

/// `$TMPDIR/cudatrace-<uid>` (default `/tmp`), created 0700 if missing, and
/// refused if it is a symlink, someone else's, or writable by others.
fn user_folder() -> Result<PathBuf, String> {
    let base = std::env::var_os(settings::TMPDIR.name)
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "/tmp".into());
    let folder = Path::new(&base).join(naming::user_folder_name(uid()));
    naming::ensure_private_folder(&folder, uid()).map_err(|fault| not_private_text(&folder, &fault))?;
    Ok(folder)
}

/// The spool folder the user chose: `$CUDATRACE_DIR`, unless a tracer set it
/// (`CUDATRACE_COLLECTOR` then says so: this cudatrace runs inside a traced
/// tree, and the folder belongs to that tree's collection, not to the user).
fn chosen_spool_folder() -> Option<std::ffi::OsString> {
    if settings::COLLECTOR.value_os().is_some() {
        return None;
    }
    settings::DIR.non_empty()
}

/// A new, empty run folder, mode 0700: inside `$CUDATRACE_DIR` if the user
/// set it, else inside `$TMPDIR/cudatrace-<uid>`.
pub fn create_run_dir() -> Result<PathBuf, String> {
    let folder = match chosen_spool_folder() {
        Some(chosen) => {
            // Absolute: the command may change its working directory before
            // it creates its spool, and so may its descendants.
            let chosen = std::path::absolute(PathBuf::from(&chosen))
                .map_err(|e| collector_lines::spool_dir_unusable(&PathBuf::from(&chosen), e))?;
            // A folder named but not there yet is made, private to the user,
            // as the library makes it for a program started by hand.
            if std::fs::symlink_metadata(&chosen).is_err() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&chosen)
                    .or_else(|e| if chosen.is_dir() { Ok(()) } else { Err(e) })
                    .map_err(|e| collector_lines::spool_dir_unusable(&chosen, e))?;
            }
            let meta = std::fs::metadata(&chosen).map_err(|e| collector_lines::spool_dir_unusable(&chosen, e))?;
            if !meta.is_dir() {
                return Err(collector_lines::spool_dir_unusable(
                    &chosen,
                    collector_lines::NOT_A_FOLDER,
                ));
            }
            chosen
        }
        None => user_folder()?,
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = folder.join(format!("run-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| collector_lines::cannot_create_spool_folder(&folder, e))?;
    Ok(dir)
}

/// Checks that `dir` is a folder owned by this user.
pub fn check_owned(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| collect_lines::cannot_read(dir, e))?;
    if !meta.is_dir() {
        return Err(collector_lines::not_a_folder(dir));
    }
    if meta.uid() != uid() {
        return Err(collector_lines::folder_of_another_user(dir, meta.uid(), uid()));
    }
    Ok(())
}

/// The file in a spool folder that holds the trace's size cap (bytes, or
/// `unlimited`), so that `collect` after a crash keeps the cap the run had.
pub const CAP_FILE: &str = "trace.max-size";

/// The files cudatrace keeps in a spool folder beside the spools.
pub const KEPT_BESIDE_SPOOLS: [&str; 6] = [
    naming::COLLECTOR_LOCK,
    naming::MEMORY_LIMIT_LEDGER,
    naming::TRACE_POINTER,
    CAP_FILE,
    notices::NOTICE_FILE,
    recording_switch::FILE_NAME,
];

/// Writes the trace's size cap (`None`: unlimited) into the spool folder.
pub fn write_cap(dir: &Path, cap: Option<u64>) -> Result<(), String> {
    let path = dir.join(CAP_FILE);
    let staging = dir.join(format!("{CAP_FILE}.new"));
    let text = cap.map_or_else(|| "unlimited".to_string(), |bytes| bytes.to_string());
    std::fs::write(&staging, text)
        .and_then(|()| std::fs::rename(&staging, &path))
        .map_err(|e| collector_lines::cannot_do(collector_lines::WRITE, &path, &e))
}

/// The size cap the folder's run had (`Ok(None)`: unlimited);
/// `Err(None)` when the folder does not say, `Err(Some(line))` when its
/// file says something that is not a cap of at least 64 KiB.
pub fn read_cap(dir: &Path) -> Result<Option<u64>, Option<String>> {
    let path = dir.join(CAP_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Err(None);
    };
    match text.trim() {
        "unlimited" => Ok(None),
        bytes => match bytes.parse::<u64>() {
            Ok(cap) if cap >= super::fold_schedule::SMALLEST_CAP => Ok(Some(cap)),
            _ => Err(Some(collect_lines::cap_file_ignored(&path))),
        },
    }
}

/// Deletes the `collected` spools, whose records are all in a finished
/// trace. Once no spool is left, also the files cudatrace keeps beside them
/// and, if cudatrace created the folder, the folder. A spool that appeared
/// meanwhile, or that was refused, damaged or still being written, stays,
/// and so does a folder of the user's.
pub fn remove_spools(dir: &Path, collected: &[PathBuf], cudatrace_made_it: bool) {
    for spool in collected {
        let _ = std::fs::remove_file(spool);
    }
    let left = naming::spool_files_in(dir).map_or(1, |spools| spools.len());
    if left > 0 {
        return;
    }
    for name in KEPT_BESIDE_SPOOLS {
        let _ = std::fs::remove_file(dir.join(name));
    }
    if cudatrace_made_it {
        let _ = std::fs::remove_dir(dir);
    }
}
