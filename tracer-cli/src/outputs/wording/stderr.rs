//! The shape of every line cudatrace says on stderr, and how a command
//! line the parser rejects is said.

use std::fmt::Display;

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
