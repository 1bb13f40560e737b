//! The name of a plain `LD_PRELOAD` tree's trace when none was given:
//! after the first image that recorded, not the tree's root, which may be a
//! wrapper (pyenv's `python3` is a script run by `env`, which execs `bash`,
//! which execs Python) that records nothing.

use super::spool_tail::check_spool_file;
use cudatrace_events::naming;
use cudatrace_events::SpoolFile;
use std::path::Path;

/// `cudatrace-<program>-<pid>.trace` for the image of the spools in `dir`
/// that started recording first; for the `root` process (pid, command line)
/// if no spool can be read yet.
pub fn after_first_image(dir: &Path, root: Option<(u32, Vec<String>)>) -> String {
    let first = naming::spool_files_in(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|path| check_spool_file(path).is_ok())
        .filter_map(|path| Some(SpoolFile::open(&path, false).ok()?.header().process))
        .min_by_key(|process| (process.start_monotonic_ns, process.pid));
    let (pid, argv) = match first {
        Some(process) => (process.pid, process.argv),
        None => root.unwrap_or_default(),
    };
    naming::default_trace_name(argv.first().map_or("", String::as_str), pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_no_spool_the_root_names_the_trace() {
        let missing = Path::new("/nonexistent/cudatrace-spools");
        let root = Some((42, vec!["/usr/bin/env".to_string(), "bash".to_string()]));
        assert_eq!(after_first_image(missing, root), "cudatrace-env-42.trace");
        assert_eq!(after_first_image(missing, None), "cudatrace-process-0.trace");
    }
}
