//! Writing Python pickles that PyTorch's memory visualizer can read.
//!
//! The visualizer has its own small JavaScript unpickler, so this writer
//! uses only the opcodes it handles (protocol 2, plus `SHORT_BINUNICODE`,
//! none of the framing of protocol 4), and only integers that fit in eight
//! bytes: a longer `LONG1` becomes a JavaScript `BigInt`, which breaks the
//! viewer's arithmetic. It streams: containers are opened, filled in
//! batches, and closed, so a file of any size is written in constant memory.

use std::io::{self, Write};

/// The opcodes this writer uses: every one of them is one the viewer reads.
pub mod op {
    /// `PROTO n`.
    pub const PROTO: u8 = 0x80;
    /// Push `{}`.
    pub const EMPTY_DICT: u8 = b'}';
    /// Push `[]`.
    pub const EMPTY_LIST: u8 = b']';
    /// Push a mark.
    pub const MARK: u8 = b'(';
    /// Extend the list below the mark with what is above it.
    pub const APPENDS: u8 = b'e';
    /// Set the dict's items from the pairs above the mark.
    pub const SETITEMS: u8 = b'u';
    /// Push a 1-byte unsigned integer.
    pub const BININT1: u8 = b'K';
    /// Push a 2-byte unsigned integer.
    pub const BININT2: u8 = b'M';
    /// Push a 4-byte signed integer.
    pub const BININT: u8 = b'J';
    /// Push an integer of up to 255 little-endian two's-complement bytes.
    pub const LONG1: u8 = 0x8a;
    /// Push a string of under 256 UTF-8 bytes.
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    /// Push a string (4-byte length).
    pub const BINUNICODE: u8 = b'X';
    /// Push `True`.
    pub const NEWTRUE: u8 = 0x88;
    /// Push `False`.
    pub const NEWFALSE: u8 = 0x89;
    /// Make a 2-tuple of the top two items.
    pub const TUPLE2: u8 = 0x86;
    /// Store the top in the memo (1-byte index).
    pub const BINPUT: u8 = b'q';
    /// Store the top in the memo (4-byte index).
    pub const LONG_BINPUT: u8 = b'r';
    /// Push a memo entry (1-byte index).
    pub const BINGET: u8 = b'h';
    /// Push a memo entry (4-byte index).
    pub const LONG_BINGET: u8 = b'j';
    /// End of the pickle.
    pub const STOP: u8 = b'.';
}

/// Items appended or set per `MARK`: what Python's own pickler batches.
const BATCH: usize = 1000;

/// A streaming pickle writer. Containers are written as `EMPTY_*`, then
/// batches of `MARK ... APPENDS/SETITEMS`; the caller says where items end.
pub struct Pickler<W: Write> {
    out: W,
    /// Per open container: items in its current batch, if a batch is open.
    open: Vec<(bool, usize)>,
    written: u64,
}

impl<W: Write> Pickler<W> {
    /// Starts a pickle (protocol 2) on `out`.
    pub fn new(out: W) -> io::Result<Pickler<W>> {
        let mut pickler = Pickler {
            out,
            open: Vec::new(),
            written: 0,
        };
        pickler.raw(&[op::PROTO, 2])?;
        Ok(pickler)
    }

    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.written += bytes.len() as u64;
        self.out.write_all(bytes)
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes an integer in the shortest form the viewer reads exactly.
    pub fn int(&mut self, value: i64) -> io::Result<()> {
        match value {
            0..=0xff => self.raw(&[op::BININT1, value as u8]),
            0x100..=0xffff => {
                let b = (value as u16).to_le_bytes();
                self.raw(&[op::BININT2, b[0], b[1]])
            }
            v if i32::try_from(v).is_ok() => {
                let b = (v as i32).to_le_bytes();
                self.raw(&[op::BININT, b[0], b[1], b[2], b[3]])
            }
            v => {
                let bytes = v.to_le_bytes();
                // Shortest two's-complement form, as Python writes it.
                let mut len = 8;
                while len > 1 {
                    let top = bytes[len - 1];
                    let next_sign = bytes[len - 2] & 0x80;
                    if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                        len -= 1;
                    } else {
                        break;
                    }
                }
                self.raw(&[op::LONG1, len as u8])?;
                self.raw(&bytes[..len])
            }
        }
    }

    /// Writes an unsigned integer, clamped to `i64::MAX` (no address or
    /// size comes near it).
    pub fn uint(&mut self, value: u64) -> io::Result<()> {
        self.int(i64::try_from(value).unwrap_or(i64::MAX))
    }

    /// Writes a string.
    pub fn str(&mut self, text: &str) -> io::Result<()> {
        let bytes = text.as_bytes();
        if bytes.len() < 256 {
            self.raw(&[op::SHORT_BINUNICODE, bytes.len() as u8])?;
        } else {
            let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
            self.raw(&[op::BINUNICODE])?;
            self.raw(&len.to_le_bytes())?;
        }
        self.raw(&bytes[..bytes.len().min(u32::MAX as usize)])
    }

    /// Writes a bool.
    pub fn bool(&mut self, value: bool) -> io::Result<()> {
        self.raw(&[if value { op::NEWTRUE } else { op::NEWFALSE }])
    }

    /// Makes a 2-tuple of the last two values written.
    pub fn tuple2(&mut self) -> io::Result<()> {
        self.raw(&[op::TUPLE2])
    }

    /// Stores the last value written in the memo at `index`.
    pub fn put(&mut self, index: u32) -> io::Result<()> {
        match u8::try_from(index) {
            Ok(small) => self.raw(&[op::BINPUT, small]),
            Err(_) => {
                self.raw(&[op::LONG_BINPUT])?;
                self.raw(&index.to_le_bytes())
            }
        }
    }

    /// Writes the memo entry `index` again.
    pub fn get(&mut self, index: u32) -> io::Result<()> {
        match u8::try_from(index) {
            Ok(small) => self.raw(&[op::BINGET, small]),
            Err(_) => {
                self.raw(&[op::LONG_BINGET])?;
                self.raw(&index.to_le_bytes())
            }
        }
    }

    /// Opens a list; items follow, each followed by [`Pickler::item_done`].
    pub fn begin_list(&mut self) -> io::Result<()> {
        self.raw(&[op::EMPTY_LIST])?;
        self.open.push((false, 0));
        Ok(())
    }

    /// Opens a dict; key and value follow for each item, then
    /// [`Pickler::item_done`].
    pub fn begin_dict(&mut self) -> io::Result<()> {
        self.raw(&[op::EMPTY_DICT])?;
        self.open.push((true, 0));
        Ok(())
    }

    /// Call before writing an item (a value, or a key and its value) of the
    /// innermost open container.
    pub fn item(&mut self) -> io::Result<()> {
        match self.open.last() {
            Some(&(_, 0)) => self.raw(&[op::MARK]),
            _ => Ok(()),
        }
    }

    /// Call after an item of the innermost open container is written.
    pub fn item_done(&mut self) -> io::Result<()> {
        let Some(top) = self.open.last_mut() else {
            return Ok(());
        };
        top.1 += 1;
        if top.1 == BATCH {
            let is_dict = top.0;
            top.1 = 0;
            self.raw(&[if is_dict { op::SETITEMS } else { op::APPENDS }])?;
        }
        Ok(())
    }

    /// Closes the innermost open container.
    pub fn end(&mut self) -> io::Result<()> {
        if let Some((is_dict, count)) = self.open.pop() {
            if count > 0 {
                self.raw(&[if is_dict { op::SETITEMS } else { op::APPENDS }])?;
            }
        }
        Ok(())
    }

    /// Writes a whole item: `item`, then `write`, then `item_done`.
    pub fn push(&mut self, write: impl FnOnce(&mut Self) -> io::Result<()>) -> io::Result<()> {
        self.item()?;
        write(self)?;
        self.item_done()
    }

    /// Writes a dict entry with a string key.
    pub fn entry(&mut self, key: &str, write: impl FnOnce(&mut Self) -> io::Result<()>) -> io::Result<()> {
        self.item()?;
        self.str(key)?;
        write(self)?;
        self.item_done()
    }

    /// Copies a fragment written by [`Pickler::fragment`] as one item of
    /// the innermost open container.
    pub fn splice(&mut self, bytes: &mut impl io::Read) -> io::Result<()> {
        self.item()?;
        self.written += io::copy(bytes, &mut self.out)?;
        self.item_done()
    }

    /// Ends the pickle and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        while !self.open.is_empty() {
            self.end()?;
        }
        self.raw(&[op::STOP])?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// The writer, for a fragment that is spliced into another pickle
    /// (no `STOP`).
    pub fn into_fragment(mut self) -> io::Result<W> {
        while !self.open.is_empty() {
            self.end()?;
        }
        self.out.flush()?;
        Ok(self.out)
    }

    /// A pickler for a fragment of a pickle, to be spliced into another:
    /// no `PROTO` header, no `STOP`.
    pub fn fragment(out: W) -> Pickler<W> {
        Pickler {
            out,
            open: Vec::new(),
            written: 0,
        }
    }
}
