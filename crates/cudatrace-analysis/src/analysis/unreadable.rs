//! What can stop a trace from being read, as data: the outputs' wording
//! says it to the user.

use crate::system::input_path::NotRegular;
use cudatrace_trace::Damage;
use std::path::PathBuf;

/// Why a trace could not be read at all.
#[derive(Debug)]
pub enum UnreadableTrace {
    /// The path is not a regular file.
    NotRegular {
        /// The path given.
        path: PathBuf,
        /// What it is.
        what: NotRegular,
    },
    /// It could not be opened.
    CannotOpen {
        /// The path given.
        path: PathBuf,
        /// The system's message.
        error: String,
    },
    /// It is not a trace, or its very start is damaged.
    Damaged {
        /// The path given.
        path: PathBuf,
        /// Where and why.
        damage: Damage,
    },
}

/// A block of events that could not be read again in the replay, though
/// the first read found it: the file changed while it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnreadBlock {
    /// Its frame no longer reads.
    Damaged(Damage),
    /// It reads, but is no longer a block of events.
    NotEvents {
        /// Byte offset of its frame.
        offset: u64,
    },
}

impl UnreadBlock {
    /// Where in the file the block lies: unread blocks are told in this
    /// order, however the replay was shared out among threads.
    pub fn offset(&self) -> u64 {
        match self {
            UnreadBlock::Damaged(damage) => damage.offset,
            UnreadBlock::NotEvents { offset } => *offset,
        }
    }
}
