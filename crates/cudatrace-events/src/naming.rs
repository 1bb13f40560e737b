//! The names both sides agree on: where the library writes and where the
//! collector looks.

use std::path::{Path, PathBuf};

/// Created by whichever process of a plain-`LD_PRELOAD` tree starts its collector.
pub const COLLECTOR_LOCK: &str = "collector.lock";

/// Written by a collector into the spool folder: the path of the trace it
/// writes. Spool space is given back only for events durably in that trace,
/// so recovery reads it back from there.
pub const TRACE_POINTER: &str = "trace.path";

/// The memory limit's ledger (`cudatrace run --limit`): a file every
/// process of the tree maps, with the bytes each device holds for it.
pub const MEMORY_LIMIT_LEDGER: &str = "memory-limit.ledger";

/// `cudatrace-<pid>-<image>.spool`: `image` counts the `exec`s of one pid.
pub fn spool_file_name(pid: u32, image: u32) -> String {
    format!("cudatrace-{pid}-{image}.spool")
}

/// `(pid, image)` of a spool file, from its name.
pub fn parse_spool_file_name(path: &Path) -> Option<(u32, u32)> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_prefix("cudatrace-")?.strip_suffix(".spool")?;
    let (pid, image) = stem.split_once('-')?;
    Some((pid.parse().ok()?, image.parse().ok()?))
}

/// The spool files in `dir`, ordered by pid and then image.
pub fn spool_files_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut spools: Vec<((u32, u32), PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter_map(|path| parse_spool_file_name(&path).map(|key| (key, path)))
        .collect();
    spools.sort();
    Ok(spools.into_iter().map(|(_, path)| path).collect())
}

/// The folder, below `$TMPDIR`, that holds one user's spool folders.
pub fn user_folder_name(uid: u32) -> String {
    format!("cudatrace-{uid}")
}

/// Makes sure `folder` exists and is private to user `uid`: creates it with
/// mode 0700 if missing, and refuses a symlink, a folder of someone else, or
/// one that others may write to.
pub fn ensure_private_folder(folder: &Path, uid: u32) -> Result<(), NotPrivate> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let created = std::fs::DirBuilder::new().mode(0o700).create(folder);
    // A folder that is not there after a failed creation: the creation's
    // error says why (a read-only file system, no permission), not the
    // look that followed it ("No such file or directory").
    let meta = std::fs::symlink_metadata(folder).map_err(|looked| match created {
        Err(creating) if creating.kind() != std::io::ErrorKind::AlreadyExists => NotPrivate::CannotCreate(creating),
        _ => NotPrivate::CannotCreate(looked),
    })?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(NotPrivate::Refused);
    }
    Ok(())
}

/// Why [`ensure_private_folder`] would not use a folder.
#[derive(Debug)]
pub enum NotPrivate {
    /// It is missing and could not be created: the system's error.
    CannotCreate(std::io::Error),
    /// It is a link, not a folder, someone else's, or others may write to it.
    Refused,
}

/// Whether a module (by file name) is the CUDA driver or runtime: frames in
/// them carry a call on to CUDA rather than decide to make it.
pub fn is_cuda_library(file_name: &str) -> bool {
    file_name.starts_with("libcuda.so") || file_name.starts_with("libcudart.so")
}

/// A module name's file name, without its folder.
pub fn file_name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `cudatrace-<program>-<pid>.trace`, `program` being the base name of the
/// traced command with anything unusual in it replaced by `_`.
pub fn default_trace_name(command: &str, pid: u32) -> String {
    let base = command.rsplit('/').next().unwrap_or(command);
    let mut program: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if program.is_empty() {
        program = "process".into();
    }
    format!("cudatrace-{program}-{pid}.trace")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spool_names_round_trip_and_others_are_ignored() {
        let name = spool_file_name(4242, 1);
        assert_eq!(name, "cudatrace-4242-1.spool");
        assert_eq!(parse_spool_file_name(Path::new(&name)), Some((4242, 1)));
        assert_eq!(
            parse_spool_file_name(Path::new("/run/x/cudatrace-7-0.spool")),
            Some((7, 0))
        );
        for other in [
            "collector.lock",
            "cudatrace-7.spool",
            "cudatrace-a-0.spool",
            "cudatrace-7-0.trace",
        ] {
            assert_eq!(parse_spool_file_name(Path::new(other)), None, "{other}");
        }
    }

    #[test]
    fn trace_names_use_the_program_s_base_name() {
        assert_eq!(default_trace_name("/usr/bin/python3", 99), "cudatrace-python3-99.trace");
        assert_eq!(default_trace_name("my prog", 1), "cudatrace-my_prog-1.trace");
        assert_eq!(default_trace_name("", 5), "cudatrace-process-5.trace");
        assert_eq!(user_folder_name(1000), "cudatrace-1000");
    }

    #[test]
    fn private_folders_are_created_0700_and_others_refused() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = std::env::temp_dir().join(format!("cudatrace-naming-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let uid = std::fs::metadata(&base).unwrap().uid();
        let folder = base.join("mine");
        assert!(ensure_private_folder(&folder, uid).is_ok());
        assert_eq!(std::fs::metadata(&folder).unwrap().mode() & 0o777, 0o700);
        assert!(ensure_private_folder(&folder, uid).is_ok());
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(ensure_private_folder(&folder, uid), Err(NotPrivate::Refused)));
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(
            ensure_private_folder(&folder, uid + 1),
            Err(NotPrivate::Refused)
        ));
        let unmakeable = base.join("missing").join("deeper");
        assert!(matches!(
            ensure_private_folder(&unmakeable, uid),
            Err(NotPrivate::CannotCreate(e)) if e.kind() == std::io::ErrorKind::NotFound
        ));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
