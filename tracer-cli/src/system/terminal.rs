//! Writing to the terminal without ever failing because of it: a closed
//! pipe (`cudatrace report big.trace | head`) ends output quietly, and a
//! closed stderr never stops `run` from finishing the trace.

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

/// One line on stderr; lost if stderr is gone.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Output to stdout that stops quietly when the reader goes away.
pub struct Stdout {
    out: std::io::BufWriter<std::io::StdoutLock<'static>>,
    closed: bool,
}

impl Stdout {
    /// Buffered, locked stdout.
    pub fn new() -> Stdout {
        Stdout {
            out: std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock()),
            closed: false,
        }
    }

    /// Writes `text`; false once the reader has gone (further writes are dropped).
    pub fn write(&mut self, text: &str) -> Result<bool, String> {
        if self.closed {
            return Ok(false);
        }
        match self.out.write_all(text.as_bytes()) {
            Ok(()) => Ok(true),
            Err(e) => self.failed(e),
        }
    }

    /// Flushes; false if the reader has gone.
    pub fn finish(mut self) -> Result<bool, String> {
        if self.closed {
            return Ok(false);
        }
        match self.out.flush() {
            Ok(()) => Ok(true),
            Err(e) => self.failed(e),
        }
    }

    fn failed(&mut self, error: std::io::Error) -> Result<bool, String> {
        self.closed = true;
        if error.kind() == ErrorKind::BrokenPipe {
            Ok(false)
        } else {
            Err(format!("cannot write to stdout: {error}"))
        }
    }
}

/// Help and version go to stdout (exit 0); anything else the parser
/// rejects is one line on stderr (exit 2).
pub fn parse_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind as Kind;
    match error.kind() {
        Kind::DisplayHelp | Kind::DisplayVersion => {
            let _ = std::io::stdout()
                .lock()
                .write_all(error.render().to_string().as_bytes());
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
            let tips: String = tips.iter().map(|tip| format!("; {tip}")).collect();
            say(&format!("cudatrace: {message}{tips} (see --help)"));
            ExitCode::from(2)
        }
    }
}
