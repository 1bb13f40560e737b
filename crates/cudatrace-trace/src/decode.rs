//! Reading a record's payload back, never trusting a count or a code: a
//! fault is named as a [`Malformed`], and the record is not produced.

use crate::event_block;
use crate::format::*;
use crate::problem::Malformed;
use crate::varint::Cursor;
use cudatrace_events::recording_switch::{Switch, SwitchState};

fn get_strings(cursor: &mut Cursor) -> Result<Vec<String>, Malformed> {
    let count = cursor.get()?;
    if count > cursor.remaining() as u64 {
        return Err(Malformed::MoreStringsThanBytes);
    }
    (0..count).map(|_| cursor.string()).collect()
}

/// A rank (or world size) stored plus one; 0 is none.
fn get_rank(c: &mut Cursor) -> Result<Option<u32>, Malformed> {
    Ok(match c.get()? {
        0 => None,
        n => Some(u32::try_from(n - 1).map_err(|_| Malformed::RankOutOfRange)?),
    })
}

fn decode_process(c: &mut Cursor) -> Result<Record, Malformed> {
    let mut start = ProcessStart {
        process: c.get_u32()?,
        pid: c.get_u32()?,
        ppid: c.get_u32()?,
        image: c.get_u32()?,
        start_monotonic_ns: c.get()?,
        start_realtime_ns: c.get()?,
        argv: get_strings(c)?,
        place: Default::default(),
    };
    // Format 12 added the host and ranks after the command line.
    if c.remaining() > 0 {
        start.place.host = c.string()?;
        start.place.rank = get_rank(c)?;
        start.place.local_rank = get_rank(c)?;
        start.place.world_size = get_rank(c)?;
    }
    Ok(Record::Process(start))
}

fn decode_process_end(c: &mut Cursor) -> Result<Record, Malformed> {
    let process = c.get_u32()?;
    let status = c.get_signed()?;
    let exit_status = if status == i64::MIN {
        None
    } else {
        Some(i32::try_from(status).map_err(|_| Malformed::ExitStatusOutOfRange)?)
    };
    let exit_time_ns = c.get()?.checked_sub(1);
    let mut end = ProcessEnd {
        process,
        exit_status,
        exit_time_ns,
        still_running: c.get()? != 0,
        unfinished_records: c.get()?,
        unknown_frees: c.get()?,
        registry_overflows: c.get()?,
        dropped_records: c.get()?,
        drop_errno: match c.get_signed()? {
            0 => None,
            errno => Some(i32::try_from(errno).map_err(|_| Malformed::ErrnoOutOfRange)?),
        },
        reserved_events: c.get()?,
        damaged_records: c.get()?,
        ranks_at_end: [None; 3],
        exec_into: None,
        process_exit_status: None,
    };
    // Format 12 added the ranks as the process ended.
    if c.remaining() > 0 {
        for number in &mut end.ranks_at_end {
            *number = get_rank(c)?;
        }
    }
    // Format 13 added what an image exec'd, and its process's status.
    if c.remaining() > 0 {
        end.exec_into = Some(c.string()?).filter(|path| !path.is_empty());
        end.process_exit_status = match c.get_signed()? {
            i64::MIN => None,
            status => Some(i32::try_from(status).map_err(|_| Malformed::ExitStatusOutOfRange)?),
        };
    }
    Ok(Record::ProcessEnd(end))
}

/// A list's length, refused when the payload cannot hold that many items.
fn list_len(c: &mut Cursor) -> Result<usize, Malformed> {
    let count = c.get()?;
    if count > c.remaining() as u64 {
        return Err(Malformed::MoreNodesThanBytes);
    }
    Ok(count as usize)
}

fn get_device(c: &mut Cursor) -> Result<Option<u8>, Malformed> {
    Ok(u8::try_from(c.get_signed()?).ok())
}

/// More steps than a run could make: a step a nanosecond for a century.
const MOST_STEPS: u64 = 1 << 62;

fn decode_step_row(c: &mut Cursor) -> Result<StepRow, Malformed> {
    let mut row = StepRow {
        first: c.get()?,
        last: c.get()?,
        start_ns: c.get()?,
        end_ns: c.get()?,
        complete: c.get()? != 0,
        devices: Vec::new(),
    };
    if row.first == 0 || row.first > row.last || row.last > MOST_STEPS {
        return Err(Malformed::ImpossibleSteps);
    }
    for _ in 0..list_len(c)? {
        row.devices.push(StepDeviceRow {
            device: get_device(c)?,
            allocated_peak: c.get()?,
            allocated_end: c.get()?,
            reserved_end: c.get()?.checked_sub(1),
        });
    }
    Ok(row)
}

fn decode_steps_state(c: &mut Cursor) -> Result<Record, Malformed> {
    let mut state = StepsState {
        process: c.get_u32()?,
        marker_stack: c.get_u32()?,
        marker_device: get_device(c)?,
        tensors: c.get()? != 0,
        started: c.get()?,
        stride: c.get()?,
        ..StepsState::default()
    };
    if state.started > MOST_STEPS || state.stride == 0 || state.stride > MOST_STEPS {
        return Err(Malformed::ImpossibleSteps);
    }
    for _ in 0..list_len(c)? {
        state.records.push(decode_step_row(c)?);
    }
    if c.get()? != 0 {
        state.open = Some(decode_step_row(c)?);
    }
    for _ in 0..list_len(c)? {
        let end = c.get()?;
        if end == 0 || end > state.started {
            return Err(Malformed::ImpossibleSteps);
        }
        state.ends.push(end);
    }
    for _ in 0..list_len(c)? {
        let device = get_device(c)?;
        let stack = c.get_u32()?;
        let bytes = (0..list_len(c)?).map(|_| c.get()).collect::<Result<Vec<u64>, _>>()?;
        state.series.push(StepSeries { device, stack, bytes });
    }
    Ok(Record::StepsState(state))
}

fn decode_low_points_state(c: &mut Cursor) -> Result<Record, Malformed> {
    let mut state = LowPointsState {
        process: c.get_u32()?,
        tensors: c.get()? != 0,
        points: Vec::new(),
    };
    for _ in 0..list_len(c)? {
        let time_ns = c.get()?;
        if state.points.last().is_some_and(|p| p.time_ns > time_ns) {
            return Err(Malformed::LowPointsOutOfOrder);
        }
        let mut point = LowPoint {
            time_ns,
            sites: Vec::new(),
        };
        for _ in 0..list_len(c)? {
            point.sites.push(LowPointSite {
                device: get_device(c)?,
                stack: c.get_u32()?,
                bytes: c.get()?,
            });
        }
        state.points.push(point);
    }
    Ok(Record::LowPointsState(state))
}

fn decode_fold(c: &mut Cursor) -> Result<Record, Malformed> {
    let mut fold = Fold {
        process: c.get_u32()?,
        folded_to: c.get()?,
        lost_below: c.get()?,
        folded_events: c.get()?,
        detail_from_ns: c.get()?,
        sites: Vec::new(),
    };
    for _ in 0..list_len(c)? {
        let device = c.get_signed()?;
        fold.sites.push(FoldedSite {
            device: u8::try_from(device).ok(),
            stack: c.get_u32()?,
            allocations: c.get()?,
            frees: c.get()?,
            bytes: c.get()?,
            tensors: false,
            host: false,
        });
        let flags = c.get()?;
        let site = fold.sites.last_mut().expect("just pushed");
        site.tensors = flags & 1 != 0;
        site.host = flags & 2 != 0;
    }
    Ok(Record::Fold(fold))
}

fn decode_symbols(c: &mut Cursor) -> Result<Record, Malformed> {
    let process = c.get_u32()?;
    let count = list_len(c)?;
    let mut nodes = Vec::with_capacity(count);
    for _ in 0..count {
        let node = c.get_u32()?;
        let frame_count = c.get()?;
        if frame_count > c.remaining() as u64 {
            return Err(Malformed::MoreFramesThanBytes);
        }
        let frames = (0..frame_count)
            .map(|_| {
                Ok(SymbolFrame {
                    function: c.get()?,
                    file: c.get()?,
                    line: c.get_u32()?,
                    module: c.get()?,
                })
            })
            .collect::<Result<_, Malformed>>()?;
        nodes.push(NodeSymbols { node, frames });
    }
    Ok(Record::Symbols { process, nodes })
}

/// Decodes a payload. `pid_of` maps process indexes seen so far to pids.
pub(crate) fn decode(tag: u8, payload: &[u8], pid_of: &dyn Fn(u32) -> Option<u32>) -> Result<Record, Malformed> {
    let mut c = Cursor::new(payload);
    let record = match tag {
        TAG_HEADER => Record::Header(Header {
            format_version: c.get_u32()?,
            tracer_version: c.string()?,
            host: c.string()?,
            start_realtime_ns: c.get()?,
            start_monotonic_ns: c.get()?,
            command: get_strings(&mut c)?,
        }),
        TAG_PROCESS => decode_process(&mut c)?,
        TAG_EVENTS => event_block::decode_events(&mut c, pid_of, false)?,
        TAG_EVENTS_PACKED => event_block::decode_events(&mut c, pid_of, true)?,
        TAG_PROCESS_END => decode_process_end(&mut c)?,
        TAG_REFUSED => Record::Refused(Refusal {
            path: c.string()?,
            uid: c.get_u32()?,
            reason: c.string()?,
        }),
        TAG_DAMAGED_SPOOL => Record::DamagedSpool(DamagedSpool {
            pid: c.get_u32()?,
            image: c.get_u32()?,
            path: c.string()?,
            reason: c.string()?,
        }),
        TAG_UNRECORDED => Record::Unrecorded(UnrecordedProcess {
            pid: c.get_u32()?,
            ppid: c.get_u32()?,
            uid: c.get_u32()?,
            time_ns: c.get()?,
            errno: i32::try_from(c.get_signed()?).map_err(|_| Malformed::ErrnoOutOfRange)?,
            name: c.string()?,
            reason: c.string()?,
        }),
        TAG_STRING => Record::String {
            id: c.get()?,
            text: c.string()?,
        },
        TAG_SYMBOLS => decode_symbols(&mut c)?,
        TAG_FOOTER => Record::Footer(Footer {
            processes: c.get()?,
            events: c.get()?,
            dropped_events: c.get()?,
            refused_spools: c.get()?,
            end_realtime_ns: c.get()?,
            lost_events: c.get()?,
            damaged_spools: c.get()?,
        }),
        TAG_NVML => Record::Nvml(NvmlSample {
            time_ns: c.get()?,
            uuid: c.string()?,
            pid: c.get_u32()?,
            used_bytes: c.get()?,
            free_bytes: c.get()?,
            total_bytes: c.get()?,
        }),
        TAG_NVML_STATUS => {
            let time_ns = c.get()?;
            let flags = c.get()?;
            Record::NvmlStatus(NvmlStatus {
                time_ns,
                devices_ok: flags & 1 != 0,
                pids_match: flags & 2 != 0,
                reason: c.string()?,
            })
        }
        TAG_RECORDING_SWITCH => Record::RecordingSwitch(Switch {
            time_ns: c.get()?,
            state: SwitchState::from_word(c.get()?),
        }),
        TAG_FOLD => decode_fold(&mut c)?,
        TAG_STEPS_STATE => decode_steps_state(&mut c)?,
        TAG_LOW_POINTS_STATE => decode_low_points_state(&mut c)?,
        other => return Ok(Record::Unknown { tag: other }),
    };
    if !c.is_empty() {
        return Err(Malformed::TrailingBytes);
    }
    Ok(record)
}
