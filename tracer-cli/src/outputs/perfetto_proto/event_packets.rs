//! The packets of track events, encoded by hand: nearly every packet of a
//! trace is one (a slice's begin or end, or a counter, with the counters
//! riding on it), and prost's generic encoding of each was about a third
//! of the command's own thread. The bytes are exactly prost's: fields in
//! tag order, each optional field written when set, repeated numbers
//! unpacked, as the messages in [`super::messages`] declare them.

use super::messages::{DebugAnnotation, TracePacket, TrackEvent};

/// Appends `packet` to `out` as prost's `encode_length_delimited` would
/// (its length, then its fields), if it is a track event packet with
/// nothing but a time, its sequence and flags; `false`, writing nothing,
/// for any other packet.
pub fn encode_length_delimited(packet: &TracePacket, out: &mut Vec<u8>) -> bool {
    let TracePacket {
        timestamp,
        timestamp_clock_id,
        trusted_packet_sequence_id,
        sequence_flags,
        first_packet_on_sequence: None,
        interned_data: None,
        trace_packet_defaults: None,
        clock_snapshot: None,
        track_event: Some(event),
        track_descriptor: None,
    } = packet
    else {
        return false;
    };
    let event_len = event_len(event);
    let len = uint_field_len(8, *timestamp)
        + uint_field_len(10, trusted_packet_sequence_id.map(u64::from))
        + message_len(11, event_len)
        + uint_field_len(13, sequence_flags.map(u64::from))
        + uint_field_len(58, timestamp_clock_id.map(u64::from));
    varint(out, len as u64);
    uint_field(out, 8, *timestamp);
    uint_field(out, 10, trusted_packet_sequence_id.map(u64::from));
    key(out, 11, LENGTH_DELIMITED);
    varint(out, event_len as u64);
    write_event(out, event);
    uint_field(out, 13, sequence_flags.map(u64::from));
    uint_field(out, 58, timestamp_clock_id.map(u64::from));
    true
}

const VARINT: u32 = 0;
const LENGTH_DELIMITED: u32 = 2;

fn event_len(event: &TrackEvent) -> usize {
    // Every field named: a field added to the message must be added here.
    let TrackEvent {
        category_iids: _,
        name_iid: _,
        r#type: _,
        track_uuid: _,
        counter_value: _,
        extra_counter_track_uuids: _,
        extra_counter_values: _,
        callstack_iid: _,
        debug_annotations: _,
    } = event;
    let repeated = |tag: u32, values: &mut dyn Iterator<Item = u64>| -> usize {
        values.map(|value| key_len(tag) + varint_len(value)).sum()
    };
    repeated(3, &mut event.category_iids.iter().copied())
        + event
            .debug_annotations
            .iter()
            .map(|annotation| message_len(4, annotation_len(annotation)))
            .sum::<usize>()
        + uint_field_len(9, event.r#type.map(|t| i64::from(t) as u64))
        + uint_field_len(10, event.name_iid)
        + uint_field_len(11, event.track_uuid)
        + repeated(12, &mut event.extra_counter_values.iter().map(|&v| v as u64))
        + uint_field_len(30, event.counter_value.map(|v| v as u64))
        + repeated(31, &mut event.extra_counter_track_uuids.iter().copied())
        + uint_field_len(56, event.callstack_iid)
}

fn write_event(out: &mut Vec<u8>, event: &TrackEvent) {
    for &iid in &event.category_iids {
        uint_field(out, 3, Some(iid));
    }
    for annotation in &event.debug_annotations {
        key(out, 4, LENGTH_DELIMITED);
        varint(out, annotation_len(annotation) as u64);
        write_annotation(out, annotation);
    }
    uint_field(out, 9, event.r#type.map(|t| i64::from(t) as u64));
    uint_field(out, 10, event.name_iid);
    uint_field(out, 11, event.track_uuid);
    for &value in &event.extra_counter_values {
        uint_field(out, 12, Some(value as u64));
    }
    uint_field(out, 30, event.counter_value.map(|v| v as u64));
    for &uuid in &event.extra_counter_track_uuids {
        uint_field(out, 31, Some(uuid));
    }
    uint_field(out, 56, event.callstack_iid);
}

fn annotation_len(annotation: &DebugAnnotation) -> usize {
    // Every field named, as in `event_len`.
    let DebugAnnotation {
        name_iid: _,
        bool_value: _,
        uint_value: _,
        int_value: _,
        pointer_value: _,
        string_value_iid: _,
    } = annotation;
    uint_field_len(1, annotation.name_iid)
        + uint_field_len(2, annotation.bool_value.map(u64::from))
        + uint_field_len(3, annotation.uint_value)
        + uint_field_len(4, annotation.int_value.map(|v| v as u64))
        + uint_field_len(7, annotation.pointer_value)
        + uint_field_len(17, annotation.string_value_iid)
}

fn write_annotation(out: &mut Vec<u8>, annotation: &DebugAnnotation) {
    uint_field(out, 1, annotation.name_iid);
    uint_field(out, 2, annotation.bool_value.map(u64::from));
    uint_field(out, 3, annotation.uint_value);
    uint_field(out, 4, annotation.int_value.map(|v| v as u64));
    uint_field(out, 7, annotation.pointer_value);
    uint_field(out, 17, annotation.string_value_iid);
}

/// Bytes of a varint field, if set.
fn uint_field_len(tag: u32, value: Option<u64>) -> usize {
    value.map_or(0, |value| key_len(tag) + varint_len(value))
}

fn uint_field(out: &mut Vec<u8>, tag: u32, value: Option<u64>) {
    if let Some(value) = value {
        key(out, tag, VARINT);
        varint(out, value);
    }
}

/// Bytes of a message field whose body is `len` bytes.
fn message_len(tag: u32, len: usize) -> usize {
    key_len(tag) + varint_len(len as u64) + len
}

fn key_len(tag: u32) -> usize {
    varint_len(u64::from(tag) << 3)
}

fn key(out: &mut Vec<u8>, tag: u32, wire_type: u32) {
    varint(out, u64::from(tag << 3 | wire_type));
}

fn varint_len(value: u64) -> usize {
    // 7 bits a byte; 0 takes one.
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn prost_bytes(packet: &TracePacket) -> Vec<u8> {
        let mut out = Vec::new();
        packet.encode_length_delimited(&mut out).unwrap();
        out
    }

    fn ours(packet: &TracePacket) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(encode_length_delimited(packet, &mut out));
        out
    }

    #[test]
    fn every_field_is_written_as_prost_writes_it() {
        let annotation = |name: u64| DebugAnnotation {
            name_iid: Some(name),
            ..Default::default()
        };
        let event = TrackEvent {
            category_iids: vec![1, 300],
            name_iid: Some(0),
            r#type: Some(-1),
            track_uuid: Some(u64::MAX),
            counter_value: Some(-5),
            extra_counter_track_uuids: vec![7, 1 << 40],
            extra_counter_values: vec![i64::MIN, 0, 127, 128],
            callstack_iid: Some(16_384),
            debug_annotations: vec![
                DebugAnnotation {
                    bool_value: Some(false),
                    ..annotation(2)
                },
                DebugAnnotation {
                    uint_value: Some(1 << 63),
                    ..annotation(3)
                },
                DebugAnnotation {
                    int_value: Some(-2),
                    ..annotation(4)
                },
                DebugAnnotation {
                    pointer_value: Some(0x7f00_0000_1000),
                    ..annotation(5)
                },
                DebugAnnotation {
                    string_value_iid: Some(9),
                    ..annotation(6)
                },
                DebugAnnotation::default(),
            ],
        };
        let packet = TracePacket {
            timestamp: Some(123_456_789),
            timestamp_clock_id: Some(6),
            trusted_packet_sequence_id: Some(1),
            sequence_flags: Some(2),
            track_event: Some(event),
            ..Default::default()
        };
        assert_eq!(ours(&packet), prost_bytes(&packet));
        let bare = TracePacket {
            track_event: Some(TrackEvent::default()),
            ..Default::default()
        };
        assert_eq!(ours(&bare), prost_bytes(&bare));
        assert_eq!(ours(&bare), vec![2, 0x5a, 0]);
    }

    #[test]
    fn any_other_packet_is_left_to_prost() {
        let mut out = Vec::new();
        let packet = TracePacket {
            timestamp: Some(1),
            ..Default::default()
        };
        assert!(!encode_length_delimited(&packet, &mut out));
        let described = TracePacket {
            track_event: Some(TrackEvent::default()),
            first_packet_on_sequence: Some(true),
            ..Default::default()
        };
        assert!(!encode_length_delimited(&described, &mut out));
        assert!(out.is_empty());
    }
}
