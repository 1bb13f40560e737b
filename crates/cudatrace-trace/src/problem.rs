//! Why part of a trace could not be read, as data. This crate names the
//! fault; the command line words it for its users.

/// What was wrong with a frame of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// Reading the file failed: the system's own message.
    Unreadable(String),
    /// The file does not start with a trace's magic number.
    NotATrace,
    /// The file ends inside a frame's 5-byte header, `got` bytes into it.
    TruncatedFrameHeader {
        /// Bytes of the header present.
        got: usize,
    },
    /// A frame declares more bytes than any record can have.
    FrameTooLarge {
        /// Bytes the frame declares.
        length: usize,
    },
    /// The file ends inside a record.
    TruncatedRecord {
        /// Bytes present.
        got: usize,
        /// Bytes the frame declares, with its checksum.
        wanted: usize,
    },
    /// The frame's checksum does not match its bytes.
    ChecksumMismatch {
        /// The record's tag, where it was read in sequence.
        tag: Option<u8>,
    },
    /// The frame is whole, but its record cannot be decoded.
    Malformed {
        /// The record's tag, where it was read in sequence.
        tag: Option<u8>,
        /// What is wrong inside it.
        fault: Malformed,
    },
    /// The header names a format version this build cannot read.
    UnsupportedVersion {
        /// The trace's version.
        version: u32,
    },
}

/// What is wrong inside a record whose frame is whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// The record ends before one of its fields.
    EndsEarly,
    /// A number's encoding runs over ten bytes.
    NumberTooLong,
    /// A number does not fit 64 bits.
    NumberOver64Bits,
    /// A number that must fit 32 bits does not.
    NumberOver32Bits,
    /// A string is longer than this machine can address.
    StringTooLong,
    /// A list declares more strings than the record has bytes.
    MoreStringsThanBytes,
    /// An events block of a process with no process record before it.
    NoProcessRecord {
        /// The process's index in the trace.
        process: u32,
    },
    /// A block declares more events than it has bytes for.
    MoreEventsThanBytes,
    /// An event's operation code is unknown.
    UnknownOp,
    /// An event's kind code is unknown.
    UnknownKind,
    /// An event's entry-point code is unknown.
    UnknownApi,
    /// A stack id does not fit 32 bits.
    StackOutOfRange,
    /// An exit status does not fit 32 bits.
    ExitStatusOutOfRange,
    /// An errno does not fit 32 bits.
    ErrnoOutOfRange,
    /// A rank or world size does not fit 32 bits.
    RankOutOfRange,
    /// A symbols record declares more nodes than bytes.
    MoreNodesThanBytes,
    /// A node declares more frames than bytes.
    MoreFramesThanBytes,
    /// Bytes remain after the record's last field.
    TrailingBytes,
    /// A steps record's numbers cannot be: a range that ends before it
    /// starts, a step 0, or more steps than a run could make.
    ImpossibleSteps,
    /// A low points record's points are not in time order.
    LowPointsOutOfOrder,
}
