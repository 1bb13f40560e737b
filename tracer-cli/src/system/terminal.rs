//! Writing to the terminal without ever failing because of it: a closed
//! pipe (`cudatrace report big.trace | head`) ends output quietly, and a
//! closed stderr never stops `run` from finishing the trace. Every command
//! writes stdout through [`Stdout`] (or [`print_line`]), never `println!`,
//! which panics on a closed pipe.

use super::write_failure::WriteFailure;
use std::io::{ErrorKind, Write};

/// One line on stderr; lost if stderr is gone.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// One line on stdout (the path of what a command wrote); nothing happens
/// once the reader has gone.
pub fn print_line(line: &str) -> Result<(), WriteFailure> {
    let mut out = Stdout::new();
    if out.write(line)? && out.write("\n")? {
        out.finish()?;
    }
    Ok(())
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
    pub fn write(&mut self, text: &str) -> Result<bool, WriteFailure> {
        if self.closed {
            return Ok(false);
        }
        match self.out.write_all(text.as_bytes()) {
            Ok(()) => Ok(true),
            Err(e) => self.failed(e),
        }
    }

    /// Flushes; false if the reader has gone.
    pub fn finish(mut self) -> Result<bool, WriteFailure> {
        if self.closed {
            return Ok(false);
        }
        match self.out.flush() {
            Ok(()) => Ok(true),
            Err(e) => self.failed(e),
        }
    }

    fn failed(&mut self, error: std::io::Error) -> Result<bool, WriteFailure> {
        self.closed = true;
        if error.kind() == ErrorKind::BrokenPipe {
            Ok(false)
        } else {
            Err(WriteFailure::Stdout(error))
        }
    }
}
