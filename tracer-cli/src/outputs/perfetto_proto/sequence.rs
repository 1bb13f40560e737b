//! The packet sequence: every packet of the file is on one sequence, which
//! holds the interned data and defaults its packets rely on.
//!
//! The first packet clears the sequence's incremental state
//! (`SEQ_INCREMENTAL_STATE_CLEARED`), defines its clock and sets its
//! defaults; every later packet says it needs that state
//! (`SEQ_NEEDS_INCREMENTAL_STATE`).
//!
//! Times are incremental: the sequence's own clock (id 64) is defined in
//! the first packet's `ClockSnapshot` as incremental, equal to
//! `CLOCK_MONOTONIC` at the trace's start, and is the default clock of every
//! packet; a packet's timestamp is then the ns since the sequence's last
//! timestamp. A packet earlier than that one (rare: counters known only at
//! the end) gives its `CLOCK_MONOTONIC` time instead, naming that clock.
//!
//! Each packet is written as it is made, as field 1 (`packet`) of Perfetto's
//! `Trace` message, so the file is a `Trace`. Compressed, the packets are
//! gathered into batches of [`BATCH_BYTES`], each deflated (zlib) into the
//! `compressed_packets` field of a packet of its own, as Perfetto's tracing
//! service writes them when asked to compress: Perfetto inflates them as it
//! reads, and memory stays one batch.

use super::deflater::{deflate, Deflater};
use super::event_packets;
use super::messages::{
    Clock, ClockSnapshot, TracePacket, TracePacketDefaults, TrackEventDefaults, CLOCK_MONOTONIC,
    SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE,
};
use prost::Message;
use std::io::{self, Write};

/// The sequence's id.
pub const SEQUENCE_ID: u32 = 1;

/// The sequence's incremental clock: ids 64 to 127 are a sequence's own.
pub const INCREMENTAL_CLOCK: u32 = 64;

/// `Trace.packet`: field 1, length-delimited.
const PACKET_TAG: u8 = (1 << 3) | 2;

/// `TracePacket.compressed_packets`: field 50, length-delimited.
const COMPRESSED_PACKETS_TAG: u64 = (50 << 3) | 2;

/// Packets deflated together. Perfetto asks for compressed batches under
/// 512 KiB; deflate never grows a batch by more than a few bytes per 16 KiB.
pub const BATCH_BYTES: usize = 256 << 10;

/// The sequence being written.
pub struct Sequence<W: Write> {
    out: W,
    /// The packet being encoded.
    buffer: Vec<u8>,
    /// The packets of the batch being gathered, when compressing.
    batch: Option<Vec<u8>>,
    /// The thread that deflates full batches, where there is another core.
    deflater: Option<Deflater>,
    /// The incremental clock's time: `CLOCK_MONOTONIC` ns of the last
    /// packet timed by it.
    clock_ns: u64,
}

impl<W: Write> Sequence<W> {
    /// A sequence on `out` whose clock starts at `start_ns`, its packets
    /// compressed if `compress`.
    pub fn new(out: W, start_ns: u64, compress: bool) -> Sequence<W> {
        Sequence {
            out,
            buffer: Vec::with_capacity(256),
            batch: compress.then(|| Vec::with_capacity(BATCH_BYTES + (16 << 10))),
            deflater: if compress { Deflater::start() } else { None },
            clock_ns: start_ns,
        }
    }

    /// Writes the sequence's first packet: its clock, and its events on
    /// `default_track` unless they name another.
    pub fn start(&mut self, default_track: u64) -> io::Result<()> {
        let start_ns = self.clock_ns;
        let first = TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE_ID),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            first_packet_on_sequence: Some(true),
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![
                    Clock {
                        clock_id: Some(INCREMENTAL_CLOCK),
                        timestamp: Some(start_ns),
                        is_incremental: Some(true),
                    },
                    Clock {
                        clock_id: Some(CLOCK_MONOTONIC),
                        timestamp: Some(start_ns),
                        is_incremental: None,
                    },
                ],
                primary_trace_clock: Some(CLOCK_MONOTONIC as i32),
            }),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(INCREMENTAL_CLOCK),
                track_event_defaults: Some(TrackEventDefaults {
                    track_uuid: Some(default_track),
                }),
            }),
            ..Default::default()
        };
        self.emit(&first)
    }

    /// Writes `packet` on the sequence, at `time_ns` (`CLOCK_MONOTONIC`)
    /// if it has a time.
    pub fn write(&mut self, packet: &mut TracePacket, time_ns: Option<u64>) -> io::Result<()> {
        packet.trusted_packet_sequence_id = Some(SEQUENCE_ID);
        packet.sequence_flags = Some(SEQ_NEEDS_INCREMENTAL_STATE);
        if let Some(time_ns) = time_ns {
            if time_ns >= self.clock_ns {
                packet.timestamp = Some(time_ns - self.clock_ns);
                self.clock_ns = time_ns;
            } else {
                packet.timestamp = Some(time_ns);
                packet.timestamp_clock_id = Some(CLOCK_MONOTONIC);
            }
        }
        self.emit(packet)
    }

    fn emit(&mut self, packet: &TracePacket) -> io::Result<()> {
        let Some(batch) = self.batch.as_mut() else {
            self.buffer.clear();
            self.buffer.push(PACKET_TAG);
            encode_length_delimited(packet, &mut self.buffer)?;
            return self.out.write_all(&self.buffer);
        };
        batch.push(PACKET_TAG);
        encode_length_delimited(packet, batch)?;
        if batch.len() >= BATCH_BYTES {
            self.deflate_batch()?;
        }
        Ok(())
    }

    /// Writes the batch gathered so far as one packet of compressed packets
    /// (or hands it to the deflating thread, which gives it back to write).
    fn deflate_batch(&mut self) -> io::Result<()> {
        let Some(batch) = self.batch.as_mut().filter(|batch| !batch.is_empty()) else {
            return Ok(());
        };
        let out = &mut self.out;
        let mut write = |compressed: &[u8]| write_compressed(out, compressed);
        match self.deflater.as_mut() {
            Some(deflater) => {
                let full = std::mem::take(batch);
                *batch = deflater.hand_out(full, &mut write)?;
                batch.reserve(BATCH_BYTES + (16 << 10));
            }
            None => {
                self.buffer.clear();
                let compressed = deflate(batch, std::mem::take(&mut self.buffer))?;
                batch.clear();
                write(&compressed)?;
                self.buffer = compressed;
            }
        }
        Ok(())
    }

    /// Writes what is still gathered; the sequence is then whole.
    pub fn finish(&mut self) -> io::Result<()> {
        self.deflate_batch()?;
        let out = &mut self.out;
        match self.deflater.as_mut() {
            Some(deflater) => deflater.finish(&mut |compressed: &[u8]| write_compressed(out, compressed)),
            None => Ok(()),
        }
    }
}

/// Writes one packet of compressed packets.
fn write_compressed(out: &mut impl Write, compressed: &[u8]) -> io::Result<()> {
    let mut field = Vec::with_capacity(10);
    prost::encoding::encode_varint(COMPRESSED_PACKETS_TAG, &mut field);
    prost::encoding::encode_varint(compressed.len() as u64, &mut field);
    let mut frame = vec![PACKET_TAG];
    prost::encoding::encode_varint((field.len() + compressed.len()) as u64, &mut frame);
    out.write_all(&frame)?;
    out.write_all(&field)?;
    out.write_all(compressed)
}

/// `packet`, its length first: track events by hand, the rest by prost.
fn encode_length_delimited(packet: &TracePacket, out: &mut Vec<u8>) -> io::Result<()> {
    if event_packets::encode_length_delimited(packet, out) {
        return Ok(());
    }
    packet.encode_length_delimited(out).map_err(io::Error::other)
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::outputs::perfetto_proto::messages::TrackEvent;
    use flate2::read::ZlibDecoder;
    use std::io::Read;

    /// Perfetto's `Trace`, its packets left encoded.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Trace {
        #[prost(bytes = "vec", repeated, tag = "1")]
        packet: Vec<Vec<u8>>,
    }

    /// The field of a packet of compressed packets.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Compressed {
        #[prost(bytes = "vec", optional, tag = "50")]
        compressed_packets: Option<Vec<u8>>,
    }

    /// Every packet of a written sequence, those of compressed batches
    /// inflated where they stand.
    fn all_packets(bytes: &[u8]) -> Vec<TracePacket> {
        let mut packets = Vec::new();
        for packet in Trace::decode(bytes).unwrap().packet {
            match Compressed::decode(&packet[..]).unwrap().compressed_packets {
                Some(compressed) => {
                    let mut batch = Vec::new();
                    ZlibDecoder::new(&compressed[..]).read_to_end(&mut batch).unwrap();
                    packets.extend(all_packets(&batch));
                }
                None => packets.push(TracePacket::decode(&packet[..]).unwrap()),
            }
        }
        packets
    }

    /// The packets of a written sequence after its first (its start).
    pub fn packets(bytes: &[u8]) -> Vec<TracePacket> {
        let mut packets = all_packets(bytes);
        packets.remove(0);
        packets
    }

    fn at(sequence: &mut Sequence<&mut Vec<u8>>, time_ns: Option<u64>) {
        let mut packet = TracePacket {
            track_event: Some(TrackEvent::default()),
            ..Default::default()
        };
        sequence.write(&mut packet, time_ns).unwrap();
    }

    #[test]
    fn times_are_deltas_on_the_sequence_clock_unless_they_go_back() {
        for compress in [false, true] {
            let mut out = Vec::new();
            let mut sequence = Sequence::new(&mut out, 1_000, compress);
            sequence.start(1).unwrap();
            at(&mut sequence, Some(1_500));
            at(&mut sequence, None);
            at(&mut sequence, Some(1_500));
            at(&mut sequence, Some(1_200));
            at(&mut sequence, Some(2_000));
            sequence.finish().unwrap();
            drop(sequence);
            let first = all_packets(&out).remove(0);
            let batches = Trace::decode(&out[..]).unwrap().packet.len();
            assert_eq!(batches, if compress { 1 } else { 6 });
            assert_eq!(first.sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
            let snapshot = first.clock_snapshot.unwrap();
            assert_eq!(snapshot.clocks[0].clock_id, Some(INCREMENTAL_CLOCK));
            assert_eq!(snapshot.clocks[0].timestamp, Some(1_000));
            assert_eq!(snapshot.clocks[0].is_incremental, Some(true));
            assert_eq!(
                first.trace_packet_defaults.unwrap().timestamp_clock_id,
                Some(INCREMENTAL_CLOCK)
            );
            let times: Vec<(Option<u64>, Option<u32>, Option<u32>)> = packets(&out)
                .iter()
                .map(|p| (p.timestamp, p.timestamp_clock_id, p.sequence_flags))
                .collect();
            let needs = Some(SEQ_NEEDS_INCREMENTAL_STATE);
            assert_eq!(
                times,
                [
                    (Some(500), None, needs),
                    (None, None, needs),
                    (Some(0), None, needs),
                    (Some(1_200), Some(CLOCK_MONOTONIC), needs),
                    (Some(500), None, needs),
                ],
                "compressed: {compress}"
            );
        }
    }
}
