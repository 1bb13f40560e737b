//! The run's notice file: how a traced process that cannot create its
//! spool still tells the collector that it existed, and why it recorded
//! nothing.
//!
//! `cudatrace run` creates [`NOTICE_FILE`] in the run folder, opens it for
//! appending and hands the descriptor down to the command, named in
//! [`crate::settings::NOTICE`] as `fd:device:inode`. A process that gives up on its
//! spool (no free descriptor, a `setuid` that locked it out of the run
//! folder, a spool folder removed from its environment) writes one line
//! through that descriptor, in one `write`, after checking that the
//! descriptor still names that file. The collector reads the lines as they
//! come and puts each in the trace as a process that could not record.
//!
//! A line is tab-separated: [`NOTICE_TAG`], pid, ppid, uid, monotonic time
//! in ns, errno, the process's name, and the reason: its [`NoSpool`] code
//! and the spool folder ([`NoSpool::to_field`]), which the collector words
//! before it puts the process in the trace.

/// The notice file's name in the run folder.
pub const NOTICE_FILE: &str = "notices";

/// The first field of every line, with the line format's version: 2 since
/// the reason field carries a code ([`NoSpool::to_field`]). A collector
/// older than that does not read these lines, rather than copy the code
/// into the trace as if it were words.
pub const NOTICE_TAG: &str = "cudatrace-notice-2";

/// The tag of lines whose reason field is in words (read still, from an
/// older library).
const NOTICE_TAG_WORDS: &str = "cudatrace-notice-1";

/// Longest line written; a longer reason is cut.
pub const MAX_NOTICE_LINE: usize = 1024;

/// One process that could not record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Notice {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Real user id.
    pub uid: u32,
    /// `CLOCK_MONOTONIC` when it gave up.
    pub time_ns: u64,
    /// The failure's `errno`, or 0.
    pub errno: i32,
    /// The process's name (`comm`).
    pub name: String,
    /// Why: in a notice line, the reason's code and folder
    /// ([`NoSpool::to_field`]); in the trace, in words.
    pub reason: String,
}

/// Text as it may stand in a field: no tab, newline or other control byte.
fn field(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

impl Notice {
    /// The line, newline included, at most [`MAX_NOTICE_LINE`] bytes.
    pub fn to_line(&self) -> String {
        let mut line = format!(
            "{NOTICE_TAG}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.pid,
            self.ppid,
            self.uid,
            self.time_ns,
            self.errno,
            field(&self.name),
            field(&self.reason)
        );
        if line.len() > MAX_NOTICE_LINE - 1 {
            let mut cut = MAX_NOTICE_LINE - 1;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
        }
        line.push('\n');
        line
    }

    /// Reads one line (without its newline); `None` for anything else.
    pub fn parse(line: &str) -> Option<Notice> {
        let mut fields = line.split('\t');
        if ![NOTICE_TAG, NOTICE_TAG_WORDS].contains(&fields.next()?) {
            return None;
        }
        let notice = Notice {
            pid: fields.next()?.parse().ok()?,
            ppid: fields.next()?.parse().ok()?,
            uid: fields.next()?.parse().ok()?,
            time_ns: fields.next()?.parse().ok()?,
            errno: fields.next()?.parse().ok()?,
            name: fields.next()?.to_string(),
            reason: fields.next()?.to_string(),
        };
        fields.next().is_none().then_some(notice)
    }
}

/// Why a process could not create its spool: a code small enough for a
/// parent's header ([`crate::layout::ChildFailure`]) or a notice line's
/// reason field; the command line words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum NoSpool {
    /// `CUDATRACE_DIR` was removed from its environment.
    LostFolder = 1,
    /// The spool folder could not be created.
    CannotCreateFolder = 2,
    /// The spool file could not be created in the folder.
    CannotCreate = 3,
    /// The new spool file could not be checked (`fstat`).
    CannotIdentify = 4,
    /// No room on disk for the spool's header.
    NoRoom = 5,
    /// The spool's header could not be mapped.
    CannotMap = 6,
}

impl NoSpool {
    /// Every reason, in code order.
    pub const ALL: [NoSpool; 6] = [
        NoSpool::LostFolder,
        NoSpool::CannotCreateFolder,
        NoSpool::CannotCreate,
        NoSpool::CannotIdentify,
        NoSpool::NoRoom,
        NoSpool::CannotMap,
    ];

    /// Decodes a stored code.
    pub fn from_code(code: u32) -> Option<NoSpool> {
        NoSpool::ALL.into_iter().find(|reason| *reason as u32 == code)
    }

    /// The reason as a notice line's reason field carries it: its code
    /// and the spool folder, which the collector words
    /// ([`NoSpool::from_field`] reads it back).
    pub fn to_field(self, folder: &std::path::Path) -> String {
        format!("{REASON_FIELD_TAG}{}:{}", self as u32, folder.display())
    }

    /// The reason and folder of a field written by [`NoSpool::to_field`];
    /// `None` for any other text (a reason worded by an older library).
    pub fn from_field(field: &str) -> Option<(NoSpool, std::path::PathBuf)> {
        let (code, folder) = field.strip_prefix(REASON_FIELD_TAG)?.split_once(':')?;
        Some((NoSpool::from_code(code.parse().ok()?)?, folder.into()))
    }
}

/// What starts a notice's reason field that holds a [`NoSpool`] code.
const REASON_FIELD_TAG: &str = "no-spool:";

/// The descriptor named by [`crate::settings::NOTICE`]'s value: `(fd, device, inode)`.
pub fn parse_descriptor(value: &str) -> Option<(i32, u64, u64)> {
    let mut parts = value.split(':');
    let fd = parts.next()?.parse().ok().filter(|&fd: &i32| fd >= 0)?;
    let device = parts.next()?.parse().ok()?;
    let inode = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((fd, device, inode))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Notice {
        Notice {
            pid: 4242,
            ppid: 4241,
            uid: 65534,
            time_ns: 123_456_789,
            errno: 13,
            name: "python3".into(),
            reason: NoSpool::CannotCreate.to_field(std::path::Path::new("/tmp/run")),
        }
    }

    #[test]
    fn a_line_reads_back_as_the_notice_it_was_written_from() {
        let line = sample().to_line();
        assert_eq!(
            line,
            "cudatrace-notice-2\t4242\t4241\t65534\t123456789\t13\tpython3\tno-spool:3:/tmp/run\n"
        );
        assert_eq!(Notice::parse(line.trim_end_matches('\n')), Some(sample()));
        // A line of an older library, its reason in words, still reads.
        let older =
            "cudatrace-notice-1\t4242\t4241\t65534\t123456789\t13\tpython3\tcannot create its spool in /tmp/run";
        assert_eq!(
            Notice::parse(older).map(|n| n.reason),
            Some("cannot create its spool in /tmp/run".to_string())
        );
    }

    #[test]
    fn tabs_and_newlines_in_a_name_or_reason_cannot_split_the_line() {
        let notice = Notice {
            name: "a\tb".into(),
            reason: "x\ny\tz".into(),
            ..sample()
        };
        let line = notice.to_line();
        assert_eq!(line.matches('\n').count(), 1);
        let read = Notice::parse(line.trim_end_matches('\n')).unwrap();
        assert_eq!((read.name.as_str(), read.reason.as_str()), ("a b", "x y z"));
    }

    #[test]
    fn a_long_reason_is_cut_to_the_longest_line() {
        let notice = Notice {
            reason: "é".repeat(2000),
            ..sample()
        };
        let line = notice.to_line();
        assert!(line.len() <= MAX_NOTICE_LINE, "{}", line.len());
        assert!(Notice::parse(line.trim_end_matches('\n')).is_some());
    }

    #[test]
    fn anything_else_is_not_a_notice() {
        for line in [
            "",
            "cudatrace-notice-3\t1\t1\t0\t0\t0\tx\ty",
            "cudatrace-notice-1\t1\t1\t0\t0\t0\tx",
            "cudatrace-notice-1\tpid\t1\t0\t0\t0\tx\ty",
            "cudatrace-notice-1\t1\t1\t0\t0\t0\tx\ty\textra",
        ] {
            assert_eq!(Notice::parse(line), None, "{line:?}");
        }
    }

    #[test]
    fn reasons_round_trip_through_their_codes_and_name_the_folder() {
        for reason in NoSpool::ALL {
            assert_eq!(NoSpool::from_code(reason as u32), Some(reason));
        }
        assert_eq!(NoSpool::from_code(0), None);
        assert_eq!(NoSpool::from_code(7), None);
        let folder = std::path::Path::new("/tmp/run");
        for reason in NoSpool::ALL {
            assert_eq!(
                NoSpool::from_field(&reason.to_field(folder)),
                Some((reason, folder.to_path_buf()))
            );
        }
        assert_eq!(NoSpool::CannotCreate.to_field(folder), "no-spool:3:/tmp/run");
        assert_eq!(NoSpool::from_field("cannot create its spool in /tmp/run"), None);
        assert_eq!(NoSpool::from_field("no-spool:9:/tmp/run"), None);
    }

    #[test]
    fn the_descriptor_is_fd_device_inode() {
        assert_eq!(parse_descriptor("7:2049:131"), Some((7, 2049, 131)));
        for bad in ["", "7", "7:1", "-1:1:1", "7:1:1:1", "x:1:1"] {
            assert_eq!(parse_descriptor(bad), None, "{bad:?}");
        }
    }
}
