//! Decoding a block of events: most of the work of every pass over a trace.
//!
//! An event is a few fixed bytes and up to nine LEB128 numbers. Read one
//! number after another, each must wait for the one before it to know where
//! it starts, and a block's decoding is a long chain of such waits. So,
//! away from the payload's end, an event is read in two steps that do not
//! wait on each other: first where each of its numbers ends, all at once,
//! from a map of the payload's last bytes (a byte whose high bit is clear
//! ends a number) made for the whole block in one pass; then every number's
//! value from its own load. An event the fast way cannot read whole (near
//! the payload's end, a number longer than eight bytes, an unknown code) is
//! read again the careful way, which names what is wrong with it.

use crate::format::*;
use crate::problem::Malformed;
use crate::varint::Cursor;
use cudatrace_events::{Api, Event, Kind, Op};

/// The bytes the fast way reads at and after an event's start: its fixed
/// bytes (four at most), its numbers (eight bytes each at most) and the
/// eight a number's load reads from its start.
const FAST_SPAN: usize = 128;

/// The running values each event's deltas apply to.
#[derive(Clone, Copy)]
struct Running {
    seq: u64,
    time: u64,
    tid: u32,
    address: u64,
}

/// Decodes the events of a block payload (after its tag).
pub(crate) fn decode_events(
    cursor: &mut Cursor,
    pid_of: &dyn Fn(u32) -> Option<u32>,
    packed: bool,
) -> Result<Record, Malformed> {
    decode_events_in(cursor, pid_of, packed, Gathering::Fastest)
}

/// How a number's bits are gathered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gathering {
    /// With the machine's own instruction where it has one.
    Fastest,
    /// With shifts and masks alone (what machines without BMI2 run).
    #[cfg_attr(not(test), allow(dead_code))]
    Portable,
}

fn decode_events_in(
    cursor: &mut Cursor,
    pid_of: &dyn Fn(u32) -> Option<u32>,
    packed: bool,
    gathering: Gathering,
) -> Result<Record, Malformed> {
    let process = cursor.get_u32()?;
    let pid = pid_of(process).ok_or(Malformed::NoProcessRecord { process })?;
    let count = cursor.get()?;
    // An event takes at least five bytes: flags, op, api, time, address, size.
    if count > (cursor.remaining() / 5) as u64 {
        return Err(Malformed::MoreEventsThanBytes);
    }
    let mut events = Vec::with_capacity(count as usize);
    if count == 0 {
        return Ok(Record::Events { process, events });
    }
    let base_seq = cursor.get()?;
    let base_time = cursor.get()?;
    let running = Running {
        seq: base_seq.wrapping_sub(1),
        time: base_time,
        tid: 0,
        address: 0,
    };
    let block = Block {
        bytes: cursor.rest(),
        pid,
        packed,
    };
    let read = match gathering {
        Gathering::Fastest => block.decode_with_fastest(count as usize, running, &mut events)?,
        Gathering::Portable => block.decode::<false>(count as usize, running, &mut events)?,
    };
    cursor.skip(read);
    Ok(Record::Events { process, events })
}

/// Whether the machine has BMI2's `pext` and runs it in hardware: AMD's
/// cores before Zen 3 (family 0x19) report BMI2 but run `pext` in
/// microcode, slower than the shifts it replaces.
#[cfg(target_arch = "x86_64")]
fn fast_pext() -> bool {
    static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAST.get_or_init(|| {
        if !std::arch::is_x86_feature_detected!("bmi2") {
            return false;
        }
        // CPUID leaves 0 and 1 exist on every x86-64 processor.
        let (vendor, signature) = (std::arch::x86_64::__cpuid(0), std::arch::x86_64::__cpuid(1));
        let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        let base_family = (signature.eax >> 8) & 0xf;
        let family = if base_family == 0xf {
            base_family + ((signature.eax >> 20) & 0xff)
        } else {
            base_family
        };
        !amd || family >= 0x19
    })
}

/// A block's event bytes, and what every event of it shares.
struct Block<'a> {
    bytes: &'a [u8],
    pid: u32,
    packed: bool,
}

impl Block<'_> {
    /// Decodes `count` events onto `events`, with the machine's bit-gathering
    /// instruction where it has one; returns the bytes read.
    fn decode_with_fastest(&self, count: usize, running: Running, events: &mut Vec<Event>) -> Result<usize, Malformed> {
        #[cfg(target_arch = "x86_64")]
        if fast_pext() {
            // SAFETY: the machine has BMI2, which is all the function asks for.
            return unsafe { self.decode_bmi2(count, running, events) };
        }
        self.decode::<false>(count, running, events)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "bmi2")]
    unsafe fn decode_bmi2(&self, count: usize, running: Running, events: &mut Vec<Event>) -> Result<usize, Malformed> {
        self.decode::<true>(count, running, events)
    }

    /// The loop: each event the fast way where it can be, else carefully.
    /// `PEXT`: numbers' bits are gathered with BMI2's `pext` (only where the
    /// caller runs with that feature).
    #[inline(always)]
    fn decode<const PEXT: bool>(
        &self,
        count: usize,
        mut running: Running,
        events: &mut Vec<Event>,
    ) -> Result<usize, Malformed> {
        let ends = number_ends(self.bytes);
        let mut at = 0;
        for _ in 0..count {
            if let Some(next) = fast_event::<PEXT>(self, &ends, at, &mut running, events) {
                at = next;
                continue;
            }
            let mut careful = Cursor::new(&self.bytes[at..]);
            let event = careful_event(&mut careful, &mut running, self.pid, self.packed)?;
            events.push(event);
            at += careful.position();
        }
        Ok(at)
    }
}

/// For each byte of `bytes`, one bit: set where the byte's high bit is
/// clear (it ends a number), bit `i % 8` of byte `i / 8`. Eight zero bytes
/// follow, so that a 64-bit read near the end stays inside.
fn number_ends(bytes: &[u8]) -> Vec<u8> {
    let words = bytes.chunks_exact(8);
    let mut last = [0x80u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    let mut ends = vec![0u8; bytes.len() / 8 + 9];
    for (end, word) in ends.iter_mut().zip(words.chain([&last[..]])) {
        *end = gather_high_bits(!u64::from_le_bytes(word.try_into().expect("eight bytes")));
    }
    ends
}

/// The high bit of each byte of `word`, bit `i` from byte `i`.
#[inline(always)]
fn gather_high_bits(word: u64) -> u8 {
    (((word >> 7) & 0x0101_0101_0101_0101).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8
}

/// The number-end bits of the 57 bytes from `at` on, bit 0 for byte `at`.
#[inline(always)]
fn ends_from(ends: &[u8], at: usize) -> u64 {
    let word = u64::from_le_bytes(ends[at / 8..at / 8 + 8].try_into().expect("eight bytes"));
    word >> (at % 8)
}

/// The value of the LEB128 number of `len` bytes (1 to 8) at `at`.
#[inline(always)]
fn value_at<const PEXT: bool>(bytes: &[u8], at: usize, len: u32) -> u64 {
    let word = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
    #[cfg(target_arch = "x86_64")]
    if PEXT {
        // SAFETY: `PEXT` is set only in code compiled for, and run on,
        // machines with BMI2.
        return unsafe { std::arch::x86_64::_pext_u64(word, 0x7f7f_7f7f_7f7f_7f7f >> (64 - 8 * len)) };
    }
    let mut x = word & (0x7f7f_7f7f_7f7f_7f7f >> (64 - 8 * len));
    x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

fn unzigzag(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

/// The numbers of one event, found from the end bits: each is read from
/// where the one before it ended, found by clearing the lowest end bit,
/// which no load waits for.
struct Numbers<'a> {
    bytes: &'a [u8],
    /// End bits from `base` on, those of numbers read already cleared.
    ends: u64,
    base: usize,
    /// Where the next number starts, relative to `base`.
    pos: u32,
}

impl Numbers<'_> {
    /// The next number, or `None` if it is longer than eight bytes or runs
    /// past the bits at hand.
    #[inline(always)]
    fn next<const PEXT: bool>(&mut self) -> Option<u64> {
        let end = self.ends.trailing_zeros();
        let len = end + 1 - self.pos;
        if end >= 56 || len > 8 {
            return None;
        }
        let value = value_at::<PEXT>(self.bytes, self.base + self.pos as usize, len);
        self.ends &= self.ends - 1;
        self.pos = end + 1;
        Some(value)
    }

    /// A raw byte at the current place (the device): whatever its high
    /// bit, it ends no number.
    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        if self.pos >= 56 {
            return None;
        }
        let value = self.bytes[self.base + self.pos as usize];
        self.ends &= !((2u64 << self.pos) - 1);
        self.pos += 1;
        Some(value)
    }
}

/// One event read the fast way from `at` and pushed onto `events`, the
/// running values moved past it; returns where the next event starts.
/// `None`, with nothing changed, where it must be read carefully.
#[inline(always)]
fn fast_event<const PEXT: bool>(
    block: &Block,
    ends: &[u8],
    at: usize,
    running: &mut Running,
    events: &mut Vec<Event>,
) -> Option<usize> {
    let (bytes, pid, packed) = (block.bytes, block.pid, block.packed);
    if bytes.len() < at + FAST_SPAN {
        return None;
    }
    let flags = bytes[at];
    let (op, kind, fixed) = if packed {
        (bytes[at + 1] & 15, bytes[at + 1] >> 4, 2)
    } else {
        (bytes[at + 1], bytes[at + 2], 3)
    };
    let op = Op::from_code(op)?;
    let kind = Kind::from_code(kind)?;
    let api = Api::from_code(bytes[at + fixed])?;
    let base = at + fixed + 1;
    let mut numbers = Numbers {
        bytes,
        ends: ends_from(ends, base),
        base,
        pos: 0,
    };
    let mut after = *running;
    after.seq = after.seq.wrapping_add(if flags & HAS_SEQ_GAP != 0 {
        numbers.next::<PEXT>()?
    } else {
        1
    });
    after.time = after.time.wrapping_add(unzigzag(numbers.next::<PEXT>()?) as u64);
    if flags & HAS_TID != 0 {
        after.tid = u32::try_from(numbers.next::<PEXT>()?).ok()?;
    }
    let device = if flags & HAS_DEVICE != 0 {
        Some(numbers.byte()?)
    } else {
        None
    };
    after.address = after.address.wrapping_add(unzigzag(numbers.next::<PEXT>()?) as u64);
    let size = numbers.next::<PEXT>()?;
    let mut optional = |flag: u8| -> Option<u64> {
        if flags & flag != 0 {
            numbers.next::<PEXT>()
        } else {
            Some(0)
        }
    };
    let (stream, arg1, arg2) = (optional(HAS_STREAM)?, optional(HAS_ARG1)?, optional(HAS_ARG2)?);
    let stack = u32::try_from(optional(HAS_STACK)?).ok()?;
    events.push(Event {
        pid,
        tid: after.tid,
        seq: after.seq,
        time_ns: after.time,
        device,
        stream,
        api,
        op,
        kind,
        address: after.address,
        size,
        arg1,
        arg2,
        stack,
    });
    *running = after;
    Some(base + numbers.pos as usize)
}

/// One event read number by number, failing with what is wrong with it.
fn careful_event(cursor: &mut Cursor, running: &mut Running, pid: u32, packed: bool) -> Result<Event, Malformed> {
    let flags = cursor.byte()?;
    let (op, kind) = if packed {
        let op_kind = cursor.byte()?;
        (op_kind & 15, op_kind >> 4)
    } else {
        (cursor.byte()?, cursor.byte()?)
    };
    let op = Op::from_code(op).ok_or(Malformed::UnknownOp)?;
    let kind = Kind::from_code(kind).ok_or(Malformed::UnknownKind)?;
    let api = Api::from_code(cursor.byte()?).ok_or(Malformed::UnknownApi)?;
    running.seq = running
        .seq
        .wrapping_add(if flags & HAS_SEQ_GAP != 0 { cursor.get()? } else { 1 });
    running.time = running.time.wrapping_add(cursor.get_signed()? as u64);
    if flags & HAS_TID != 0 {
        running.tid = cursor.get_u32()?;
    }
    let device = if flags & HAS_DEVICE != 0 {
        Some(cursor.byte()?)
    } else {
        None
    };
    running.address = running.address.wrapping_add(cursor.get_signed()? as u64);
    let size = cursor.get()?;
    let mut optional = |flag: u8| -> Result<u64, Malformed> {
        if flags & flag != 0 {
            cursor.get()
        } else {
            Ok(0)
        }
    };
    let (stream, arg1, arg2) = (optional(HAS_STREAM)?, optional(HAS_ARG1)?, optional(HAS_ARG2)?);
    let stack = u32::try_from(optional(HAS_STACK)?).map_err(|_| Malformed::StackOutOfRange)?;
    Ok(Event {
        pid,
        tid: running.tid,
        seq: running.seq,
        time_ns: running.time,
        device,
        stream,
        api,
        op,
        kind,
        address: running.address,
        size,
        arg1,
        arg2,
        stack,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::encode_events;
    use crate::synthetic::Rng;

    const PID: u32 = 4242;

    fn pid_of(process: u32) -> Option<u32> {
        (process < 4).then_some(PID)
    }

    /// A number whose width (0 to 64 bits) is drawn first, so that every
    /// LEB128 length comes up, the nine- and ten-byte ones included.
    fn any_width(rng: &mut Rng) -> u64 {
        let bits = rng.below(65);
        if bits == 0 {
            0
        } else {
            rng.next_u64() >> (64 - bits)
        }
    }

    fn random_events(rng: &mut Rng, count: usize) -> Vec<Event> {
        let mut seq = any_width(rng);
        (0..count)
            .map(|_| {
                seq = seq.wrapping_add(if rng.below(4) == 0 { any_width(rng) } else { 1 });
                Event {
                    pid: PID,
                    tid: if rng.below(3) == 0 { any_width(rng) as u32 } else { 7 },
                    seq,
                    time_ns: any_width(rng),
                    device: (rng.below(2) == 0).then(|| rng.below(256) as u8),
                    stream: if rng.below(2) == 0 { any_width(rng) } else { 0 },
                    api: Api::ALL[rng.below(Api::ALL.len() as u64) as usize],
                    op: Op::ALL[rng.below(Op::ALL.len() as u64) as usize],
                    kind: Kind::ALL[rng.below(Kind::ALL.len() as u64) as usize],
                    address: any_width(rng),
                    size: any_width(rng),
                    arg1: if rng.below(2) == 0 { any_width(rng) } else { 0 },
                    arg2: if rng.below(3) == 0 { any_width(rng) } else { 0 },
                    stack: if rng.below(2) == 0 { any_width(rng) as u32 } else { 0 },
                }
            })
            .collect()
    }

    fn decode_fast(payload: &[u8], packed: bool) -> Result<Record, Malformed> {
        decode_events(&mut Cursor::new(payload), &pid_of, packed)
    }

    /// The reference: every event read number by number.
    fn decode_carefully(payload: &[u8], packed: bool) -> Result<Record, Malformed> {
        let mut cursor = Cursor::new(payload);
        let process = cursor.get_u32()?;
        let pid = pid_of(process).ok_or(Malformed::NoProcessRecord { process })?;
        let count = cursor.get()?;
        if count > (cursor.remaining() / 5) as u64 {
            return Err(Malformed::MoreEventsThanBytes);
        }
        let mut events = Vec::new();
        if count == 0 {
            return Ok(Record::Events { process, events });
        }
        let mut running = Running {
            seq: cursor.get()?.wrapping_sub(1),
            time: cursor.get()?,
            tid: 0,
            address: 0,
        };
        for _ in 0..count {
            events.push(careful_event(&mut cursor, &mut running, pid, packed)?);
        }
        Ok(Record::Events { process, events })
    }

    #[test]
    fn events_of_every_width_read_back_as_written() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..200 {
            let count = 1 + rng.below(300) as usize;
            let events = random_events(&mut rng, count);
            let mut payload = Vec::new();
            encode_events(2, &events, &mut payload);
            let expected = Record::Events { process: 2, events };
            assert_eq!(decode_fast(&payload, false).as_ref(), Ok(&expected), "round {round}");
            let portable = decode_events_in(&mut Cursor::new(&payload), &pid_of, false, Gathering::Portable);
            assert_eq!(portable, Ok(expected), "round {round}, portable");
        }
    }

    #[test]
    fn events_away_from_the_end_are_read_the_fast_way() {
        // Without this, a fast way that never read anything would pass
        // every other test: the careful way gives the same events.
        let mut events = random_events(&mut Rng(11), 100);
        for (i, event) in events.iter_mut().enumerate() {
            (event.time_ns, event.address, event.size) = (1000 + i as u64, 0x7f00_0000_0000 + 4096 * i as u64, 512);
            (event.stream, event.arg1, event.arg2, event.stack, event.tid) = (7, 0, 0, 3, 9);
            event.seq = 100 + i as u64;
        }
        let mut payload = Vec::new();
        encode_events(1, &events, &mut payload);
        let mut cursor = Cursor::new(&payload);
        let (_, _, _, time) = (cursor.get(), cursor.get(), cursor.get(), cursor.get());
        let block = Block {
            bytes: cursor.rest(),
            pid: PID,
            packed: false,
        };
        let ends = number_ends(block.bytes);
        let mut running = Running {
            seq: events[0].seq.wrapping_sub(1),
            time: time.unwrap(),
            tid: 0,
            address: 0,
        };
        let (mut at, mut read) = (0, Vec::new());
        while let Some(next) = fast_event::<false>(&block, &ends, at, &mut running, &mut read) {
            at = next;
        }
        // Every event but those within the last FAST_SPAN bytes.
        let tail = block.bytes.len() - at;
        assert!(tail < FAST_SPAN && tail + 20 > FAST_SPAN, "{tail} bytes left");
        assert_eq!(read[..], events[..read.len()]);
        assert!(read.len() >= 90, "{} of 100 read the fast way", read.len());
    }

    #[test]
    fn the_fast_way_reads_what_it_can_and_leaves_the_rest() {
        // Short numbers (the fast way), then one of ten bytes (the careful
        // way), then short ones again: the running values carry across.
        let mut events = random_events(&mut Rng(5), 64);
        for (i, event) in events.iter_mut().enumerate() {
            event.time_ns = 1000 + i as u64;
            event.address = 0x7f00_0000_0000 + 4096 * i as u64;
            event.size = 512;
            event.arg1 = if i == 30 { u64::MAX } else { 0 };
            event.arg2 = 0;
            event.stream = 0;
            event.tid = 9;
        }
        let mut payload = Vec::new();
        encode_events(1, &events, &mut payload);
        let Ok(Record::Events { events: read, .. }) = decode_fast(&payload, false) else {
            panic!("the block did not read");
        };
        assert_eq!(read[30].arg1, u64::MAX);
        assert_eq!(read[31].address, 0x7f00_0000_0000 + 4096 * 31);
        assert_eq!(read, events);
    }

    #[test]
    fn damaged_blocks_read_as_the_careful_way_reads_them() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for round in 0..3000 {
            let count = 1 + rng.below(60) as usize;
            let events = random_events(&mut rng, count);
            let mut payload = Vec::new();
            encode_events(rng.below(5) as u32, &events, &mut payload);
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(payload.len() as u64) as usize;
                match rng.below(4) {
                    0 => payload[at] = rng.next_u64() as u8,
                    1 => payload[at] |= 0x80,
                    2 => payload[at] ^= 1 << rng.below(8),
                    _ => payload.truncate(at.max(1)),
                }
            }
            for packed in [false, true] {
                let careful = decode_carefully(&payload, packed);
                assert_eq!(decode_fast(&payload, packed), careful, "round {round}, packed {packed}");
                let portable = decode_events_in(&mut Cursor::new(&payload), &pid_of, packed, Gathering::Portable);
                assert_eq!(portable, careful, "round {round}, packed {packed}, portable");
            }
        }
    }
}
