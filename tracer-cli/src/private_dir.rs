//! The folder a run's spools go to: private to the user who runs cudatrace.

use cudatrace_events::naming;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

fn uid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

/// `$TMPDIR/cudatrace-<uid>` (default `/tmp`), created 0700 if missing, and
/// refused if it is a symlink, someone else's, or writable by others.
fn user_folder() -> Result<PathBuf, String> {
    let base = std::env::var_os("TMPDIR")
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "/tmp".into());
    let folder = Path::new(&base).join(naming::user_folder_name(uid()));
    naming::ensure_private_folder(&folder, uid())?;
    Ok(folder)
}

/// A new, empty run folder, mode 0700.
pub fn create_run_dir() -> Result<PathBuf, String> {
    let folder = user_folder()?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = folder.join(format!("run-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Checks that `dir` is a folder owned by this user.
pub fn check_owned(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a folder", dir.display()));
    }
    if meta.uid() != uid() {
        return Err(format!(
            "refusing {}: owned by uid {}, not {}",
            dir.display(),
            meta.uid(),
            uid()
        ));
    }
    Ok(())
}

/// Deletes the spools (and the collector lock) of a finished run, then the
/// folder if that left it empty.
pub fn remove_spools(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            let is_lock = path.file_name().is_some_and(|n| n == naming::COLLECTOR_LOCK);
            if is_lock || naming::parse_spool_file_name(&path).is_some() {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}
