//! The names both sides agree on: where the library writes and where the
//! collector looks.

use std::path::{Path, PathBuf};

/// Created by whichever process of a plain-`LD_PRELOAD` tree starts its collector.
pub const COLLECTOR_LOCK: &str = "collector.lock";

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
}
