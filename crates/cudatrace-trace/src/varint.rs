//! LEB128 variable-length integers and zigzag encoding for signed deltas.

use crate::problem::Malformed;

/// Appends `value` as LEB128.
pub fn put(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a signed value, zigzag-encoded.
pub fn put_signed(out: &mut Vec<u8>, value: i64) {
    put(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// A cursor over a record payload; every read fails cleanly past the end.
pub struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, at: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.at
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at.min(self.bytes.len())..]
    }

    /// Moves past `len` bytes read some other way (at most to the end).
    pub fn skip(&mut self, len: usize) {
        self.at = self.at.saturating_add(len).min(self.bytes.len());
    }

    pub fn is_empty(&self) -> bool {
        self.at >= self.bytes.len()
    }

    /// Bytes not read yet: an upper bound on how many items can follow.
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    #[inline]
    pub fn byte(&mut self) -> Result<u8, Malformed> {
        let b = *self.bytes.get(self.at).ok_or(Malformed::EndsEarly)?;
        self.at += 1;
        Ok(b)
    }

    #[inline]
    pub fn get(&mut self) -> Result<u64, Malformed> {
        // Most numbers of a trace (deltas, flags, small sizes) fit in one
        // byte: read those without the loop.
        if let Some(&b) = self.bytes.get(self.at) {
            if b < 0x80 {
                self.at += 1;
                return Ok(u64::from(b));
            }
        }
        self.get_long()
    }

    fn get_long(&mut self) -> Result<u64, Malformed> {
        // Away from the payload's end, a number of up to eight bytes (56
        // bits: nearly every address, size and time delta) is read as one
        // word, its 7-bit groups gathered without a branch per byte: the
        // lengths of a trace's numbers vary from one to the next, and a
        // branch per byte is mispredicted at each.
        if let Some(word) = self.bytes.get(self.at..self.at + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            let ends = !word & 0x8080_8080_8080_8080;
            if ends != 0 {
                let bits = ends.trailing_zeros() + 1;
                let mine = if bits == 64 { word } else { word & ((1u64 << bits) - 1) };
                let mut x = mine & 0x7f7f_7f7f_7f7f_7f7f;
                x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
                x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
                x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
                self.at += bits as usize / 8;
                return Ok(x);
            }
        }
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    return Err(Malformed::NumberOver64Bits);
                }
                return Ok(value);
            }
        }
        Err(Malformed::NumberTooLong)
    }

    pub fn get_signed(&mut self) -> Result<i64, Malformed> {
        let raw = self.get()?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    pub fn get_u32(&mut self) -> Result<u32, Malformed> {
        u32::try_from(self.get()?).map_err(|_| Malformed::NumberOver32Bits)
    }

    pub fn bytes(&mut self, len: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(Malformed::EndsEarly)?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    pub fn string(&mut self) -> Result<String, Malformed> {
        let len = usize::try_from(self.get()?).map_err(|_| Malformed::StringTooLong)?;
        Ok(String::from_utf8_lossy(self.bytes(len)?).into_owned())
    }
}

/// Appends a length-prefixed string.
pub fn put_string(out: &mut Vec<u8>, text: &str) {
    put(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_at_every_width() {
        let values = [0u64, 1, 127, 128, 300, 1 << 32, u64::MAX];
        let signed = [0i64, -1, 1, -64, 64, i64::MIN, i64::MAX];
        let mut out = Vec::new();
        values.iter().for_each(|&v| put(&mut out, v));
        signed.iter().for_each(|&v| put_signed(&mut out, v));
        put_string(&mut out, "héllo");
        let mut cursor = Cursor::new(&out);
        for &v in &values {
            assert_eq!(cursor.get(), Ok(v));
        }
        for &v in &signed {
            assert_eq!(cursor.get_signed(), Ok(v));
        }
        assert_eq!(cursor.string().as_deref(), Ok("héllo"));
        assert!(cursor.is_empty());
        assert_eq!(cursor.get(), Err(Malformed::EndsEarly));
        assert_eq!(Cursor::new(&[0xff; 11]).get(), Err(Malformed::NumberTooLong));
        assert_eq!(
            Cursor::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).get(),
            Err(Malformed::NumberOver64Bits)
        );
    }

    #[test]
    fn numbers_far_from_the_end_read_as_near_it() {
        // With ten bytes or more after it, a number takes the windowed path;
        // closer to the end, the byte-by-byte one: both give the same.
        let widths = (1..10).flat_map(|k| [(1u64 << (7 * k)) - 1, 1u64 << (7 * k), (1u64 << (7 * k)) + 0x55]);
        for value in widths.chain([300, 0x0123_4567_89ab_cdef, 1 << 63, u64::MAX]) {
            let mut out = Vec::new();
            put(&mut out, value);
            let width = out.len();
            out.extend_from_slice(&[0x7f; 10]);
            let mut cursor = Cursor::new(&out);
            assert_eq!(cursor.get(), Ok(value));
            assert_eq!(cursor.remaining(), 10, "{value} took {width} bytes");
        }
        let mut padded = vec![0xff; 10];
        padded.extend_from_slice(&[0; 10]);
        assert_eq!(Cursor::new(&padded).get(), Err(Malformed::NumberTooLong));
        let mut over = vec![0xff; 9];
        over.extend_from_slice(&[0x02; 11]);
        assert_eq!(Cursor::new(&over).get(), Err(Malformed::NumberOver64Bits));
    }
}
