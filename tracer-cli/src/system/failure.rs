//! How a command fails: one line for stderr, and the exit code.

/// Why a command failed: one line for stderr, and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The message, without the `cudatrace: ` prefix.
    pub message: String,
    /// The exit code.
    pub code: u8,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure { message, code: 2 }
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
    }
}
