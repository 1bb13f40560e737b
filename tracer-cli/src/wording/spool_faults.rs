//! What is wrong with a spool, or with the folder spools go to, in words.

use cudatrace_events::naming::NotPrivate;
use cudatrace_events::notices::NoSpool;
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
        SpoolError::Layout { field, found, expected } => {
            format!("spool header gives a {field} of {found}, not this version's {expected} (crafted or damaged?)")
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

/// Why a process could not create its spool in `folder`.
pub fn no_spool_text(reason: NoSpool, folder: &Path) -> String {
    let folder = folder.display();
    match reason {
        NoSpool::LostFolder => "its environment lost CUDATRACE_DIR, which names the spool folder".into(),
        NoSpool::CannotCreateFolder => format!("cannot create the spool folder {folder}"),
        NoSpool::CannotCreate => format!("cannot create its spool in {folder}"),
        NoSpool::CannotIdentify => format!("cannot identify its spool in {folder}"),
        NoSpool::NoRoom => format!("no room for its spool in {folder}"),
        NoSpool::CannotMap => format!("cannot map its spool in {folder}"),
    }
}

/// A notice's reason field in words: a code and folder the library wrote
/// ([`NoSpool::to_field`]) worded here, any other text as it is.
pub fn notice_reason_text(field: &str) -> String {
    NoSpool::from_field(field).map_or_else(|| field.to_string(), |(reason, folder)| no_spool_text(reason, &folder))
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
        let folder = Path::new("/tmp/run");
        assert_eq!(
            no_spool_text(NoSpool::CannotCreate, folder),
            "cannot create its spool in /tmp/run"
        );
        assert_eq!(
            no_spool_text(NoSpool::CannotCreateFolder, folder),
            "cannot create the spool folder /tmp/run"
        );
        assert_eq!(
            notice_reason_text(&NoSpool::NoRoom.to_field(folder)),
            "no room for its spool in /tmp/run"
        );
        assert_eq!(
            notice_reason_text("an older library's words"),
            "an older library's words"
        );
        assert_eq!(
            not_private_text(Path::new("/tmp/cudatrace-7"), &NotPrivate::Refused),
            "refusing /tmp/cudatrace-7: not a private folder of this user"
        );
    }
}
