//! Counters ride on events: the counter values of one moment are written in
//! the packet of an event at that same moment (an allocation's slice, most
//! often), as its `extra_counter_track_uuids` and `extra_counter_values`,
//! rather than as packets of their own. Counter values with no event at
//! their moment make one counter event: the first value its own, the rest
//! riding on it. An event carries at most [`MAX_EXTRA_COUNTERS`]; more make
//! more counter events.
//!
//! So an event is held back until the next thing drawn shows whether more
//! counters of its moment follow.

use super::messages::{InternedData, TracePacket, TrackEvent, TYPE_COUNTER};
use super::sequence::Sequence;
use std::io::{self, Write};

/// The most counter values one event carries besides its own: Perfetto's
/// importer reads no more.
const MAX_EXTRA_COUNTERS: usize = 8;

/// What is held back: one moment's event and counter values.
#[derive(Default)]
pub struct Moment {
    /// Its time (`CLOCK_MONOTONIC` ns); meaningless while it is empty.
    time_ns: u64,
    /// Its event, with the interned entries it needs first.
    event: Option<(TrackEvent, Option<InternedData>)>,
    /// Its counter values: track uuid and value.
    counters: Vec<(u64, i64)>,
}

impl Moment {
    fn is_empty(&self) -> bool {
        self.event.is_none() && self.counters.is_empty()
    }

    /// Writes what is held unless it is of the moment `time_ns` (and, if
    /// `event`, has no event yet).
    fn keep_for(&mut self, time_ns: u64, event: bool, sequence: &mut Sequence<impl Write>) -> io::Result<()> {
        if !self.is_empty() && (time_ns != self.time_ns || (event && self.event.is_some())) {
            self.flush(sequence)?;
        }
        self.time_ns = time_ns;
        Ok(())
    }

    /// A counter's value at `time_ns`.
    pub fn counter(
        &mut self,
        time_ns: u64,
        track: u64,
        value: i64,
        sequence: &mut Sequence<impl Write>,
    ) -> io::Result<()> {
        self.keep_for(time_ns, false, sequence)?;
        self.counters.push((track, value));
        Ok(())
    }

    /// An event at `time_ns`, with the interned entries it needs. Inlined:
    /// a `TrackEvent` is large, and moved by value through a call it is
    /// copied once more for every slice.
    #[inline]
    pub fn event(
        &mut self,
        time_ns: u64,
        event: TrackEvent,
        interned: Option<InternedData>,
        sequence: &mut Sequence<impl Write>,
    ) -> io::Result<()> {
        self.keep_for(time_ns, true, sequence)?;
        self.event = Some((event, interned));
        Ok(())
    }

    /// Writes what is held.
    pub fn flush(&mut self, sequence: &mut Sequence<impl Write>) -> io::Result<()> {
        let time_ns = self.time_ns;
        let mut held = self.event.take();
        let mut counters = self.counters.drain(..).peekable();
        while held.is_some() || counters.peek().is_some() {
            let (mut event, interned) = match held.take() {
                Some(held) => held,
                None => {
                    let Some((track, value)) = counters.next() else {
                        break;
                    };
                    let event = TrackEvent {
                        r#type: Some(TYPE_COUNTER),
                        track_uuid: Some(track),
                        counter_value: Some(value),
                        ..Default::default()
                    };
                    (event, None)
                }
            };
            for (track, value) in counters.by_ref().take(MAX_EXTRA_COUNTERS) {
                event.extra_counter_track_uuids.push(track);
                event.extra_counter_values.push(value);
            }
            let mut packet = TracePacket {
                interned_data: interned,
                track_event: Some(event),
                ..Default::default()
            };
            sequence.write(&mut packet, Some(time_ns))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::perfetto_proto::messages::{TYPE_SLICE_BEGIN, TYPE_SLICE_END};
    use crate::outputs::perfetto_proto::sequence::tests::packets;

    fn slice(r#type: i32, track: u64) -> TrackEvent {
        TrackEvent {
            r#type: Some(r#type),
            track_uuid: Some(track),
            ..Default::default()
        }
    }

    #[test]
    fn counters_ride_on_the_event_of_their_moment_eight_at_most() {
        let mut out = Vec::new();
        let mut sequence = Sequence::new(&mut out, 1000, false);
        sequence.start(1).unwrap();
        let mut moment = Moment::default();
        // A counter before an event of its moment and one after it.
        moment.counter(1000, 7, 5, &mut sequence).unwrap();
        moment
            .event(1000, slice(TYPE_SLICE_BEGIN, 3), None, &mut sequence)
            .unwrap();
        moment.counter(1000, 8, 6, &mut sequence).unwrap();
        // A second event of the same moment gets the counters after it.
        moment
            .event(1000, slice(TYPE_SLICE_END, 4), None, &mut sequence)
            .unwrap();
        moment.counter(1000, 9, 1, &mut sequence).unwrap();
        // Counters alone: the first its own event's, eight more on it, the
        // rest on another.
        for value in 0..10 {
            moment.counter(1500, 20 + value, value as i64, &mut sequence).unwrap();
        }
        moment.flush(&mut sequence).unwrap();
        drop(sequence);
        let events: Vec<(Option<u64>, TrackEvent)> = packets(&out)
            .into_iter()
            .map(|p| (p.timestamp, p.track_event.unwrap()))
            .collect();
        assert_eq!(events.len(), 4);
        assert_eq!(events[0].0, Some(0));
        assert_eq!(events[0].1.r#type, Some(TYPE_SLICE_BEGIN));
        assert_eq!(events[0].1.extra_counter_track_uuids, [7, 8]);
        assert_eq!(events[0].1.extra_counter_values, [5, 6]);
        assert_eq!(events[1].0, Some(0));
        assert_eq!(events[1].1.extra_counter_track_uuids, [9]);
        assert_eq!(events[2].0, Some(500));
        assert_eq!(
            (events[2].1.r#type, events[2].1.track_uuid, events[2].1.counter_value),
            (Some(TYPE_COUNTER), Some(20), Some(0))
        );
        assert_eq!(events[2].1.extra_counter_track_uuids, (21..29).collect::<Vec<u64>>());
        assert_eq!(events[3].1.track_uuid, Some(29));
        assert!(events[3].1.extra_counter_values.is_empty());
    }
}
