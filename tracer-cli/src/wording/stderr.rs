//! The prefix of a line on stderr worded elsewhere, a path that failed,
//! and how a command line the parser rejects is said.

use std::fmt::Display;

/// A path that could not be used, and the system's reason.
pub fn path_failed(path: &std::path::Path, error: impl Display) -> String {
    format!("{}: {error}", path.display())
}

/// A line on stderr: `cudatrace: ` and what is said.
pub fn said(line: impl Display) -> String {
    format!("cudatrace: {line}")
}

/// A command line the parser rejected: its message, the parser's tips of
/// what was meant, and where to look.
pub fn parse_error_line(message: &str, tips: &[&str]) -> String {
    let tips: String = tips.iter().map(|tip| format!("; {tip}")).collect();
    said(format!("{message}{tips} (see --help)"))
}
