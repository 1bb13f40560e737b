//! Reading a trace, record by record, stopping cleanly at damage.

use crate::crc32;
use crate::decode::decode;
use crate::format::{Record, FORMAT_VERSION, MAGIC, MAX_PAYLOAD, OLDEST_READABLE_VERSION};
use crate::problem::Problem;
use std::collections::HashMap;
use std::io::{self, Read};

/// A frame that could not be read: where, why, and whether reading went on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the damaged frame.
    pub offset: u64,
    /// What was wrong with it.
    pub problem: Problem,
    /// The frame after it verified, so it was skipped and reading went on;
    /// otherwise reading stopped here.
    pub skipped: bool,
}

/// Reads records from a trace. It never panics on any input. A damaged
/// frame is reported as a [`Damage`]; if the frame after it verifies, the
/// damaged one is skipped and reading goes on, otherwise the stream ends
/// there, after every whole record before it.
pub struct TraceReader<R: Read> {
    input: R,
    offset: u64,
    pids: HashMap<u32, u32>,
    stopped: bool,
    /// A frame read ahead to decide whether to skip the one before it.
    ahead: Option<Frame>,
}

/// One frame as read, not yet decoded.
struct Frame {
    offset: u64,
    tag: u8,
    payload: Vec<u8>,
    checksum_ok: bool,
}

impl Frame {
    fn end(&self) -> u64 {
        self.offset + 9 + self.payload.len() as u64
    }
}

fn read_fully(input: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match input.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

impl<R: Read> TraceReader<R> {
    /// Checks the magic number and positions the reader at the first record.
    pub fn new(mut input: R) -> Result<Self, Damage> {
        let mut magic = [0u8; 8];
        let got = read_fully(&mut input, &mut magic).map_err(|e| Damage {
            offset: 0,
            problem: Problem::Unreadable(e.to_string()),
            skipped: false,
        })?;
        if got < magic.len() || magic != MAGIC {
            return Err(Damage {
                offset: 0,
                problem: Problem::NotATrace,
                skipped: false,
            });
        }
        Ok(TraceReader {
            input,
            offset: 8,
            pids: HashMap::new(),
            stopped: false,
            ahead: None,
        })
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn stop(&mut self, offset: u64, problem: Problem) -> Damage {
        self.stopped = true;
        Damage {
            offset,
            problem,
            skipped: false,
        }
    }

    /// Reads the frame at `offset`: `Ok(None)` at a clean end, `Err` with
    /// the problem when it is cut short or cannot be a frame.
    fn read_frame(&mut self, offset: u64) -> Result<Option<Frame>, Problem> {
        let mut head = [0u8; 5];
        let got = read_fully(&mut self.input, &mut head).map_err(|e| Problem::Unreadable(e.to_string()))?;
        if got == 0 {
            return Ok(None);
        }
        if got < head.len() {
            return Err(Problem::TruncatedFrameHeader { got });
        }
        let tag = head[0];
        let length = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if length > MAX_PAYLOAD {
            return Err(Problem::FrameTooLarge { length });
        }
        // Read what is there rather than allocate what the frame claims.
        let mut body = Vec::new();
        let wanted = length + 4;
        (&mut self.input)
            .take(wanted as u64)
            .read_to_end(&mut body)
            .map_err(|e| Problem::Unreadable(e.to_string()))?;
        if body.len() < wanted {
            return Err(Problem::TruncatedRecord {
                got: body.len(),
                wanted,
            });
        }
        let stored = body.split_off(length);
        let crc = crc32::update(crc32::update(0, &head), &body);
        Ok(Some(Frame {
            offset,
            tag,
            payload: body,
            checksum_ok: crc.to_le_bytes()[..] == stored[..],
        }))
    }

    fn decode_frame(&mut self, frame: &Frame) -> Result<Record, Problem> {
        let tag = Some(frame.tag);
        if !frame.checksum_ok {
            return Err(Problem::ChecksumMismatch { tag });
        }
        let pids = &self.pids;
        let record = decode(frame.tag, &frame.payload, &|process| pids.get(&process).copied())
            .map_err(|fault| Problem::Malformed { tag, fault })?;
        match &record {
            Record::Header(h) if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&h.format_version) => {
                return Err(Problem::UnsupportedVersion {
                    version: h.format_version,
                });
            }
            Record::Process(p) => {
                self.pids.insert(p.process, p.pid);
            }
            _ => {}
        }
        Ok(record)
    }

    /// The next record; `Ok(None)` at a clean end (a frame boundary).
    pub fn next_record(&mut self) -> Result<Option<Record>, Damage> {
        if self.stopped {
            return Ok(None);
        }
        let frame = match self.ahead.take() {
            Some(frame) => frame,
            None => match self.read_frame(self.offset) {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    self.stopped = true;
                    return Ok(None);
                }
                Err(problem) => return Err(self.stop(self.offset, problem)),
            },
        };
        let problem = match self.decode_frame(&frame) {
            Ok(record) => {
                self.offset = frame.end();
                return Ok(Some(record));
            }
            Err(problem) => problem,
        };
        self.offset = frame.end();
        // Without its header, nothing after it can be read with confidence.
        let resumable = frame.offset != MAGIC.len() as u64;
        match self.read_frame(self.offset) {
            Ok(Some(next)) if resumable && next.checksum_ok => {
                self.ahead = Some(next);
                Err(Damage {
                    offset: frame.offset,
                    problem,
                    skipped: true,
                })
            }
            _ => Err(self.stop(frame.offset, problem)),
        }
    }
}

/// Reads again the record whose frame starts at `offset` of `file`, as a
/// [`TraceReader`] had read it there: for readers that index a trace in a
/// first pass and come back to its event blocks in another order.
/// `pid_of` maps a process index to its pid, as the trace's process records do.
pub fn read_record_at(
    file: &std::fs::File,
    offset: u64,
    pid_of: &dyn Fn(u32) -> Option<u32>,
) -> Result<Record, Damage> {
    use std::os::unix::fs::FileExt;
    let damage = |problem| Damage {
        offset,
        problem,
        skipped: false,
    };
    let unreadable = |e: io::Error| damage(Problem::Unreadable(e.to_string()));
    let mut head = [0u8; 5];
    file.read_exact_at(&mut head, offset).map_err(unreadable)?;
    let length = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if length > MAX_PAYLOAD {
        return Err(damage(Problem::FrameTooLarge { length }));
    }
    let mut body = vec![0u8; length + 4];
    file.read_exact_at(&mut body, offset + 5).map_err(unreadable)?;
    let stored = body.split_off(length);
    let crc = crc32::update(crc32::update(0, &head), &body);
    if crc.to_le_bytes()[..] != stored[..] {
        return Err(damage(Problem::ChecksumMismatch { tag: None }));
    }
    decode(head[0], &body, pid_of).map_err(|fault| damage(Problem::Malformed { tag: None, fault }))
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Record, Damage>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{
        Fold, FoldedSite, Footer, Header, LowPoint, LowPointSite, LowPointsState, NvmlSample, NvmlStatus, ProcessEnd,
        ProcessStart, StepDeviceRow, StepRow, StepSeries, StepsState, UnrecordedProcess,
    };
    use crate::problem::Malformed;
    use crate::writer::TraceWriter;
    use cudatrace_events::{Api, Event, Kind, Op};

    fn event(seq: u64, op: Op, address: u64) -> Event {
        Event {
            pid: 42,
            tid: 42 + (seq % 3) as u32,
            seq,
            time_ns: 1_000_000 + seq * 1500 - (seq % 2) * 700,
            device: if seq.is_multiple_of(5) {
                None
            } else {
                Some((seq % 2) as u8)
            },
            stream: if seq.is_multiple_of(4) { 2 } else { 0 },
            api: Api::CudaMalloc,
            op,
            kind: Kind::Pool,
            address,
            size: 4096 * seq,
            arg1: seq % 7,
            arg2: u64::MAX - seq,
            stack: (seq % 4) as u32,
        }
    }

    pub(crate) fn sample_trace() -> (Vec<u8>, Vec<Record>) {
        let header = Header {
            format_version: FORMAT_VERSION,
            tracer_version: "0.1.0".into(),
            host: "box".into(),
            start_realtime_ns: 1_700_000_000_000_000_000,
            start_monotonic_ns: 999,
            command: vec!["python".into(), "train.py".into()],
        };
        let process = ProcessStart {
            process: 0,
            pid: 42,
            ppid: 1,
            image: 0,
            argv: vec!["python".into()],
            start_monotonic_ns: 1000,
            start_realtime_ns: 2000,
            place: cudatrace_events::ProcessPlace {
                host: "box".into(),
                rank: Some(3),
                local_rank: Some(1),
                world_size: None,
            },
        };
        let mut events: Vec<Event> = (0..10)
            .map(|s| event(s, Op::Alloc, 0x7f00_0000_0000 + s * 8192))
            .collect();
        events[3].seq = 7; // a gap
        events.iter_mut().skip(4).for_each(|e| e.seq += 4);
        // An op past 15 needs the version 4 layout.
        events[9].op = Op::GraphNode;
        let end = ProcessEnd {
            process: 0,
            exit_status: Some(137),
            exit_time_ns: Some(5000),
            ..Default::default()
        };
        let footer = Footer {
            processes: 1,
            events: 10,
            end_realtime_ns: 3,
            ..Default::default()
        };
        let mut writer = TraceWriter::new(Vec::new(), &header).unwrap();
        writer.process_start(&process).unwrap();
        writer.events(0, &events).unwrap();
        writer.process_end(&end).unwrap();
        writer.footer(&footer).unwrap();
        let records = vec![
            Record::Header(header),
            Record::Process(process),
            Record::Events { process: 0, events },
            Record::ProcessEnd(end),
            Record::Footer(footer),
        ];
        (writer.into_inner(), records)
    }

    #[test]
    fn a_fold_round_trips_and_makes_the_gaps_below_it_folded_not_lost() {
        let header = sample_trace().1[0].clone();
        let Record::Header(header) = header else { unreachable!() };
        let mut writer = TraceWriter::new(Vec::new(), &header).unwrap();
        let fold = Fold {
            process: 0,
            folded_to: 100,
            lost_below: 3,
            folded_events: 90,
            detail_from_ns: 123_456,
            sites: vec![
                FoldedSite {
                    device: Some(1),
                    stack: 7,
                    allocations: 80,
                    frees: 78,
                    bytes: 80 << 20,
                    tensors: false,
                    host: false,
                },
                FoldedSite {
                    device: None,
                    stack: 0,
                    allocations: 5,
                    frees: 5,
                    bytes: 4096,
                    tensors: false,
                    host: true,
                },
            ],
        };
        writer.record(&Record::Fold(fold.clone())).unwrap();
        // State kept from below the fold (seqs 4 and 60), then the detail.
        let kept = [event(4, Op::Alloc, 0x1000), event(60, Op::Alloc, 0x2000)];
        writer.events(0, &kept).unwrap();
        writer
            .events(0, &[event(100, Op::Free, 0x1000), event(102, Op::Free, 0x2000)])
            .unwrap();
        assert_eq!(writer.lost_events(), 3 + 1, "the old losses and seq 101");
        assert_eq!(writer.folded_events(), 90);
        let bytes = writer.into_inner();
        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        assert_eq!(reader.next_record().unwrap(), Some(Record::Header(header)));
        assert_eq!(reader.next_record().unwrap(), Some(Record::Fold(fold)));
    }

    #[test]
    fn a_steps_record_round_trips_and_impossible_steps_are_damage() {
        let state = StepsState {
            process: 3,
            marker_stack: 77,
            marker_device: Some(1),
            tensors: true,
            started: 41,
            stride: 2,
            records: vec![StepRow {
                first: 1,
                last: 40,
                start_ns: 1_000,
                end_ns: 9_000,
                complete: true,
                devices: vec![StepDeviceRow {
                    device: Some(1),
                    allocated_peak: 5 << 20,
                    allocated_end: 1 << 20,
                    reserved_end: Some(8 << 20),
                }],
            }],
            open: Some(StepRow {
                first: 41,
                last: 41,
                start_ns: 9_000,
                end_ns: 9_500,
                complete: false,
                devices: vec![],
            }),
            ends: vec![2, 4, 40],
            series: vec![StepSeries {
                device: None,
                stack: 9,
                bytes: vec![1, 2, 3],
            }],
        };
        let mut payload = Vec::new();
        let tag = crate::encode::encode(&Record::StepsState(state.clone()), &mut payload);
        let decoded = crate::decode::decode(tag, &payload, &|_| Some(1)).unwrap();
        assert_eq!(decoded, Record::StepsState(state.clone()));
        let backwards = StepsState {
            records: vec![StepRow {
                first: 40,
                last: 1,
                ..state.records[0].clone()
            }],
            ..state
        };
        let mut payload = Vec::new();
        let tag = crate::encode::encode(&Record::StepsState(backwards), &mut payload);
        assert_eq!(
            crate::decode::decode(tag, &payload, &|_| Some(1)),
            Err(Malformed::ImpossibleSteps)
        );
    }

    #[test]
    fn a_low_points_record_round_trips_and_points_out_of_order_are_damage() {
        let point = |time_ns, bytes| LowPoint {
            time_ns,
            sites: vec![
                LowPointSite {
                    device: Some(0),
                    stack: 7,
                    bytes,
                },
                LowPointSite {
                    device: None,
                    stack: 9,
                    bytes: 1,
                },
            ],
        };
        let state = LowPointsState {
            process: 2,
            tensors: false,
            points: vec![
                point(1_000, 4096),
                point(2_000, 8192),
                LowPoint {
                    time_ns: 3_000,
                    sites: vec![],
                },
            ],
        };
        let mut payload = Vec::new();
        let tag = crate::encode::encode(&Record::LowPointsState(state.clone()), &mut payload);
        assert_eq!(tag, b'L');
        let decoded = crate::decode::decode(tag, &payload, &|_| Some(1)).unwrap();
        assert_eq!(decoded, Record::LowPointsState(state.clone()));
        let backwards = LowPointsState {
            points: vec![point(2_000, 1), point(1_000, 2)],
            ..state
        };
        let mut payload = Vec::new();
        let tag = crate::encode::encode(&Record::LowPointsState(backwards), &mut payload);
        assert_eq!(
            crate::decode::decode(tag, &payload, &|_| Some(1)),
            Err(Malformed::LowPointsOutOfOrder)
        );
    }

    #[test]
    fn version_3_blocks_with_op_and_kind_in_one_byte_still_decode() {
        // process 0, one event: seq 5, time 100, flags 0, op free (2) | kind pool (3) << 4,
        // api cudaFree (65), time delta 0, address delta 0x1000, size 4096.
        let payload = [0u8, 1, 5, 100, 0, 2 | 3 << 4, 65, 0, 0x80, 0x40, 0x80, 0x20];
        let record = crate::decode::decode(b'E', &payload, &|_| Some(7)).unwrap();
        let Record::Events { process: 0, events } = record else {
            panic!("not an event block: {record:?}")
        };
        assert_eq!(events.len(), 1);
        let e = &events[0];
        assert_eq!((e.pid, e.seq, e.time_ns), (7, 5, 100));
        assert_eq!((e.op, e.kind, e.api), (Op::Free, Kind::Pool, Api::CudaFree));
        assert_eq!((e.address, e.size), (0x1000, 4096));
    }

    #[test]
    fn nvml_records_round_trip() {
        let nvml = NvmlSample {
            time_ns: 4000,
            uuid: "GPU-12345678-9abc-def0-0123-456789abcdef".into(),
            pid: 42,
            used_bytes: 518 << 20,
            free_bytes: 0,
            total_bytes: 0,
        };
        let status = NvmlStatus {
            time_ns: 4001,
            devices_ok: true,
            pids_match: false,
            reason: "NVML names no traced pid".into(),
        };
        let header = match sample_trace().1.remove(0) {
            Record::Header(header) => header,
            other => panic!("not a header: {other:?}"),
        };
        let mut writer = TraceWriter::new(Vec::new(), &header).unwrap();
        writer.record(&Record::Nvml(nvml.clone())).unwrap();
        writer.record(&Record::NvmlStatus(status.clone())).unwrap();
        let bytes = writer.into_inner();
        let read: Vec<Record> = TraceReader::new(&bytes[..]).unwrap().map(Result::unwrap).collect();
        assert_eq!(
            read,
            vec![Record::Header(header), Record::Nvml(nvml), Record::NvmlStatus(status)]
        );
    }

    #[test]
    fn a_process_that_could_not_record_round_trips() {
        let header = sample_trace().1[0].clone();
        let Record::Header(header) = header else { unreachable!() };
        let unrecorded = UnrecordedProcess {
            pid: 43,
            ppid: 42,
            uid: 65534,
            time_ns: 4000,
            errno: 13,
            name: "worker".into(),
            reason: "cannot create its spool in /tmp/run".into(),
        };
        let mut writer = TraceWriter::new(Vec::new(), &header).unwrap();
        writer.record(&Record::Unrecorded(unrecorded.clone())).unwrap();
        let bytes = writer.into_inner();
        let read: Vec<Record> = TraceReader::new(&bytes[..]).unwrap().map(Result::unwrap).collect();
        assert_eq!(read, vec![Record::Header(header), Record::Unrecorded(unrecorded)]);
    }

    #[test]
    fn every_record_round_trips() {
        let (bytes, records) = sample_trace();
        let read: Vec<Record> = TraceReader::new(&bytes[..]).unwrap().map(Result::unwrap).collect();
        assert_eq!(read, records);
    }

    #[test]
    fn a_record_read_again_at_its_offset_is_the_same_record() {
        let (bytes, records) = sample_trace();
        let path = std::env::temp_dir().join(format!("cudatrace-read-at-{}.trace", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let pid_of = |process: u32| (process == 0).then_some(42);
        for (&offset, record) in frame_offsets(&bytes).iter().zip(&records).skip(1) {
            assert_eq!(&read_record_at(&file, offset as u64, &pid_of).unwrap(), record);
        }
        let past_end = read_record_at(&file, bytes.len() as u64, &pid_of).unwrap_err();
        assert_eq!(past_end.offset, bytes.len() as u64);
        assert!(matches!(past_end.problem, Problem::Unreadable(_)), "{past_end:?}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn truncation_keeps_every_whole_record_and_says_where_it_stopped() {
        let (bytes, records) = sample_trace();
        // Find each frame boundary by reading.
        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        let mut boundaries = vec![reader.offset()];
        while reader.next_record().unwrap().is_some() {
            boundaries.push(reader.offset());
        }
        assert_eq!(*boundaries.last().unwrap() as usize, bytes.len());
        for cut in 8..bytes.len() {
            let whole = boundaries.iter().filter(|&&b| b as usize <= cut).count() - 1;
            let mut reader = TraceReader::new(&bytes[..cut]).unwrap();
            let mut got = Vec::new();
            let ending = loop {
                match reader.next_record() {
                    Ok(Some(record)) => got.push(record),
                    Ok(None) => break None,
                    Err(damage) => break Some(damage),
                }
            };
            assert_eq!(got, records[..whole], "cut at {cut}");
            let at_boundary = boundaries.contains(&(cut as u64));
            match ending {
                None => assert!(at_boundary, "cut at {cut} mid-record ended cleanly"),
                Some(damage) => {
                    assert!(!at_boundary);
                    assert_eq!(damage.offset, boundaries[whole]);
                    assert!(
                        matches!(
                            damage.problem,
                            Problem::TruncatedFrameHeader { .. } | Problem::TruncatedRecord { .. }
                        ),
                        "{:?}",
                        damage.problem
                    );
                }
            }
        }
    }

    /// Byte offsets of every frame of a whole trace.
    fn frame_offsets(bytes: &[u8]) -> Vec<usize> {
        let mut reader = TraceReader::new(bytes).unwrap();
        let mut offsets = vec![reader.offset() as usize];
        while reader.next_record().unwrap().is_some() {
            offsets.push(reader.offset() as usize);
        }
        offsets.pop();
        offsets
    }

    fn read_all(bytes: &[u8]) -> Vec<Result<Record, Damage>> {
        TraceReader::new(bytes).unwrap().collect()
    }

    #[test]
    fn a_damaged_frame_is_skipped_when_the_next_one_verifies() {
        let (bytes, records) = sample_trace();
        let frames = frame_offsets(&bytes);
        // Flip a bit in the events block (the third frame).
        let mut damaged = bytes.clone();
        damaged[frames[2] + 7] ^= 0x10;
        let read = read_all(&damaged);
        assert_eq!(
            read,
            vec![
                Ok(records[0].clone()),
                Ok(records[1].clone()),
                Err(Damage {
                    offset: frames[2] as u64,
                    problem: Problem::ChecksumMismatch { tag: Some(b'e') },
                    skipped: true
                }),
                Ok(records[3].clone()),
                Ok(records[4].clone()),
            ]
        );
        // The process record damaged: its events cannot be placed either, and
        // are skipped in turn; the records after them read.
        let mut damaged = bytes.clone();
        damaged[frames[1] + 7] ^= 0x10;
        let read = read_all(&damaged);
        assert_eq!(read.len(), 5);
        assert_eq!(read[0], Ok(records[0].clone()));
        assert_eq!(
            read[1],
            Err(Damage {
                offset: frames[1] as u64,
                problem: Problem::ChecksumMismatch { tag: Some(b'P') },
                skipped: true
            })
        );
        assert_eq!(
            read[2],
            Err(Damage {
                offset: frames[2] as u64,
                problem: Problem::Malformed {
                    tag: Some(b'e'),
                    fault: Malformed::NoProcessRecord { process: 0 }
                },
                skipped: true
            })
        );
        assert_eq!(read[3..], [Ok(records[3].clone()), Ok(records[4].clone())]);
    }

    #[test]
    fn reading_stops_at_damage_when_the_next_frame_does_not_verify() {
        let (bytes, records) = sample_trace();
        let frames = frame_offsets(&bytes);
        let mut damaged = bytes.clone();
        damaged[frames[2] + 7] ^= 0x10;
        damaged[frames[3] + 6] ^= 0x01;
        let read = read_all(&damaged);
        assert_eq!(
            read,
            vec![
                Ok(records[0].clone()),
                Ok(records[1].clone()),
                Err(Damage {
                    offset: frames[2] as u64,
                    problem: Problem::ChecksumMismatch { tag: Some(b'e') },
                    skipped: false
                }),
            ]
        );
        // The last frame damaged: nothing follows it to resume at.
        let mut damaged = bytes.clone();
        damaged[frames[4] + 6] ^= 0x01;
        let read = read_all(&damaged);
        assert_eq!(read.len(), 5);
        assert_eq!(
            read[4],
            Err(Damage {
                offset: frames[4] as u64,
                problem: Problem::ChecksumMismatch { tag: Some(b'F') },
                skipped: false
            })
        );
        // A damaged header ends reading even though the next frame verifies.
        let mut damaged = bytes.clone();
        damaged[frames[0] + 7] ^= 0x10;
        let read = read_all(&damaged);
        assert_eq!(read.len(), 1);
        assert!(matches!(
            &read[0],
            Err(Damage {
                offset: 8,
                skipped: false,
                ..
            })
        ));
    }

    /// A frame whose header claims more than the file holds.
    fn frame(tag: u8, claimed: u32, payload: &[u8]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.push(tag);
        bytes.extend_from_slice(&claimed.to_le_bytes());
        bytes.extend_from_slice(payload);
        let crc = crate::crc32::update(crate::crc32::update(0, &bytes[8..13]), payload);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn claims_larger_than_the_input_are_not_believed() {
        // 60 MiB claimed, 3 bytes present: reported, not allocated.
        let bytes = frame(b'H', 60 << 20, b"abc");
        let damage = TraceReader::new(&bytes[..]).unwrap().next_record().unwrap_err();
        assert_eq!(
            damage.problem,
            Problem::TruncatedRecord {
                got: 7,
                wanted: (60 << 20) + 4
            }
        );
        // A block claiming a million events in a dozen bytes.
        let (trace, _) = sample_trace();
        let mut reader = TraceReader::new(&trace[..]).unwrap();
        reader.next_record().unwrap();
        reader.next_record().unwrap(); // process 0 is now known
        let payload = [0u8, 0xc0, 0x84, 0x3d, 1, 2, 3, 4, 5, 6, 7, 8];
        let mut block = frame(b'e', payload.len() as u32, &payload);
        let mut reader_input = trace[..reader.offset() as usize].to_vec();
        reader_input.extend_from_slice(&block.split_off(8));
        let mut reader = TraceReader::new(&reader_input[..]).unwrap();
        reader.next_record().unwrap();
        reader.next_record().unwrap();
        let damage = reader.next_record().unwrap_err();
        assert_eq!(
            damage.problem,
            Problem::Malformed {
                tag: Some(b'e'),
                fault: Malformed::MoreEventsThanBytes
            }
        );
    }

    #[test]
    fn bad_magic_is_refused() {
        let damage = TraceReader::new(&b"CUTRSPL\0xxxx"[..]).err().unwrap();
        assert_eq!((damage.offset, damage.problem), (0, Problem::NotATrace));
    }
}
