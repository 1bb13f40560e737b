//! What PyTorch's memory visualizer does with a snapshot, written again for
//! the tests: its unpickler, which knows only some opcodes, and its
//! Allocator State History replay, which crashes on inconsistent files.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Reads a pickle as the viewer's JavaScript unpickler does, refusing every
/// opcode it lacks and every integer it would turn into a BigInt. Tuples
/// become arrays. Also returns the largest `APPENDS`/`SETITEMS` batch.
pub fn unpickle(bytes: &[u8]) -> Result<(Value, usize), String> {
    enum Item {
        Value(Value),
        Mark,
    }
    let mut stack: Vec<Item> = Vec::new();
    let mut memo: BTreeMap<u32, Value> = BTreeMap::new();
    let mut at = 0usize;
    let mut largest_batch = 0;
    let take = |at: &mut usize, n: usize| -> Result<&[u8], String> {
        let slice = bytes.get(*at..*at + n).ok_or("read past the end")?;
        *at += n;
        Ok(slice)
    };
    fn pop(stack: &mut Vec<Item>) -> Result<Value, String> {
        match stack.pop() {
            Some(Item::Value(v)) => Ok(v),
            _ => Err("stack underflow".into()),
        }
    }
    fn since_mark(stack: &mut Vec<Item>) -> Result<Vec<Value>, String> {
        let mark = stack.iter().rposition(|i| matches!(i, Item::Mark)).ok_or("no mark")?;
        let items: Vec<Value> = stack
            .drain(mark + 1..)
            .map(|i| match i {
                Item::Value(v) => v,
                Item::Mark => unreachable!(),
            })
            .collect();
        stack.pop();
        Ok(items)
    }
    loop {
        let code = *bytes.get(at).ok_or("UNKNOWN OPCODE: undefined (no STOP)")?;
        at += 1;
        match code {
            0x80 => {
                let version = take(&mut at, 1)?[0];
                if !(2..=4).contains(&version) {
                    return Err(format!("Unhandled version {version}"));
                }
            }
            0x95 => {
                take(&mut at, 8)?;
            }
            b'.' => return Ok((pop(&mut stack)?, largest_batch)),
            b'(' => stack.push(Item::Mark),
            b'}' => stack.push(Item::Value(Value::Object(Map::new()))),
            b']' | b')' => stack.push(Item::Value(Value::Array(Vec::new()))),
            b'd' | b'u' => {
                let items = since_mark(&mut stack)?;
                largest_batch = largest_batch.max(items.len() / 2);
                if items.len() % 2 != 0 {
                    return Err("odd number of items for a dict".into());
                }
                let mut dict = if code == b'd' {
                    Value::Object(Map::new())
                } else {
                    pop(&mut stack)?
                };
                for pair in items.chunks(2) {
                    let key = match &pair[0] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    dict.as_object_mut()
                        .ok_or("SETITEMS on a non-dict")?
                        .insert(key, pair[1].clone());
                }
                stack.push(Item::Value(dict));
            }
            b's' => {
                let value = pop(&mut stack)?;
                let key = pop(&mut stack)?;
                let mut dict = pop(&mut stack)?;
                let key = key.as_str().map_or_else(|| key.to_string(), str::to_string);
                dict.as_object_mut().ok_or("SETITEM on a non-dict")?.insert(key, value);
                stack.push(Item::Value(dict));
            }
            b'l' | b't' => {
                let items = since_mark(&mut stack)?;
                stack.push(Item::Value(Value::Array(items)));
            }
            b'a' => {
                let value = pop(&mut stack)?;
                let mut list = pop(&mut stack)?;
                list.as_array_mut().ok_or("APPEND on a non-list")?.push(value);
                stack.push(Item::Value(list));
            }
            b'e' => {
                let items = since_mark(&mut stack)?;
                largest_batch = largest_batch.max(items.len());
                let mut list = pop(&mut stack)?;
                list.as_array_mut().ok_or("APPENDS on a non-list")?.extend(items);
                stack.push(Item::Value(list));
            }
            0x85..=0x87 => {
                let n = (code - 0x84) as usize;
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(pop(&mut stack)?);
                }
                items.reverse();
                stack.push(Item::Value(Value::Array(items)));
            }
            b'N' => stack.push(Item::Value(Value::Null)),
            0x88 => stack.push(Item::Value(json!(true))),
            0x89 => stack.push(Item::Value(json!(false))),
            b'K' => stack.push(Item::Value(json!(take(&mut at, 1)?[0]))),
            b'M' => {
                let b = take(&mut at, 2)?;
                stack.push(Item::Value(json!(u16::from_le_bytes([b[0], b[1]]))));
            }
            b'J' => {
                let b = take(&mut at, 4)?;
                stack.push(Item::Value(json!(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))));
            }
            0x8a => {
                let n = take(&mut at, 1)?[0] as usize;
                if n > 8 {
                    return Err(format!("LONG1 of {n} bytes would be a BigInt"));
                }
                let b = take(&mut at, n)?;
                let mut full = [if n > 0 && b[n - 1] & 0x80 != 0 { 0xff } else { 0 }; 8];
                full[..n].copy_from_slice(b);
                stack.push(Item::Value(json!(i64::from_le_bytes(full))));
            }
            b'G' => {
                let b = take(&mut at, 8)?;
                stack.push(Item::Value(json!(f64::from_be_bytes(b.try_into().unwrap()))));
            }
            0x8c | b'X' => {
                let n = if code == 0x8c {
                    take(&mut at, 1)?[0] as usize
                } else {
                    let b = take(&mut at, 4)?;
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                };
                let text = std::str::from_utf8(take(&mut at, n)?).map_err(|e| e.to_string())?;
                stack.push(Item::Value(json!(text)));
            }
            0x94 | b'q' | b'r' => {
                let index = match code {
                    0x94 => memo.len() as u32,
                    b'q' => take(&mut at, 1)?[0] as u32,
                    _ => {
                        let b = take(&mut at, 4)?;
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
                    }
                };
                match stack.last() {
                    Some(Item::Value(v)) => memo.insert(index, v.clone()),
                    _ => return Err("memoize with no value".into()),
                };
            }
            b'h' | b'j' => {
                let index = if code == b'h' {
                    take(&mut at, 1)?[0] as u32
                } else {
                    let b = take(&mut at, 4)?;
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
                };
                let value = memo
                    .get(&index)
                    .ok_or(format!("memo {index} read before it was written"))?;
                stack.push(Item::Value(value.clone()));
            }
            other => return Err(format!("UNKNOWN OPCODE: {other}")),
        }
    }
}

/// A segment in the replay: (address, size, stream).
type Segment = (i64, i64, i64);

/// Replays one device's trace backwards from the final segments, as the
/// Allocator State History view does, checking at every step what it
/// needs: every live block inside a live segment, segments apart, a block
/// for every `free_requested`, a containing segment for every
/// `segment_map`. Forwards, every free must follow its alloc unless
/// `window` (the trace may start after an allocation).
pub fn check_replay(snapshot: &Value, device: usize, window: bool) -> Result<(), String> {
    let as_i64 = |v: &Value, what: &str| v.as_i64().ok_or_else(|| format!("{what} is not an integer: {v}"));
    let mut segments: Vec<Segment> = Vec::new();
    let mut blocks: BTreeMap<i64, (i64, bool)> = BTreeMap::new();
    for segment in snapshot["segments"].as_array().ok_or("no segments")? {
        if segment["device"].as_u64() != Some(device as u64) {
            continue;
        }
        let address = as_i64(&segment["address"], "segment address")?;
        let total = as_i64(&segment["total_size"], "total_size")?;
        let mut at = address;
        for block in segment["blocks"].as_array().ok_or("segment without blocks")? {
            let size = as_i64(&block["size"], "block size")?;
            as_i64(&block["requested_size"], "block requested_size")?;
            for frame in block["frames"].as_array().ok_or("block frames not a list")? {
                frame["filename"].as_str().ok_or("frame filename not a string")?;
                frame["name"].as_str().ok_or("frame name not a string")?;
            }
            if block["state"] == "active_allocated" {
                blocks.insert(at, (size, false));
            }
            at += size;
        }
        if at != address + total {
            return Err(format!(
                "blocks of segment {address:#x} add up to {} of {total}",
                at - address
            ));
        }
        segments.push((address, total, as_i64(&segment["stream"], "stream")?));
    }
    let trace = snapshot["device_traces"][device]
        .as_array()
        .ok_or("no trace for the device")?
        .clone();
    // Forwards: every free has its alloc.
    if !window {
        let mut live = std::collections::HashSet::new();
        for entry in &trace {
            let addr = entry["addr"].as_i64().unwrap_or(-1);
            match entry["action"].as_str() {
                Some("alloc") => {
                    live.insert(addr);
                }
                Some("free_requested") if !live.contains(&addr) => {
                    return Err(format!("free of {addr:#x} with no alloc"))
                }
                Some("free_completed") => {
                    live.remove(&addr);
                }
                _ => {}
            }
        }
    }
    // The viewer merges free_requested + free_completed of one address.
    let mut events: Vec<(String, i64, i64, i64)> = Vec::new();
    for entry in &trace {
        let action = entry["action"].as_str().ok_or("entry without action")?.to_string();
        for key in ["size", "stream", "time_us"] {
            as_i64(&entry[key], key)?;
        }
        let addr = if action == "oom" {
            0
        } else {
            as_i64(&entry["addr"], "addr")?
        };
        let size = as_i64(&entry["size"], "size")?;
        let stream = as_i64(&entry["stream"], "stream")?;
        if action == "free_completed" {
            if let Some(last) = events.last_mut() {
                if last.0 == "free_requested" && last.1 == addr {
                    last.0 = "free".into();
                    continue;
                }
            }
        }
        events.push((action, addr, size, stream));
    }
    check_state(&segments, &blocks)?;
    for (index, (action, addr, size, stream)) in events.iter().enumerate().rev() {
        match action.as_str() {
            "free" => {
                blocks.insert(*addr, (*size, false));
            }
            "free_completed" => {
                blocks.insert(*addr, (*size, true));
            }
            "free_requested" => {
                blocks
                    .get_mut(addr)
                    .ok_or(format!("event {index}: undoing free_requested of {addr:#x}: no block"))?
                    .1 = false;
            }
            "alloc" => {
                blocks.remove(addr);
            }
            "segment_free" => segments.push((*addr, *size, *stream)),
            "segment_unmap" => {
                segments.push((*addr, *size, *stream));
                segments.sort();
                let mut merged: Vec<Segment> = Vec::new();
                for s in segments.drain(..) {
                    match merged.last_mut() {
                        Some(last) if last.0 + last.1 == s.0 && last.2 == s.2 => last.1 += s.1,
                        _ => merged.push(s),
                    }
                }
                segments = merged;
            }
            "segment_alloc" => {
                let at = segments.iter().position(|s| s.0 == *addr).ok_or(format!(
                    "event {index}: undoing segment_alloc of {addr:#x}: no such segment"
                ))?;
                segments.remove(at);
            }
            "segment_map" => {
                let at = segments
                    .iter()
                    .position(|s| s.0 <= *addr && addr + size <= s.0 + s.1)
                    .ok_or(format!(
                        "event {index}: undoing segment_map of {addr:#x}: no segment holds it"
                    ))?;
                let s = segments.remove(at);
                if s.0 < *addr {
                    segments.push((s.0, addr - s.0, s.2));
                }
                if addr + size < s.0 + s.1 {
                    segments.push((addr + size, s.0 + s.1 - addr - size, *stream));
                }
            }
            _ => {}
        }
        check_state(&segments, &blocks).map_err(|e| format!("before event {index} ({action}): {e}"))?;
    }
    Ok(())
}

fn check_state(segments: &[Segment], blocks: &BTreeMap<i64, (i64, bool)>) -> Result<(), String> {
    let mut sorted = segments.to_vec();
    sorted.sort();
    for pair in sorted.windows(2) {
        if pair[0].0 + pair[0].1 > pair[1].0 {
            return Err(format!("segments {:#x} and {:#x} overlap", pair[0].0, pair[1].0));
        }
    }
    for (&addr, &(size, _)) in blocks {
        if !sorted.iter().any(|s| s.0 <= addr && addr + size <= s.0 + s.1) {
            return Err(format!("block {addr:#x} of {size} bytes lies in no segment"));
        }
    }
    Ok(())
}
