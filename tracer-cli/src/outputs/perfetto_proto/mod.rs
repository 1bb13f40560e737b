//! Perfetto's own protobuf trace format (`cudatrace perfetto`, a
//! `.pftrace`), which Perfetto's UI opens far larger than JSON. What it
//! draws is [`super::perfetto_scene`]'s, each thing with every argument the
//! JSON gives it ([`super::perfetto_json`]); this writes it as track events:
//!
//! - each process as a process track, named and labelled as in the JSON;
//! - each counter as a counter track of bytes under its process;
//! - each allocation as a slice (begin and end) on a lane of its own (see
//!   [`super::perfetto_scene::lanes`]): `address`, `size`, `api`, `kind`,
//!   `device`, `stream` and `allocated_before_window` as arguments at its
//!   begin, `freed_by` and `free_inferred` (or `live_at_end`) at its end,
//!   and its top frames as an interned call stack;
//! - process starts and refusals as instants on their thread's track, the
//!   recording marks as instants on a track of their own.
//!
//! A `null` of the JSON (an unknown device) is an argument with its name
//! and no value. Strings are interned ([`interning`]), counter values ride
//! on the event of their moment ([`moment`]), times are incremental and
//! packets carry the sequence's flags ([`sequence`]); tracks are described
//! before their first use ([`tracks`]). Packets are written as they are
//! made, deflated in batches unless asked not to be (on another core where
//! there is one, [`deflater`]): memory stays proportional to the
//! allocations live at once and the strings interned.

mod deflater;
mod event_packets;
mod interning;
mod messages;
mod proto_writer;
mod riding_counters;
mod sequence;
mod tracks;

pub use proto_writer::write;
