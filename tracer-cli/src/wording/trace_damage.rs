//! What is wrong with a trace file, in words: a damaged frame, a trace that
//! cannot be read at all, a block that changed while it was read.

use cudatrace_analysis::{NotRegular, UnreadBlock, UnreadableTrace};
use cudatrace_trace::{Damage, Malformed, Problem};

/// "at byte N: what was wrong".
pub fn damage_text(damage: &Damage) -> String {
    format!("at byte {}: {}", damage.offset, problem_text(&damage.problem))
}

/// What was wrong with a frame.
pub fn problem_text(problem: &Problem) -> String {
    let record = |tag: &Option<u8>| tag.map(|tag| format!("'{}' record", tag.escape_ascii()));
    match problem {
        Problem::Unreadable(error) => error.clone(),
        Problem::NotATrace => "not a cudatrace trace (bad magic)".to_string(),
        Problem::TruncatedFrameHeader { got } => format!("truncated frame header ({got} of 5 bytes)"),
        Problem::FrameTooLarge { length } => format!("frame declares {length} bytes, more than any record"),
        Problem::TruncatedRecord { got, wanted } => format!("truncated record: {got} of {wanted} bytes"),
        Problem::ChecksumMismatch { tag } => match record(tag) {
            Some(record) => format!("checksum mismatch in a {record}"),
            None => "checksum mismatch".to_string(),
        },
        Problem::Malformed { tag, fault } => match record(tag) {
            Some(record) => format!("malformed {record}: {}", malformed_text(*fault)),
            None => malformed_text(*fault),
        },
        Problem::UnsupportedVersion { version } => format!(
            "trace format version {version} is not supported (this build reads {} to {})",
            cudatrace_trace::OLDEST_READABLE_VERSION,
            cudatrace_trace::FORMAT_VERSION
        ),
    }
}

/// What is wrong inside a record.
fn malformed_text(fault: Malformed) -> String {
    let text = match fault {
        Malformed::EndsEarly => "record ends early",
        Malformed::NumberTooLong => "varint longer than 10 bytes",
        Malformed::NumberOver64Bits => "varint overflows 64 bits",
        Malformed::NumberOver32Bits => "value does not fit 32 bits",
        Malformed::StringTooLong => "string too long",
        Malformed::MoreStringsThanBytes => "more strings than bytes",
        Malformed::NoProcessRecord { process } => {
            return format!("events of process {process}, which has no process record")
        }
        Malformed::MoreEventsThanBytes => "more events than the block has bytes for",
        Malformed::UnknownOp => "unknown op code",
        Malformed::UnknownKind => "unknown kind code",
        Malformed::UnknownApi => "unknown api code",
        Malformed::StackOutOfRange => "stack id out of range",
        Malformed::ExitStatusOutOfRange => "exit status out of range",
        Malformed::ErrnoOutOfRange => "errno out of range",
        Malformed::RankOutOfRange => "rank out of range",
        Malformed::MoreNodesThanBytes => "more nodes than bytes",
        Malformed::MoreFramesThanBytes => "more frames than bytes",
        Malformed::TrailingBytes => "trailing bytes after the record",
        Malformed::ImpossibleSteps => "steps numbered as no run numbers them",
        Malformed::LowPointsOutOfOrder => "low points out of time order",
    };
    text.to_string()
}

/// Why a trace could not be read at all, as one line.
pub fn unreadable_trace_text(fault: &UnreadableTrace) -> String {
    match fault {
        UnreadableTrace::NotRegular { path, what } => not_regular_text(path, *what),
        UnreadableTrace::CannotOpen { path, error } => format!("cannot open {}: {error}", path.display()),
        UnreadableTrace::Damaged { path, damage } => {
            format!("{}: {}", path.display(), problem_text(&damage.problem))
        }
    }
}

/// What a path that is not a regular file is, in words ("a pipe").
pub fn not_regular_name(what: NotRegular) -> &'static str {
    match what {
        NotRegular::Folder => "a folder",
        NotRegular::Pipe => "a pipe",
        NotRegular::Socket => "a socket",
        NotRegular::Device => "a device",
        NotRegular::Special => "a special file",
    }
}

/// An input that is not a regular file, and what to do.
pub fn not_regular_text(path: &std::path::Path, what: NotRegular) -> String {
    let what = not_regular_name(what);
    format!(
        "{} is {what}, not a regular file: cudatrace reads its input more than once (save it to a file first)",
        path.display()
    )
}

/// A block of events that could not be read again.
pub fn unread_block_text(block: &UnreadBlock) -> String {
    match block {
        UnreadBlock::Damaged(damage) => damage_text(damage),
        UnreadBlock::NotEvents { offset } => format!("at byte {offset}: no longer an event block"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: u64, problem: Problem) -> String {
        damage_text(&Damage {
            offset,
            problem,
            skipped: false,
        })
    }

    #[test]
    fn each_problem_reads_as_one_phrase() {
        assert_eq!(
            at(0, Problem::NotATrace),
            "at byte 0: not a cudatrace trace (bad magic)"
        );
        assert_eq!(
            at(9, Problem::ChecksumMismatch { tag: Some(b'e') }),
            "at byte 9: checksum mismatch in a 'e' record"
        );
        assert_eq!(
            at(9, Problem::ChecksumMismatch { tag: None }),
            "at byte 9: checksum mismatch"
        );
        assert_eq!(
            at(
                20,
                Problem::Malformed {
                    tag: Some(b'e'),
                    fault: Malformed::NoProcessRecord { process: 0 }
                }
            ),
            "at byte 20: malformed 'e' record: events of process 0, which has no process record"
        );
        assert_eq!(
            at(
                20,
                Problem::Malformed {
                    tag: None,
                    fault: Malformed::MoreEventsThanBytes
                }
            ),
            "at byte 20: more events than the block has bytes for"
        );
        assert_eq!(
            at(
                8,
                Problem::TruncatedRecord {
                    got: 7,
                    wanted: 62914564
                }
            ),
            "at byte 8: truncated record: 7 of 62914564 bytes"
        );
        assert_eq!(
            at(8, Problem::TruncatedFrameHeader { got: 3 }),
            "at byte 8: truncated frame header (3 of 5 bytes)"
        );
        assert_eq!(
            unread_block_text(&UnreadBlock::NotEvents { offset: 77 }),
            "at byte 77: no longer an event block"
        );
    }
}
