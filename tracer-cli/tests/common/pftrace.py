"""Reads a Perfetto protobuf trace written by `cudatrace perfetto` with
Perfetto's own message definitions (the `perfetto` package's
perfetto_trace_pb2), checks the rules a sequence must keep, and prints what
the trace draws as one JSON object for the Rust tests:

  python3 pftrace.py TRACE.pftrace

- problems: every rule broken (empty when the trace is sound): sequence
  flags, the incremental clock, iids and track uuids used before they are
  defined (or defined twice), counters on tracks that are not counter
  tracks, slices that do not nest on their track;
- packets, compressed_batches: how many packets it holds, and in how many
  compressed batches (whose packets are read where the batch stands);
- start_ns: the trace's start (the incremental clock's first reading);
- tracks: every track, as described;
- slices, instants, counters: what is drawn, times in ns from start_ns,
  arguments by name (a pointer as "0x..." text, a valueless argument as
  null), frames innermost first;
- lanes: per process and lane name, the lanes used and the most slices
  alive at once on them.

Exits with status 3 and a line on stderr when the perfetto package is
missing.
"""

import json
import sys
import zlib

try:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError as error:
    sys.stderr.write(
        f"pftrace.py: the perfetto Python package is missing ({error}); "
        "tests/run installs it, or: python3 -m pip install perfetto\n"
    )
    sys.exit(3)

CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
MONOTONIC = 3
MAX_EXTRA_COUNTERS = 8
TYPE_NAMES = {1: "begin", 2: "end", 3: "instant", 4: "counter"}

# The InternedData tables, by the field that names them.
TABLES = [
    "event_categories",
    "event_names",
    "debug_annotation_names",
    "debug_annotation_string_values",
    "function_names",
    "source_paths",
    "frames",
    "callstacks",
]


class Sequence:
    def __init__(self):
        self.tables = {name: {} for name in TABLES}
        self.clock = None  # (id, reading) of the incremental clock
        self.defaults = None


def packets_of(data, problems):
    """The trace's packets in order, those of compressed batches inflated
    where they stand, and the number of compressed batches."""
    trace = pb.Trace()
    trace.ParseFromString(data)
    packets, batches = [], 0
    for packet in trace.packet:
        if packet.HasField("compressed_packets"):
            batches += 1
            if packet.ByteSize() >= 512 << 10:
                problems.append(f"a compressed batch of {packet.ByteSize()} bytes, over Perfetto's 512 KiB")
            if len(packet.ListFields()) != 1:
                problems.append("a packet of compressed packets with other fields")
            inner = pb.Trace()
            inner.ParseFromString(zlib.decompress(packet.compressed_packets))
            packets.extend(inner.packet)
        else:
            packets.append(packet)
    return packets, batches


def main(path):
    problems = []
    with open(path, "rb") as f:
        packets, batches = packets_of(f.read(), problems)
    sequences = {}
    tracks = {}  # uuid -> description
    open_slices = {}  # uuid -> stack of slice indices
    last_time = {}  # uuid -> time of its last event
    slices, instants, counters = [], [], []
    start_ns = None

    def problem(index, text):
        problems.append(f"packet {index}: {text}")

    for index, packet in enumerate(packets):
        sid = packet.trusted_packet_sequence_id
        if not sid:
            problem(index, "no trusted_packet_sequence_id")
            continue
        flags = packet.sequence_flags
        seq = sequences.get(sid)
        if seq is None:
            if not flags & CLEARED:
                problem(index, f"the first packet of sequence {sid} does not clear its incremental state")
            seq = sequences[sid] = Sequence()
        elif flags & CLEARED:
            problem(index, f"sequence {sid} cleared again")
        elif not flags & NEEDS:
            problem(index, "a later packet without SEQ_NEEDS_INCREMENTAL_STATE")

        if packet.HasField("trace_packet_defaults"):
            seq.defaults = packet.trace_packet_defaults
        if packet.HasField("clock_snapshot"):
            clocks = {c.clock_id: c for c in packet.clock_snapshot.clocks}
            incremental = [c for c in clocks.values() if c.is_incremental]
            if len(incremental) != 1 or MONOTONIC not in clocks:
                problem(index, "the clock snapshot does not define one incremental clock against CLOCK_MONOTONIC")
            else:
                clock = incremental[0]
                if not 64 <= clock.clock_id <= 127:
                    problem(index, f"incremental clock {clock.clock_id} is not a sequence's own")
                offset = clocks[MONOTONIC].timestamp - clock.timestamp
                seq.clock = [clock.clock_id, clock.timestamp, offset]
                start_ns = clocks[MONOTONIC].timestamp if start_ns is None else start_ns
            if packet.clock_snapshot.primary_trace_clock != MONOTONIC:
                problem(index, "the trace's clock is not CLOCK_MONOTONIC")

        # Interned entries: each iid once per table, from 1.
        interned = packet.interned_data
        for table in TABLES:
            for entry in getattr(interned, table):
                if entry.iid < 1 or entry.iid in seq.tables[table]:
                    problem(index, f"{table} iid {entry.iid} defined twice or zero")
                seq.tables[table][entry.iid] = entry
        for frame in interned.frames:
            if frame.function_name_id not in seq.tables["function_names"]:
                problem(index, f"frame {frame.iid} names undefined function {frame.function_name_id}")
            if frame.HasField("source_path_iid") and frame.source_path_iid not in seq.tables["source_paths"]:
                problem(index, f"frame {frame.iid} names undefined file {frame.source_path_iid}")
        for stack in interned.callstacks:
            for frame_id in stack.frame_ids:
                if frame_id not in seq.tables["frames"]:
                    problem(index, f"call stack {stack.iid} names undefined frame {frame_id}")

        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            if d.uuid in tracks:
                problem(index, f"track {d.uuid} described twice")
            if d.HasField("parent_uuid") and d.parent_uuid not in tracks:
                problem(index, f"track {d.uuid} has undefined parent {d.parent_uuid}")
            track = {"uuid": d.uuid, "name": d.name if d.HasField("name") else None, "parent": d.parent_uuid or None}
            if d.HasField("process"):
                track.update(kind="process", pid=d.process.pid, process_name=d.process.process_name,
                             labels=list(d.process.process_labels))
            elif d.HasField("thread"):
                track.update(kind="thread", pid=d.thread.pid, tid=d.thread.tid)
            elif d.HasField("counter"):
                track.update(kind="counter", unit=pb.CounterDescriptor.Unit.Name(d.counter.unit))
            else:
                track.update(kind="slices")
            if track["parent"] in tracks:
                track["pid"] = tracks[track["parent"]].get("pid")
            tracks[d.uuid] = track

        # Time: incremental on the sequence's clock unless another is named.
        time = None
        if packet.HasField("timestamp"):
            clock_id = packet.timestamp_clock_id or (seq.defaults.timestamp_clock_id if seq.defaults else 0)
            if packet.timestamp_clock_id == MONOTONIC:
                time = packet.timestamp
            elif seq.clock and clock_id == seq.clock[0]:
                seq.clock[1] += packet.timestamp
                time = seq.clock[1] + seq.clock[2]
            else:
                problem(index, f"timestamp on unknown clock {clock_id}")

        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        if time is None:
            problem(index, "a track event without a time")
            continue
        t = time - (start_ns or 0)
        defaults = seq.defaults.track_event_defaults if seq.defaults else None
        uuid = event.track_uuid if event.HasField("track_uuid") else (defaults.track_uuid if defaults else 0)
        if uuid not in tracks:
            problem(index, f"event on undefined track {uuid}")
            continue
        track = tracks[uuid]
        if last_time.get(uuid, t) > t:
            problem(index, f"track {uuid} goes back in time")
        last_time[uuid] = t

        def lookup(table, iid, what):
            entry = seq.tables[table].get(iid)
            if entry is None:
                problem(index, f"{what} iid {iid} used before it is defined")
            return entry

        def string_of(table, iid, what):
            entry = lookup(table, iid, what)
            if entry is None:
                return None
            return entry.name if hasattr(entry, "name") else entry.str.decode()

        def value_of(a):
            if a.HasField("pointer_value"):
                return hex(a.pointer_value)
            if a.HasField("uint_value"):
                return a.uint_value
            if a.HasField("int_value"):
                return a.int_value
            if a.HasField("bool_value"):
                return a.bool_value
            if a.HasField("string_value_iid"):
                return string_of("debug_annotation_string_values", a.string_value_iid, "string value")
            if a.HasField("string_value"):
                return a.string_value
            return None

        args = {}
        for a in event.debug_annotations:
            name = string_of("debug_annotation_names", a.name_iid, "argument name")
            if name in args:
                problem(index, f"argument {name} twice")
            args[name] = value_of(a)
        stack = None
        if event.HasField("callstack_iid"):
            callstack = lookup("callstacks", event.callstack_iid, "call stack")
            if callstack is not None:
                stack = []
                for frame_id in reversed(callstack.frame_ids):
                    frame = seq.tables["frames"][frame_id]
                    stack.append({
                        "function": string_of("function_names", frame.function_name_id, "function"),
                        "file": string_of("source_paths", frame.source_path_iid, "file")
                        if frame.HasField("source_path_iid") else None,
                        "line": frame.line_number if frame.HasField("line_number") else None,
                    })
        name = string_of("event_names", event.name_iid, "event name") if event.HasField("name_iid") else None
        categories = [string_of("event_categories", c, "category") for c in event.category_iids]

        # Counter values: the event's own and those riding on it.
        values = list(event.extra_counter_values)
        uuids = list(event.extra_counter_track_uuids) or (list(defaults.extra_counter_track_uuids) if defaults else [])
        if len(values) > MAX_EXTRA_COUNTERS:
            problem(index, f"{len(values)} extra counter values, more than Perfetto reads")
        if len(uuids) < len(values):
            problem(index, "extra counter values without their tracks")
        pairs = list(zip(uuids, values))
        if event.type == pb.TrackEvent.TYPE_COUNTER:
            pairs.insert(0, (uuid, event.counter_value))
        for counter_uuid, value in pairs:
            counter_track = tracks.get(counter_uuid)
            if counter_track is None or counter_track["kind"] != "counter":
                problem(index, f"a counter value for track {counter_uuid}, which is no counter track")
                continue
            counters.append({"pid": counter_track.get("pid"), "name": counter_track["name"], "ts": t, "value": value})

        kind = TYPE_NAMES.get(event.type)
        if kind in ("begin", "end", "instant") and track["kind"] == "counter":
            problem(index, f"a {kind} on counter track {uuid}")
        if kind == "begin":
            open_slices.setdefault(uuid, []).append(len(slices))
            slices.append({"pid": track.get("pid"), "track": track["name"], "lane": uuid, "name": name,
                           "categories": categories, "begin": t, "end": None, "args": args, "stack": stack})
        elif kind == "end":
            stack_of_track = open_slices.get(uuid)
            if not stack_of_track:
                problem(index, f"a slice ends on track {uuid}, where none is open")
                continue
            begun = slices[stack_of_track.pop()]
            begun["end"] = t
            for key, value in args.items():
                if key in begun["args"]:
                    problem(index, f"argument {key} at both ends of a slice")
                begun["args"][key] = value
        elif kind == "instant":
            instants.append({"pid": track.get("pid"), "tid": track.get("tid"), "track": track["name"], "name": name,
                             "categories": categories, "ts": t, "args": args, "stack": stack})
        elif kind != "counter":
            problem(index, f"event of type {event.type}")

    for uuid, still_open in open_slices.items():
        if still_open:
            problems.append(f"{len(still_open)} slices never end on track {uuid}")

    # Lanes: on each, slices one after another; the lanes of one name in
    # one process: as many as the most slices alive at once.
    lanes = {}
    for s in slices:
        key = f"{s['pid']} {s['track']}"
        lanes.setdefault(key, {"lanes": set(), "moments": []})
        lanes[key]["lanes"].add(s["lane"])
        lanes[key]["moments"] += [(s["begin"], 1), (s["end"], -1)]
    by_lane = {}
    for s in slices:
        by_lane.setdefault(s["lane"], []).append((s["begin"], s["end"]))
    for lane, spans in by_lane.items():
        spans.sort()
        for (b0, e0), (b1, e1) in zip(spans, spans[1:]):
            if b1 < e0:
                problems.append(f"slices overlap on lane {lane}: {b0}-{e0} and {b1}-{e1}")
    summary = {}
    for key, lane in lanes.items():
        alive = most = 0
        for _, step in sorted(lane["moments"]):  # ends (-1) before begins at one time
            alive += step
            most = max(most, alive)
        summary[key] = {"lanes": len(lane["lanes"]), "most_alive": most}

    json.dump({
        "problems": problems,
        "packets": len(packets),
        "compressed_batches": batches,
        "sequences": sorted(sequences),
        "start_ns": start_ns,
        "tracks": list(tracks.values()),
        "slices": slices,
        "instants": instants,
        "counters": counters,
        "lanes": summary,
    }, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
