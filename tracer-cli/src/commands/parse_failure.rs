//! What a command line the parser rejects becomes: help and version on
//! stdout, a usage error as one line on stderr.

use crate::system::terminal::{say, Stdout};
use crate::wording::stderr::parse_error_line;
use std::io::Write;
use std::process::ExitCode;

/// Help and version go to stdout (exit 0); anything else the parser
/// rejects is one line on stderr (exit 2).
pub fn parse_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind as Kind;
    match error.kind() {
        Kind::DisplayHelp | Kind::DisplayVersion => {
            let mut out = Stdout::new();
            if let Ok(true) = out.write(&error.render().to_string()) {
                let _ = out.finish();
            }
            ExitCode::SUCCESS
        }
        Kind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = std::io::stderr()
                .lock()
                .write_all(error.render().to_string().as_bytes());
            ExitCode::from(2)
        }
        _ => {
            // The message is its first paragraph; clap may spread it over lines.
            let rendered = error.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .take_while(|line| !line.trim().is_empty())
                .map(str::trim)
                .collect();
            let message = message.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            // Clap's tip naming what was meant ("a similar subcommand exists:
            // 'report'") comes in a paragraph of its own: kept, on the same line.
            let tips: Vec<&str> = rendered
                .lines()
                .filter_map(|line| line.trim().strip_prefix("tip: "))
                .filter(|tip| tip.contains("similar"))
                .collect();
            say(&parse_error_line(message, &tips));
            ExitCode::from(2)
        }
    }
}
