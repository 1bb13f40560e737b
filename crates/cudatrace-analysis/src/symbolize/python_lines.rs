//! CPython line tables, decoded outside the traced process.
//!
//! A Python frame names its code object and the byte offset of the instruction it is executing;
//! the source line is not stored anywhere, CPython computes it on demand from the code object's
//! line table (`PyCode_Addr2Line`). A tool that reads a stopped or running interpreter's memory
//! from outside cannot call that function, so this module does the same computation on bytes
//! copied out of the process: the line table, `co_firstlineno` and the instruction offset.
//!
//! Three formats cover the supported versions, 3.9 to 3.13 (3.14 is read as 3.11 to 3.13 are):
//!
//! - 3.9 (`co_lnotab`, `Objects/lnotab_notes.txt`): pairs of (unsigned bytecode increment,
//!   signed line increment). The line of an offset is `co_firstlineno` plus the line increments
//!   of every pair whose cumulated bytecode offset is at most that offset. Large jumps are split
//!   over several pairs.
//! - 3.10 (`co_linetable`, PEP 626, `Objects/lnotab_notes.txt` of 3.10): pairs of (unsigned
//!   bytecode length, signed line delta). Each pair covers the next `length` bytes of bytecode;
//!   a line delta of -128 means that range has no line (and leaves the running line alone).
//!   Zero-length pairs only carry line deltas.
//! - 3.11 and later (`co_linetable`, `Objects/locations.md`): entries that each cover 1 to 8
//!   code units (2 bytes each), starting with a byte whose bit 7 is set, bits 3-6 holding a kind
//!   and bits 0-2 the length minus one. The kind says how the start line moves relative to the
//!   previous entry (or `co_firstlineno`): not at all (short forms 0-9), by 0/1/2 (one-line forms
//!   10-12), by a signed varint (13: no columns, 14: long form), or that the entry has no
//!   location (15). Varints are little-endian 6-bit chunks with bit 6 meaning "more follows";
//!   signed varints keep the sign in bit 0.
//!
//! Every reader checks its bounds: a truncated or malformed table gives `None`, never a panic.

/// The line-table format of one CPython version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineTableFormat {
    /// 3.9 and older: `co_lnotab`, pairs of (bytecode delta, signed line delta).
    Lnotab,
    /// 3.10: `co_linetable`, pairs of (bytecode delta, signed line delta) with -128 meaning "no line".
    Linetable310,
    /// 3.11 and later: the location table (`co_linetable`), entries of code units with varint/svarint fields.
    Locations,
}

impl LineTableFormat {
    /// The format used by CPython `major.minor`, or None for versions before 3.9 or after 3.14
    /// (3.14 keeps the 3.11 location table).
    pub fn for_version(major: u8, minor: u8) -> Option<LineTableFormat> {
        match (major, minor) {
            (3, 9) => Some(LineTableFormat::Lnotab),
            (3, 10) => Some(LineTableFormat::Linetable310),
            (3, 11..=14) => Some(LineTableFormat::Locations),
            _ => None,
        }
    }
}

/// The line executing at byte offset `offset` (bytes from the first instruction; in 3.11+ code
/// units are 2 bytes, offsets are even) of a code object whose first line is `first_line` and
/// whose line table is `table`. None when the table says the instruction has no line, or the
/// offset is past the table.
///
/// `co_lnotab` (3.9) does not record where the bytecode ends: its last line runs to the end of
/// the code, so for that format any offset past the last entry gets the last line, and callers
/// that know the code's length should check the offset against it. A table whose length is
/// impossible for its format (an odd length for the two pair formats) gives None.
pub fn line_at(format: LineTableFormat, table: &[u8], first_line: i32, offset: u32) -> Option<i32> {
    match format {
        LineTableFormat::Lnotab => lnotab_line(table, first_line, offset),
        LineTableFormat::Linetable310 => linetable310_line(table, first_line, offset),
        LineTableFormat::Locations => locations_line(table, first_line, offset),
    }
}

/// 3.9 `co_lnotab`: add the line increments of every pair reached before passing `offset`.
fn lnotab_line(table: &[u8], first_line: i32, offset: u32) -> Option<i32> {
    if !table.len().is_multiple_of(2) {
        return None;
    }
    let mut addr: u64 = 0;
    let mut line = first_line;
    for pair in table.chunks_exact(2) {
        addr += u64::from(pair[0]);
        if addr > u64::from(offset) {
            break;
        }
        line = line.checked_add(i32::from(pair[1] as i8))?;
    }
    Some(line)
}

/// 3.10 `co_linetable`: walk the ranges until the one holding `offset`.
fn linetable310_line(table: &[u8], first_line: i32, offset: u32) -> Option<i32> {
    if !table.len().is_multiple_of(2) {
        return None;
    }
    let offset = u64::from(offset);
    let mut end: u64 = 0;
    let mut line = first_line;
    for pair in table.chunks_exact(2) {
        let start = end;
        end += u64::from(pair[0]);
        let delta = pair[1] as i8;
        let range_line = if delta == -128 {
            None
        } else {
            line = line.checked_add(i32::from(delta))?;
            Some(line)
        };
        // Ranges are contiguous from 0, so the first one ending after `offset` holds it; an empty
        // range never does.
        if start <= offset && offset < end {
            return range_line;
        }
    }
    None
}

/// Location-entry kind: the entry has no location at all.
const KIND_NONE: u8 = 15;
/// Location-entry kind: line delta as a signed varint, end line and columns as varints.
const KIND_LONG: u8 = 14;
/// Location-entry kind: line delta as a signed varint, no columns.
const KIND_NO_COLUMNS: u8 = 13;
/// Location-entry kinds 10, 11 and 12: line delta of 0, 1 or 2, then two column bytes.
const KIND_ONE_LINE_FIRST: u8 = 10;
const KIND_ONE_LINE_LAST: u8 = 12;

/// 3.11+ location table: walk the entries until the one holding `offset`.
fn locations_line(table: &[u8], first_line: i32, offset: u32) -> Option<i32> {
    let offset = u64::from(offset);
    let mut pos = 0usize;
    let mut start: u64 = 0;
    let mut line = first_line;
    while let Some(&header) = table.get(pos) {
        if header & 0x80 == 0 {
            // Every entry starts with bit 7 set; anything else is not a location table.
            return None;
        }
        pos += 1;
        let kind = (header >> 3) & 0x0f;
        let units = u64::from(header & 0x07) + 1;
        let delta = match kind {
            KIND_NONE => 0,
            KIND_LONG | KIND_NO_COLUMNS => read_svarint(table, &mut pos)?,
            KIND_ONE_LINE_FIRST..=KIND_ONE_LINE_LAST => i32::from(kind - KIND_ONE_LINE_FIRST),
            _ => 0,
        };
        line = line.checked_add(delta)?;
        let end = start + units * 2;
        if offset < end {
            return if kind == KIND_NONE { None } else { Some(line) };
        }
        start = end;
        // Skip the rest of the entry (end line, columns): up to the next byte with bit 7 set.
        while table.get(pos).is_some_and(|b| b & 0x80 == 0) {
            pos += 1;
        }
    }
    None
}

/// Reads an unsigned varint at `*pos` (6-bit chunks, least significant first, bit 6 set on
/// every chunk but the last), advancing `*pos` past it. None if it is truncated, runs into the
/// next entry's first byte, or does not fit in 32 bits.
fn read_varint(table: &[u8], pos: &mut usize) -> Option<u32> {
    let mut value: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *table.get(*pos)?;
        if byte & 0x80 != 0 {
            return None;
        }
        *pos += 1;
        value |= u64::from(byte & 0x3f) << shift;
        if value > u64::from(u32::MAX) {
            return None;
        }
        if byte & 0x40 == 0 {
            return u32::try_from(value).ok();
        }
        shift += 6;
        if shift >= 32 {
            return None;
        }
    }
}

/// Reads a signed varint: an unsigned varint holding the magnitude shifted left by one, with the
/// sign in bit 0.
fn read_svarint(table: &[u8], pos: &mut usize) -> Option<i32> {
    let raw = read_varint(table, pos)?;
    // `raw >> 1` is below 2^31, so it always fits.
    let magnitude = i32::try_from(raw >> 1).ok()?;
    Some(if raw & 1 != 0 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that every offset of every `(start, end, line)` range, as given by CPython's
    /// `co_lines()`, decodes to that line, and that the offset just past the last range has none.
    fn assert_ranges(format: LineTableFormat, table: &[u8], first_line: i32, ranges: &[(u32, u32, Option<i32>)]) {
        let mut expected_start = 0;
        for &(start, end, line) in ranges {
            assert_eq!(start, expected_start, "ranges must be contiguous");
            for offset in start..end {
                assert_eq!(line_at(format, table, first_line, offset), line, "offset {offset}");
            }
            expected_start = end;
        }
        assert_eq!(
            line_at(format, table, first_line, expected_start),
            None,
            "offset past the table"
        );
        assert_eq!(line_at(format, table, first_line, u32::MAX), None);
    }

    /// Asserts the 3.9 lines given by `dis.findlinestarts` (offset where each line starts) for every
    /// offset below `code_len`.
    fn assert_starts(table: &[u8], first_line: i32, starts: &[(u32, i32)], code_len: u32) {
        for offset in 0..code_len {
            let expected = starts
                .iter()
                .take_while(|(start, _)| *start <= offset)
                .last()
                .map(|&(_, line)| line);
            let expected = expected.unwrap_or(first_line);
            assert_eq!(
                line_at(LineTableFormat::Lnotab, table, first_line, offset),
                Some(expected),
                "offset {offset}"
            );
        }
    }

    #[test]
    fn formats_by_version() {
        assert_eq!(LineTableFormat::for_version(3, 8), None);
        assert_eq!(LineTableFormat::for_version(2, 7), None);
        assert_eq!(LineTableFormat::for_version(3, 9), Some(LineTableFormat::Lnotab));
        assert_eq!(LineTableFormat::for_version(3, 10), Some(LineTableFormat::Linetable310));
        for minor in 11..=14 {
            assert_eq!(LineTableFormat::for_version(3, minor), Some(LineTableFormat::Locations));
        }
        assert_eq!(LineTableFormat::for_version(3, 15), None);
        assert_eq!(LineTableFormat::for_version(4, 0), None);
    }

    // ---- 3.9: co_lnotab ----

    /// The example of `lnotab_notes.txt`: offsets 0, 6, 50, 350, 361 start lines 1, 2, 7, 207,
    /// 208. Counting from line 0, the (300, 200) step is written as 255, 0, 45, 127, 0, 73.
    #[test]
    fn lnotab_documented_example() {
        let table = [0, 1, 6, 1, 44, 5, 255, 0, 45, 127, 0, 73, 11, 1];
        let at = |offset| line_at(LineTableFormat::Lnotab, &table, 0, offset);
        assert_eq!(at(0), Some(1));
        assert_eq!(at(5), Some(1));
        assert_eq!(at(6), Some(2));
        assert_eq!(at(49), Some(2));
        assert_eq!(at(50), Some(7));
        // Offset 305 is past the (255, 0) pair but before the 45 that completes the 300 step.
        assert_eq!(at(305), Some(7));
        assert_eq!(at(349), Some(7));
        assert_eq!(at(350), Some(207));
        assert_eq!(at(360), Some(207));
        assert_eq!(at(361), Some(208));
        // The last line runs to the end of the code, which co_lnotab does not know.
        assert_eq!(at(10_000), Some(208));
    }

    #[test]
    fn lnotab_negative_and_split_deltas() {
        // As 3.9's compiler writes them, from line 300: +2 at 4, -3 at 8 (0xfd), -200 at 12 split
        // as (4, -128), (0, -72), +300 at 20 split as (8, 127), (0, 127), (0, 46).
        let table = [4, 2, 4, 0xfd, 4, 0x80, 0, 0xb8, 8, 127, 0, 127, 0, 46];
        let at = |offset| line_at(LineTableFormat::Lnotab, &table, 300, offset);
        assert_eq!(at(0), Some(300));
        assert_eq!(at(3), Some(300));
        assert_eq!(at(4), Some(302));
        assert_eq!(at(8), Some(299));
        assert_eq!(at(11), Some(299));
        assert_eq!(at(12), Some(99));
        assert_eq!(at(19), Some(99));
        assert_eq!(at(20), Some(399));
        assert_eq!(at(22), Some(399));
    }

    #[test]
    fn lnotab_empty_and_malformed() {
        assert_eq!(line_at(LineTableFormat::Lnotab, &[], 7, 0), Some(7));
        assert_eq!(line_at(LineTableFormat::Lnotab, &[], 7, 100), Some(7));
        assert_eq!(line_at(LineTableFormat::Lnotab, &[2, 1, 2], 7, 0), None);
        // Overflowing the line number is malformed too.
        assert_eq!(line_at(LineTableFormat::Lnotab, &[0, 1], i32::MAX, 0), None);
    }

    // ---- 3.10: co_linetable ----

    #[test]
    fn linetable310_basic() {
        // From line 5: 6 bytes on line 6, 4 bytes on line 5, 2 bytes with no line, 8 on line 7.
        let table = [6, 1, 4, 0xff, 2, 0x80, 8, 2];
        let at = |offset| line_at(LineTableFormat::Linetable310, &table, 5, offset);
        for offset in 0..6 {
            assert_eq!(at(offset), Some(6));
        }
        for offset in 6..10 {
            assert_eq!(at(offset), Some(5));
        }
        assert_eq!(at(10), None);
        assert_eq!(at(11), None);
        // -128 did not move the running line: 5 + 2.
        for offset in 12..20 {
            assert_eq!(at(offset), Some(7));
        }
        assert_eq!(at(20), None);
        assert_eq!(at(u32::MAX), None);
    }

    #[test]
    fn linetable310_split_entries() {
        // As 3.10's compiler writes them: a line delta of +300 is (0, 127), (0, 127), then the
        // bytes with the remaining 46; 600 bytes on one line are (254, d), (254, 0), (92, 0);
        // -200 is (0, -127) then (bytes, -73).
        let table = [
            0, 127, 0, 127, 254, 46, 254, 0, 92, 0, 0, 0x81, 10, 0xb7, 254, 0x80, 6, 0x80, 2, 1,
        ];
        let at = |offset| line_at(LineTableFormat::Linetable310, &table, 1, offset);
        assert_eq!(at(0), Some(301));
        assert_eq!(at(253), Some(301));
        assert_eq!(at(254), Some(301));
        assert_eq!(at(599), Some(301));
        assert_eq!(at(600), Some(101));
        assert_eq!(at(609), Some(101));
        // 260 bytes with no line, split as (254, -128), (6, -128).
        assert_eq!(at(610), None);
        assert_eq!(at(869), None);
        assert_eq!(at(870), Some(102));
        assert_eq!(at(871), Some(102));
        assert_eq!(at(872), None);
    }

    #[test]
    fn linetable310_empty_and_malformed() {
        assert_eq!(line_at(LineTableFormat::Linetable310, &[], 1, 0), None);
        assert_eq!(line_at(LineTableFormat::Linetable310, &[2, 1, 2], 1, 0), None);
        assert_eq!(line_at(LineTableFormat::Linetable310, &[0, 1, 0, 1], 1, 0), None);
        assert_eq!(line_at(LineTableFormat::Linetable310, &[2, 1], i32::MAX, 0), None);
    }

    // ---- 3.11+: location table ----

    #[test]
    fn locations_hand_built() {
        // From line 100:
        // - short form (kind 0), 1 unit: line 100, offsets 0-1;
        // - one-line form +2 (kind 12), 2 units: line 102, offsets 2-5;
        // - no location (kind 15), 1 unit: offsets 6-7;
        // - no columns (kind 13) with svarint -5 (raw 11), 3 units: line 97, offsets 8-13;
        // - long form (kind 14) with svarint +200 (raw 400 = 0x10 | 0x40, 6), end line 0,
        //   columns 1 and 5, 8 units: line 297, offsets 14-29.
        let table = [
            0x80, 0x05, 0xe1, 0x01, 0x02, 0xf8, 0xea, 0x0b, 0xf7, 0x50, 0x06, 0x00, 0x01, 0x05,
        ];
        let ranges = [
            (0, 2, Some(100)),
            (2, 6, Some(102)),
            (6, 8, None),
            (8, 14, Some(97)),
            (14, 30, Some(297)),
        ];
        assert_ranges(LineTableFormat::Locations, &table, 100, &ranges);
    }

    #[test]
    fn locations_malformed() {
        let at = |table: &[u8], offset| line_at(LineTableFormat::Locations, table, 1, offset);
        assert_eq!(at(&[], 0), None);
        // First byte without bit 7.
        assert_eq!(at(&[0x05, 0x80], 0), None);
        // Varint cut short by the end of the table, or by the next entry.
        assert_eq!(at(&[0xe8], 0), None);
        assert_eq!(at(&[0xe8, 0x45], 0), None);
        assert_eq!(at(&[0xe8, 0x45, 0x80], 0), None);
        // Varint too long for 32 bits.
        assert_eq!(at(&[0xe8, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x01], 0), None);
        // Line overflow.
        assert_eq!(
            line_at(LineTableFormat::Locations, &[0xd8, 0x00, 0x00], i32::MAX, 0),
            None
        );
        // A truncated table still answers for the entries it has.
        assert_eq!(at(&[0x81, 0x05, 0xe8], 0), Some(1));
        assert_eq!(at(&[0x81, 0x05, 0xe8], 3), Some(1));
        assert_eq!(at(&[0x81, 0x05, 0xe8], 4), None);
    }

    // ---- Real tables ----
    //
    // Printed by CPython itself from these functions (numbers are source lines; `big` is built
    // with `exec`):
    //
    //  8 def f_loop(n):           21 def f_try(x):                    1 def big(n):
    //  9     total = 0            22     try:                         2     x = 0
    // 10     for i in range(n):   23         return 1 / x                   (300 blank lines)
    // 11                          24     except ZeroDivisionError:  303     x += n
    // 12                          25         return None            304     x += 0
    // 13         if i % 3 == 0:   26     finally:                   ...     ...
    // 14             total += i   27         x = (x +               308     x += 4
    // 15         else:            28              1)                309     for i in range(n):
    // 16             total -= 1                                     310         x += i
    // 17     while total > 100:                                     311     return x
    // 18         total //= 2
    // 19     return total
    //
    // 3.9 expectations are `dis.findlinestarts` (the offset where each line starts); 3.10 and later
    // are `co_lines()`, the (start, end, line) byte ranges that CPython decodes from the same table.

    /// CPython 3.9.18, `f_try`: `co_firstlineno` 21, 80 bytes of code.
    #[test]
    fn cpython_39_f_try() {
        let table = [
            0x00, 0x01, 0x04, 0x01, 0x0a, 0x04, 0x02, 0x01, 0x02, 0xff, 0x04, 0xfc, 0x02, 0x01, 0x0c, 0x01, 0x04, 0x02,
            0x02, 0x01, 0x02, 0xff, 0x04, 0xfe, 0x08, 0x02, 0x02, 0x01, 0x02, 0xff, 0x08, 0x01, 0x02, 0xff,
        ];
        let starts = [
            (0, 22),
            (4, 23),
            (14, 27),
            (16, 28),
            (18, 27),
            (22, 23),
            (24, 24),
            (36, 25),
            (40, 27),
            (42, 28),
            (44, 27),
            (48, 25),
            (56, 27),
            (58, 28),
            (60, 27),
            (68, 28),
            (70, 27),
        ];
        assert_starts(&table, 21, &starts, 80);
    }

    /// CPython 3.9.18, `big`: `co_firstlineno` 1, 78 bytes of code.
    #[test]
    fn cpython_39_big() {
        let table = [
            0x00, 0x01, 0x04, 0x7f, 0x00, 0x7f, 0x00, 0x2f, 0x08, 0x01, 0x08, 0x01, 0x08, 0x01, 0x08, 0x01, 0x08, 0x01,
            0x08, 0x01, 0x0c, 0x01, 0x0a, 0x01,
        ];
        let starts = [
            (0, 2),
            (4, 303),
            (12, 304),
            (20, 305),
            (28, 306),
            (36, 307),
            (44, 308),
            (52, 309),
            (64, 310),
            (74, 311),
        ];
        assert_starts(&table, 1, &starts, 78);
    }

    /// CPython 3.10.13, `f_loop`: `co_firstlineno` 8, 76 bytes of code.
    #[test]
    fn cpython_310_f_loop() {
        let table = [
            0x04, 0x01, 0x0c, 0x01, 0x0c, 0x03, 0x0a, 0x01, 0x0a, 0x02, 0x08, 0x01, 0x08, 0x01, 0x08, 0xff, 0x04, 0x02,
        ];
        let ranges = [
            (0, 4, Some(9)),
            (4, 16, Some(10)),
            (16, 28, Some(13)),
            (28, 38, Some(14)),
            (38, 48, Some(16)),
            (48, 56, Some(17)),
            (56, 64, Some(18)),
            (64, 72, Some(17)),
            (72, 76, Some(19)),
        ];
        assert_ranges(LineTableFormat::Linetable310, &table, 8, &ranges);
    }

    /// CPython 3.10.13, `big`: `co_firstlineno` 1, 78 bytes of code.
    #[test]
    fn cpython_310_big() {
        let table = [
            0x04, 0x01, 0x00, 0x7f, 0x00, 0x7f, 0x08, 0x2f, 0x08, 0x01, 0x08, 0x01, 0x08, 0x01, 0x08, 0x01, 0x08, 0x01,
            0x0c, 0x01, 0x0a, 0x01, 0x04, 0x01,
        ];
        let ranges = [
            (0, 4, Some(2)),
            (4, 12, Some(303)),
            (12, 20, Some(304)),
            (20, 28, Some(305)),
            (28, 36, Some(306)),
            (36, 44, Some(307)),
            (44, 52, Some(308)),
            (52, 64, Some(309)),
            (64, 74, Some(310)),
            (74, 78, Some(311)),
        ];
        assert_ranges(LineTableFormat::Linetable310, &table, 1, &ranges);
    }

    /// CPython 3.11.7, `f_loop`: `co_firstlineno` 8, 120 bytes of code.
    #[test]
    fn cpython_311_f_loop() {
        let table = [
            0x80, 0x00, 0xd8, 0x0c, 0x0d, 0x80, 0x45, 0xdd, 0x0d, 0x12, 0x90, 0x31, 0x89, 0x58, 0x8c, 0x58, 0xf0, 0x00,
            0x06, 0x05, 0x17, 0xf0, 0x00, 0x06, 0x05, 0x17, 0x88, 0x01, 0xf0, 0x06, 0x00, 0x0c, 0x0d, 0x88, 0x71, 0x89,
            0x35, 0x90, 0x41, 0x8a, 0x3a, 0x88, 0x3a, 0xd8, 0x0c, 0x11, 0x90, 0x51, 0x89, 0x4a, 0x88, 0x45, 0x88, 0x45,
            0xe0, 0x0c, 0x11, 0x90, 0x51, 0x89, 0x4a, 0x88, 0x45, 0x88, 0x45, 0xd8, 0x0a, 0x0f, 0x90, 0x23, 0x8a, 0x2b,
            0x88, 0x2b, 0xd8, 0x08, 0x0d, 0x90, 0x21, 0x89, 0x0b, 0x88, 0x05, 0xf0, 0x03, 0x00, 0x0b, 0x10, 0x90, 0x23,
            0x8a, 0x2b, 0x88, 0x2b, 0xe0, 0x0b, 0x10, 0x80, 0x4c,
        ];
        let ranges = [
            (0, 2, Some(8)),
            (2, 4, Some(9)),
            (4, 6, Some(9)),
            (6, 18, Some(10)),
            (18, 20, Some(10)),
            (20, 24, Some(10)),
            (24, 34, Some(10)),
            (34, 36, Some(10)),
            (36, 38, Some(10)),
            (38, 40, Some(10)),
            (40, 42, Some(13)),
            (42, 44, Some(13)),
            (44, 48, Some(13)),
            (48, 50, Some(13)),
            (50, 56, Some(13)),
            (56, 58, Some(13)),
            (58, 60, Some(14)),
            (60, 62, Some(14)),
            (62, 66, Some(14)),
            (66, 68, Some(14)),
            (68, 70, Some(14)),
            (70, 72, Some(16)),
            (72, 74, Some(16)),
            (74, 78, Some(16)),
            (78, 80, Some(16)),
            (80, 82, Some(16)),
            (82, 84, Some(17)),
            (84, 86, Some(17)),
            (86, 92, Some(17)),
            (92, 94, Some(17)),
            (94, 96, Some(18)),
            (96, 98, Some(18)),
            (98, 102, Some(18)),
            (102, 104, Some(18)),
            (104, 106, Some(17)),
            (106, 108, Some(17)),
            (108, 114, Some(17)),
            (114, 116, Some(17)),
            (116, 118, Some(19)),
            (118, 120, Some(19)),
        ];
        assert_ranges(LineTableFormat::Locations, &table, 8, &ranges);
    }

    /// CPython 3.11.7, `f_try`: `co_firstlineno` 21, 88 bytes of code.
    #[test]
    fn cpython_311_f_try() {
        let table = [
            0x80, 0x00, 0xf0, 0x02, 0x06, 0x05, 0x10, 0xd8, 0x0f, 0x10, 0x90, 0x31, 0x89, 0x75, 0xf0, 0x08, 0x00, 0x0e,
            0x0f, 0xd8, 0x0d, 0x0e, 0xf1, 0x03, 0x01, 0x0e, 0x0f, 0x88, 0x01, 0x88, 0x01, 0xf8, 0xf5, 0x07, 0x00, 0x0c,
            0x1d, 0xf0, 0x00, 0x01, 0x05, 0x14, 0xf0, 0x00, 0x01, 0x05, 0x14, 0xf0, 0x00, 0x01, 0x05, 0x14, 0xd8, 0x0f,
            0x13, 0xe0, 0x0d, 0x0e, 0xd8, 0x0d, 0x0e, 0xf1, 0x03, 0x01, 0x0e, 0x0f, 0x88, 0x01, 0x88, 0x01, 0x88, 0x01,
            0xf0, 0x07, 0x01, 0x05, 0x14, 0xf8, 0xf8, 0xf8, 0xf8, 0xf0, 0x06, 0x00, 0x0e, 0x0f, 0xd8, 0x0d, 0x0e, 0xf1,
            0x03, 0x01, 0x0e, 0x0f, 0x88, 0x01, 0xf0, 0x00, 0x01, 0x09, 0x10, 0xf0, 0x00, 0x01, 0x09, 0x10, 0xf0, 0x00,
            0x01, 0x09, 0x10, 0xf0, 0x00, 0x01, 0x09, 0x10,
        ];
        let ranges = [
            (0, 2, Some(21)),
            (2, 4, Some(22)),
            (4, 6, Some(23)),
            (6, 8, Some(23)),
            (8, 12, Some(23)),
            (12, 14, Some(27)),
            (14, 16, Some(28)),
            (16, 20, Some(27)),
            (20, 22, Some(27)),
            (22, 24, Some(27)),
            (24, 26, None),
            (26, 38, Some(24)),
            (38, 40, Some(24)),
            (40, 42, Some(24)),
            (42, 44, Some(24)),
            (44, 46, Some(25)),
            (46, 48, Some(27)),
            (48, 50, Some(28)),
            (50, 54, Some(27)),
            (54, 56, Some(27)),
            (56, 58, Some(27)),
            (58, 60, Some(27)),
            (60, 62, Some(24)),
            (62, 64, None),
            (64, 66, None),
            (66, 68, None),
            (68, 70, None),
            (70, 72, Some(27)),
            (72, 74, Some(28)),
            (74, 78, Some(27)),
            (78, 80, Some(27)),
            (80, 82, Some(27)),
            (82, 84, Some(27)),
            (84, 86, Some(27)),
            (86, 88, Some(27)),
        ];
        assert_ranges(LineTableFormat::Locations, &table, 21, &ranges);
    }

    /// CPython 3.11.7, `big`: `co_firstlineno` 1, 116 bytes of code.
    #[test]
    fn cpython_311_big() {
        let table = [
            0x80, 0x00, 0xd8, 0x08, 0x09, 0x80, 0x41, 0xf0, 0x5a, 0x09, 0x00, 0x05, 0x06, 0x88, 0x11, 0x81, 0x46, 0x80,
            0x41, 0xd8, 0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80, 0x41, 0xd8, 0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80,
            0x41, 0xd8, 0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80, 0x41, 0xd8, 0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80,
            0x41, 0xd8, 0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80, 0x41, 0xdd, 0x0d, 0x12, 0x90, 0x31, 0x89, 0x58, 0x8c,
            0x58, 0xf0, 0x00, 0x01, 0x05, 0x0f, 0xf0, 0x00, 0x01, 0x05, 0x0f, 0x88, 0x01, 0xd8, 0x08, 0x09, 0x88, 0x51,
            0x89, 0x06, 0x88, 0x01, 0x88, 0x01, 0xd8, 0x0b, 0x0c, 0x80, 0x48,
        ];
        let ranges = [
            (0, 2, Some(1)),
            (2, 4, Some(2)),
            (4, 6, Some(2)),
            (6, 8, Some(303)),
            (8, 10, Some(303)),
            (10, 14, Some(303)),
            (14, 16, Some(303)),
            (16, 18, Some(304)),
            (18, 20, Some(304)),
            (20, 24, Some(304)),
            (24, 26, Some(304)),
            (26, 28, Some(305)),
            (28, 30, Some(305)),
            (30, 34, Some(305)),
            (34, 36, Some(305)),
            (36, 38, Some(306)),
            (38, 40, Some(306)),
            (40, 44, Some(306)),
            (44, 46, Some(306)),
            (46, 48, Some(307)),
            (48, 50, Some(307)),
            (50, 54, Some(307)),
            (54, 56, Some(307)),
            (56, 58, Some(308)),
            (58, 60, Some(308)),
            (60, 64, Some(308)),
            (64, 66, Some(308)),
            (66, 78, Some(309)),
            (78, 80, Some(309)),
            (80, 84, Some(309)),
            (84, 94, Some(309)),
            (94, 96, Some(309)),
            (96, 98, Some(309)),
            (98, 100, Some(309)),
            (100, 102, Some(310)),
            (102, 104, Some(310)),
            (104, 108, Some(310)),
            (108, 110, Some(310)),
            (110, 112, Some(310)),
            (112, 114, Some(311)),
            (114, 116, Some(311)),
        ];
        assert_ranges(LineTableFormat::Locations, &table, 1, &ranges);
    }

    /// CPython 3.12.1, `f_loop`: `co_firstlineno` 8, 112 bytes of code.
    #[test]
    fn cpython_312_f_loop() {
        let table = [
            0x80, 0x00, 0xd8, 0x0c, 0x0d, 0x80, 0x45, 0xdc, 0x0d, 0x12, 0x90, 0x31, 0x8b, 0x58, 0xf2, 0x00, 0x06, 0x05,
            0x17, 0x88, 0x01, 0xf0, 0x06, 0x00, 0x0c, 0x0d, 0x88, 0x71, 0x89, 0x35, 0x90, 0x41, 0x8a, 0x3a, 0xd8, 0x0c,
            0x11, 0x90, 0x51, 0x89, 0x4a, 0x89, 0x45, 0xe0, 0x0c, 0x11, 0x90, 0x51, 0x89, 0x4a, 0x89, 0x45, 0xf0, 0x0d,
            0x06, 0x05, 0x17, 0xf0, 0x0e, 0x00, 0x0b, 0x10, 0x90, 0x23, 0x8a, 0x2b, 0xd8, 0x08, 0x0d, 0x90, 0x21, 0x89,
            0x0b, 0x88, 0x05, 0xf0, 0x03, 0x00, 0x0b, 0x10, 0x90, 0x23, 0x8b, 0x2b, 0xe0, 0x0b, 0x10, 0x80, 0x4c,
        ];
        let ranges = [
            (0, 2, Some(8)),
            (2, 6, Some(9)),
            (6, 34, Some(10)),
            (34, 50, Some(13)),
            (50, 62, Some(14)),
            (62, 74, Some(16)),
            (74, 76, Some(10)),
            (76, 86, Some(17)),
            (86, 96, Some(18)),
            (96, 108, Some(17)),
            (108, 112, Some(19)),
        ];
        assert_ranges(LineTableFormat::Locations, &table, 8, &ranges);
    }

    /// CPython 3.13.0, `f_try`: `co_firstlineno` 21, 86 bytes of code.
    #[test]
    fn cpython_313_f_try() {
        let table = [
            0x80, 0x00, 0xf0, 0x02, 0x06, 0x05, 0x10, 0xd8, 0x0f, 0x10, 0x90, 0x31, 0x89, 0x75, 0xf0, 0x08, 0x00, 0x0e,
            0x0f, 0xd8, 0x0d, 0x0e, 0xf1, 0x03, 0x01, 0x0e, 0x0f, 0x89, 0x01, 0xf8, 0xf4, 0x07, 0x00, 0x0c, 0x1d, 0xf3,
            0x00, 0x01, 0x05, 0x14, 0xd8, 0x0f, 0x13, 0xe0, 0x0d, 0x0e, 0xd8, 0x0d, 0x0e, 0xf1, 0x03, 0x01, 0x0e, 0x0f,
            0x89, 0x01, 0xf0, 0x07, 0x01, 0x05, 0x14, 0xfb, 0xf0, 0x06, 0x00, 0x0e, 0x0f, 0xd8, 0x0d, 0x0e, 0xf1, 0x03,
            0x01, 0x0e, 0x0f, 0x89, 0x01, 0xfa,
        ];
        let ranges = [
            (0, 2, Some(21)),
            (2, 4, Some(22)),
            (4, 12, Some(23)),
            (12, 14, Some(27)),
            (14, 16, Some(28)),
            (16, 24, Some(27)),
            (24, 26, None),
            (26, 44, Some(24)),
            (44, 46, Some(25)),
            (46, 48, Some(27)),
            (48, 50, Some(28)),
            (50, 58, Some(27)),
            (58, 60, Some(24)),
            (60, 68, None),
            (68, 70, Some(27)),
            (70, 72, Some(28)),
            (72, 80, Some(27)),
            (80, 86, None),
        ];
        assert_ranges(LineTableFormat::Locations, &table, 21, &ranges);
    }

    /// CPython 3.13.0, `big`: `co_firstlineno` 1, 112 bytes of code.
    #[test]
    fn cpython_313_big() {
        let table = [
            0x80, 0x00, 0xd8, 0x08, 0x09, 0x80, 0x41, 0xf0, 0x5a, 0x09, 0x00, 0x05, 0x06, 0x81, 0x46, 0x80, 0x41, 0xd8,
            0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80, 0x41, 0xd8, 0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80, 0x41, 0xd8,
            0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80, 0x41, 0xd8, 0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80, 0x41, 0xd8,
            0x04, 0x05, 0x88, 0x11, 0x81, 0x46, 0x80, 0x41, 0xdc, 0x0d, 0x12, 0x90, 0x31, 0x8e, 0x58, 0x88, 0x01, 0xd8,
            0x08, 0x09, 0x89, 0x06, 0x8a, 0x01, 0xf1, 0x03, 0x00, 0x0e, 0x16, 0xe0, 0x0b, 0x0c, 0x80, 0x48,
        ];
        let ranges = [
            (0, 2, Some(1)),
            (2, 6, Some(2)),
            (6, 14, Some(303)),
            (14, 24, Some(304)),
            (24, 34, Some(305)),
            (34, 44, Some(306)),
            (44, 54, Some(307)),
            (54, 64, Some(308)),
            (64, 92, Some(309)),
            (92, 104, Some(310)),
            (104, 108, Some(309)),
            (108, 112, Some(311)),
        ];
        assert_ranges(LineTableFormat::Locations, &table, 1, &ranges);
    }

    /// CPython 3.10.13, a standard-library method whose first instruction has no line (-128): the
    /// running line is left alone by it, so the next pair's delta 0 still means `co_firstlineno`.
    #[test]
    fn cpython_310_no_line() {
        let table = [0x02, 0x80, 0x04, 0x00, 0x02, 0x01, 0x12, 0xff];
        let ranges = [(0, 2, None), (2, 6, Some(10)), (6, 8, Some(11)), (8, 26, Some(10))];
        assert_ranges(LineTableFormat::Linetable310, &table, 10, &ranges);
    }
}
