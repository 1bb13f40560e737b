//! What is wrong with a spool, or with the folder spools go to, in words.

use cudatrace_events::naming::NotPrivate;
use cudatrace_events::{SpoolError, SPOOL_VERSION};
use std::path::Path;

/// Why a spool file cannot be read.
pub fn spool_error_text(error: &SpoolError) -> String {
    match error {
        SpoolError::Io(e) => format!("cannot read spool: {e}"),
        SpoolError::NotAFile => "not a regular file".to_string(),
        SpoolError::Truncated { len: 0 } => {
            "spool is empty: its process could not reserve space for it (disk full?)".to_string()
        }
        SpoolError::Truncated { len } => format!(
            "spool is {len} bytes, shorter than its {}-byte header",
            cudatrace_events::layout::HEADER_SIZE
        ),
        SpoolError::Unfinished => "its header was never completed (its process died creating it?)".to_string(),
        SpoolError::NotASpool => "not a cudatrace spool file (bad magic)".to_string(),
        SpoolError::Version { found } => {
            format!("spool format version {found} is not supported (this build reads {SPOOL_VERSION})")
        }
    }
}

/// Why the spool folder `folder` was not used.
pub fn not_private_text(folder: &Path, fault: &NotPrivate) -> String {
    match fault {
        NotPrivate::CannotCreate(e) => format!("cannot create {}: {e}", folder.display()),
        NotPrivate::Refused => format!("refusing {}: not a private folder of this user", folder.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spool_faults_read_as_one_phrase() {
        assert_eq!(
            spool_error_text(&SpoolError::Version { found: 1 }),
            format!("spool format version 1 is not supported (this build reads {SPOOL_VERSION})")
        );
        assert_eq!(
            spool_error_text(&SpoolError::Truncated { len: 0 }),
            "spool is empty: its process could not reserve space for it (disk full?)"
        );
        assert_eq!(
            not_private_text(Path::new("/tmp/cudatrace-7"), &NotPrivate::Refused),
            "refusing /tmp/cudatrace-7: not a private folder of this user"
        );
    }
}
