//! How call stacks travel in a spool.
//!
//! A process interns each (frame, parent) pair once, as heaptrack does, and
//! gives it a node id; an event's [`crate::Event::stack`] names the innermost
//! node of its stack, and following parents leads to the outermost frame
//! (parent 0). A node is published as a [`crate::Op::StackNode`] record the
//! first time the process uses it.
//!
//! What the nodes point at is described by blobs, published as runs of
//! [`crate::Op::Blob`] records of [`BLOB_PIECE_BYTES`] each:
//! - a [`ModuleInfo`] for every module loaded in the process (path, build id,
//!   load address), so native addresses can be symbolized after the process
//!   is gone;
//! - a [`CodeInfo`] for every Python code object a stack names (file,
//!   qualified name, first line and the raw line table), so that the line of
//!   a (code object, instruction offset) pair is worked out by the collector.

use crate::slots::Event;
use std::collections::HashMap;

/// Frame kinds of a [`StackNode`].
pub mod frame_kind {
    /// A native return address (or, for the innermost frame, an instruction
    /// address). Subtract one before symbolizing a return address.
    pub const NATIVE: u8 = 0;
    /// A Python frame: `value` is the code object, `offset` the byte offset
    /// of the instruction it was executing.
    pub const PYTHON: u8 = 1;
    /// A marker: the thread runs in a Python process but has no Python
    /// thread state of its own, so Python frames were not available.
    pub const NO_PYTHON: u8 = 2;
    /// A marker: the stack was deeper than the depth limit and was cut.
    pub const TRUNCATED: u8 = 3;
}

/// Kinds of blob.
pub mod blob_kind {
    /// A [`super::ModuleInfo`]; its key is the module's start address.
    pub const MODULE: u8 = 1;
    /// A [`super::CodeInfo`]; its key is the code object's address.
    pub const CODE: u8 = 2;
}

/// Payload bytes in one blob record (its `size`, `stream` and `arg2` words).
pub const BLOB_PIECE_BYTES: usize = 24;
/// Largest blob a writer produces; longer descriptions are cut.
pub const MAX_BLOB_BYTES: usize = 16 * 1024;

/// One interned stack node, as carried by a [`crate::Op::StackNode`] event:
/// `address` = value, `size` = parent, `stream` = id, `arg1` = offset,
/// `arg2` = kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StackNode {
    /// The node's id within its process (never 0).
    pub id: u32,
    /// The id of the next outer node, 0 for the outermost.
    pub parent: u32,
    /// One of [`frame_kind`].
    pub kind: u8,
    /// The address (native) or code object (Python).
    pub value: u64,
    /// Python instruction byte offset; 0 for other kinds.
    pub offset: u32,
}

impl StackNode {
    /// The node an event carries, if it is a node record.
    pub fn from_event(event: &Event) -> Option<StackNode> {
        (event.op == crate::Op::StackNode).then_some(StackNode {
            id: event.stream as u32,
            parent: event.size as u32,
            kind: event.arg2 as u8,
            value: event.address,
            offset: event.arg1 as u32,
        })
    }
}

/// One piece of a blob, as carried by a [`crate::Op::Blob`] event:
/// `address` = key, `arg1` = offset | total length << 32, `device` = kind,
/// and the payload in `size`, `stream`, `arg2` (little-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobPiece {
    /// One of [`blob_kind`].
    pub kind: u8,
    /// What the blob describes (a module start address, a code object).
    pub key: u64,
    /// Byte offset of this piece in the blob.
    pub offset: u32,
    /// Length of the whole blob.
    pub total: u32,
    /// The piece's bytes (the last piece is padded with zeros).
    pub bytes: [u8; BLOB_PIECE_BYTES],
}

impl BlobPiece {
    /// The piece an event carries, if it is a blob record.
    pub fn from_event(event: &Event) -> Option<BlobPiece> {
        if event.op != crate::Op::Blob {
            return None;
        }
        let mut bytes = [0u8; BLOB_PIECE_BYTES];
        bytes[..8].copy_from_slice(&event.size.to_le_bytes());
        bytes[8..16].copy_from_slice(&event.stream.to_le_bytes());
        bytes[16..].copy_from_slice(&event.arg2.to_le_bytes());
        Some(BlobPiece {
            kind: event.device.unwrap_or(0),
            key: event.address,
            offset: event.arg1 as u32,
            total: (event.arg1 >> 32) as u32,
            bytes,
        })
    }

    /// The three payload words of a piece holding `bytes` (at most
    /// [`BLOB_PIECE_BYTES`]).
    pub fn payload_words(bytes: &[u8]) -> [u64; 3] {
        let mut padded = [0u8; BLOB_PIECE_BYTES];
        let n = bytes.len().min(BLOB_PIECE_BYTES);
        padded[..n].copy_from_slice(&bytes[..n]);
        let word = |i: usize| u64::from_le_bytes(padded[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        [word(0), word(1), word(2)]
    }
}

/// Puts blob pieces back together, per (kind, key).
#[derive(Default, Debug)]
pub struct BlobAssembler {
    partial: HashMap<(u8, u64), (Vec<u8>, usize)>,
}

impl BlobAssembler {
    /// Adds a piece; returns the whole blob once its last piece arrived.
    pub fn add(&mut self, piece: &BlobPiece) -> Option<(u8, u64, Vec<u8>)> {
        let total = (piece.total as usize).min(MAX_BLOB_BYTES);
        let offset = piece.offset as usize;
        if offset >= total {
            return None;
        }
        let entry = self
            .partial
            .entry((piece.kind, piece.key))
            .or_insert_with(|| (vec![0; total], 0));
        if entry.0.len() != total {
            // A new blob under the same key (the address was reused): start again.
            *entry = (vec![0; total], 0);
        }
        let n = (total - offset).min(BLOB_PIECE_BYTES);
        entry.0[offset..offset + n].copy_from_slice(&piece.bytes[..n]);
        entry.1 += n;
        if entry.1 >= total {
            let (bytes, _) = self.partial.remove(&(piece.kind, piece.key))?;
            return Some((piece.kind, piece.key, bytes));
        }
        None
    }
}

/// A module loaded in the traced process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Lowest address of its loaded segments.
    pub start: u64,
    /// End of its loaded segments.
    pub end: u64,
    /// Load bias: run-time address minus the address in the file.
    pub bias: u64,
    /// File offset of its first executable segment.
    pub exec_file_offset: u64,
    /// Address in the file of its first executable segment.
    pub exec_vaddr: u64,
    /// GNU build id, empty if it has none.
    pub build_id: Vec<u8>,
    /// Path as loaded.
    pub path: String,
}

impl ModuleInfo {
    /// Encodes the blob.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.build_id.len() + self.path.len());
        for word in [self.start, self.end, self.bias, self.exec_file_offset, self.exec_vaddr] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.push(self.build_id.len().min(255) as u8);
        out.extend_from_slice(&self.build_id[..self.build_id.len().min(255)]);
        out.extend_from_slice(self.path.as_bytes());
        out
    }

    /// Decodes a blob; `None` if it is too short.
    pub fn decode(bytes: &[u8]) -> Option<ModuleInfo> {
        let word = |i: usize| Some(u64::from_le_bytes(bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?));
        let id_len = *bytes.get(40)? as usize;
        let build_id = bytes.get(41..41 + id_len)?.to_vec();
        let path = String::from_utf8_lossy(bytes.get(41 + id_len..)?).into_owned();
        Some(ModuleInfo {
            start: word(0)?,
            end: word(1)?,
            bias: word(2)?,
            exec_file_offset: word(3)?,
            exec_vaddr: word(4)?,
            build_id,
            path,
        })
    }
}

/// How the characters of a copied Python string are stored.
pub mod text_encoding {
    /// One byte per character: ASCII or Latin-1.
    pub const LATIN1: u8 = 1;
    /// Two bytes per character.
    pub const UCS2: u8 = 2;
    /// Four bytes per character.
    pub const UCS4: u8 = 4;
    /// UTF-8.
    pub const UTF8: u8 = 8;
}

/// Size of the fixed part of an encoded [`CodeInfo`].
pub const CODE_INFO_HEADER: usize = 20;

/// A Python code object, as copied by the hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeInfo {
    /// CPython major version.
    pub major: u8,
    /// CPython minor version.
    pub minor: u8,
    /// `co_firstlineno`.
    pub first_line: i32,
    /// `co_filename`.
    pub filename: String,
    /// `co_qualname` (3.11 and later) or `co_name`.
    pub qualname: String,
    /// `co_linetable` (`co_lnotab` in 3.9).
    pub line_table: Vec<u8>,
}

/// Decodes a string copied with one of [`text_encoding`].
pub fn decode_text(encoding: u8, bytes: &[u8]) -> String {
    match encoding {
        text_encoding::LATIN1 => bytes.iter().map(|&b| char::from(b)).collect(),
        text_encoding::UCS2 => bytes
            .chunks_exact(2)
            .map(|c| char::from_u32(u32::from(u16::from_le_bytes([c[0], c[1]]))).unwrap_or('\u{fffd}'))
            .collect(),
        text_encoding::UCS4 => bytes
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('\u{fffd}'))
            .collect(),
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}

impl CodeInfo {
    /// Decodes a blob written by the hook: a [`CODE_INFO_HEADER`]-byte
    /// header (major, minor, filename encoding, qualname encoding, first
    /// line, then the byte lengths of filename, qualname and line table),
    /// followed by the three byte strings.
    pub fn decode(bytes: &[u8]) -> Option<CodeInfo> {
        let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        let (major, minor, file_enc, name_enc) = (*bytes.first()?, *bytes.get(1)?, *bytes.get(2)?, *bytes.get(3)?);
        let first_line = u32_at(4)? as i32;
        let (file_len, name_len, table_len) = (u32_at(8)? as usize, u32_at(12)? as usize, u32_at(16)? as usize);
        let file_end = CODE_INFO_HEADER.checked_add(file_len)?;
        let name_end = file_end.checked_add(name_len)?;
        let table_end = name_end.checked_add(table_len)?;
        Some(CodeInfo {
            major,
            minor,
            first_line,
            filename: decode_text(file_enc, bytes.get(CODE_INFO_HEADER..file_end)?),
            qualname: decode_text(name_enc, bytes.get(file_end..name_end)?),
            line_table: bytes.get(name_end..table_end)?.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Api, Kind, Op};

    fn blob_events(kind: u8, key: u64, blob: &[u8]) -> Vec<Event> {
        blob.chunks(BLOB_PIECE_BYTES)
            .enumerate()
            .map(|(i, chunk)| {
                let [size, stream, arg2] = BlobPiece::payload_words(chunk);
                Event {
                    pid: 1,
                    tid: 1,
                    seq: i as u64,
                    time_ns: 0,
                    device: Some(kind),
                    stream,
                    api: Api::Unknown,
                    op: Op::Blob,
                    kind: Kind::Device,
                    address: key,
                    size,
                    arg1: (i * BLOB_PIECE_BYTES) as u64 | (blob.len() as u64) << 32,
                    arg2,
                    stack: 0,
                }
            })
            .collect()
    }

    #[test]
    fn a_module_blob_survives_being_cut_into_pieces_and_reassembled_in_any_order() {
        let module = ModuleInfo {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0001_0000,
            bias: 0x7f00_0000_0000,
            exec_file_offset: 0x1000,
            exec_vaddr: 0x1000,
            build_id: vec![0xab; 20],
            path: "/usr/lib/x86_64-linux-gnu/libexample.so.1".into(),
        };
        let mut events = blob_events(blob_kind::MODULE, module.start, &module.encode());
        events.reverse();
        let mut assembler = BlobAssembler::default();
        let mut whole = None;
        for (i, event) in events.iter().enumerate() {
            let done = assembler.add(&BlobPiece::from_event(event).unwrap());
            assert_eq!(done.is_some(), i == events.len() - 1);
            whole = whole.or(done);
        }
        let (kind, key, bytes) = whole.unwrap();
        assert_eq!((kind, key), (blob_kind::MODULE, module.start));
        assert_eq!(ModuleInfo::decode(&bytes), Some(module));
    }

    #[test]
    fn code_info_decodes_each_text_encoding_and_rejects_short_blobs() {
        let mut blob = vec![3, 12, text_encoding::LATIN1, text_encoding::UCS2];
        blob.extend_from_slice(&88i32.to_le_bytes());
        blob.extend_from_slice(&4u32.to_le_bytes());
        blob.extend_from_slice(&6u32.to_le_bytes());
        blob.extend_from_slice(&2u32.to_le_bytes());
        blob.extend_from_slice(b"a\xe9.p");
        blob.extend_from_slice(&[b'f', 0, 0x3b, 0x04, b'n', 0]);
        blob.extend_from_slice(&[7, 9]);
        let code = CodeInfo::decode(&blob).unwrap();
        assert_eq!(code.filename, "a\u{e9}.p");
        assert_eq!(code.qualname, "f\u{43b}n");
        assert_eq!((code.major, code.minor, code.first_line), (3, 12, 88));
        assert_eq!(code.line_table, vec![7, 9]);
        assert_eq!(CodeInfo::decode(&blob[..blob.len() - 1]), None);
    }
}
