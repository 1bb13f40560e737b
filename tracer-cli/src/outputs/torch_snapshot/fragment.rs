//! One device's trace entries, pickled into an unnamed temporary file until
//! the snapshot is put together, and the memo indices shared across them.

use super::viewer_state::Entry;
use crate::outputs::pickle::Pickler;
use cudatrace_analysis::{Frame, ProcessIndex, TraceIndex};
use cudatrace_events::tensors::Action;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Seek, Write};
use std::path::Path;

/// One device's trace entries, pickled into a temporary file.
pub(super) struct Fragment {
    pub(super) pickler: Pickler<BufWriter<File>>,
    /// Memo indices of the strings and frame lists this fragment wrote.
    pub(super) strings: HashMap<&'static str, u32>,
    pub(super) frames: HashMap<u32, u32>,
}

/// Memo indices handed out across a process's pickle and its fragments.
#[derive(Default)]
pub struct Memo {
    pub(super) next: u32,
    /// Frame lists memoized by any of the process's fragments (all precede
    /// the segments), by process image and stack.
    pub(super) frames: HashMap<(u32, u32), u32>,
}

impl Fragment {
    pub(super) fn create(folder: &Path) -> io::Result<Fragment> {
        let file = anonymous_file(folder)?;
        let mut pickler = Pickler::fragment(BufWriter::with_capacity(1 << 20, file));
        pickler.begin_list()?;
        Ok(Fragment {
            pickler,
            strings: HashMap::new(),
            frames: HashMap::new(),
        })
    }

    pub(super) fn write_entry(
        &mut self,
        index: &TraceIndex,
        info: &ProcessIndex,
        entry: &Entry,
        memo: &mut Memo,
    ) -> io::Result<()> {
        self.pickler.item()?;
        self.pickler.begin_dict()?;
        self.key_str("action", entry.action.name(), memo)?;
        if entry.action == Action::Oom {
            self.key(memo, "device_free", |p| p.uint(entry.device_free))?;
        } else {
            self.key(memo, "addr", |p| p.uint(entry.address))?;
        }
        self.key(memo, "size", |p| p.uint(entry.size))?;
        self.key(memo, "stream", |p| p.uint(entry.stream))?;
        self.key(memo, "time_us", |p| p.uint(index.epoch_us(entry.time_ns)))?;
        self.pickler.item()?;
        self.string("frames", memo)?;
        write_frames(&mut self.pickler, index, info, entry.stack, &mut self.frames, memo)?;
        self.pickler.item_done()?;
        self.pickler.end()?;
        self.pickler.item_done()
    }

    pub(super) fn string(&mut self, text: &'static str, memo: &mut Memo) -> io::Result<()> {
        match self.strings.get(text) {
            Some(&id) => self.pickler.get(id),
            None => {
                self.pickler.str(text)?;
                let id = memo.next;
                memo.next += 1;
                self.strings.insert(text, id);
                self.pickler.put(id)
            }
        }
    }

    pub(super) fn key(
        &mut self,
        memo: &mut Memo,
        key: &'static str,
        value: impl FnOnce(&mut Pickler<BufWriter<File>>) -> io::Result<()>,
    ) -> io::Result<()> {
        self.pickler.item()?;
        self.string(key, memo)?;
        value(&mut self.pickler)?;
        self.pickler.item_done()
    }

    pub(super) fn key_str(&mut self, key: &'static str, value: &'static str, memo: &mut Memo) -> io::Result<()> {
        self.pickler.item()?;
        self.string(key, memo)?;
        self.string(value, memo)?;
        self.pickler.item_done()
    }

    /// The fragment's bytes, from the start.
    pub(super) fn into_file(self) -> io::Result<File> {
        let mut file = self.pickler.into_fragment()?.into_inner().map_err(|e| e.into_error())?;
        file.rewind()?;
        Ok(file)
    }
}

/// A file in `folder` with no name: it goes away with its handle.
pub(super) fn anonymous_file(folder: &Path) -> io::Result<File> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = folder.join(format!(".cudatrace-snapshot-{}-{n}.part", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// Writes the frame list of `stack` (innermost first), memoized: the
/// viewer never changes frame lists, so they may be shared.
pub(super) fn write_frames<W: Write>(
    pickler: &mut Pickler<W>,
    index: &TraceIndex,
    info: &ProcessIndex,
    stack: u32,
    local: &mut HashMap<u32, u32>,
    memo: &mut Memo,
) -> io::Result<()> {
    if let Some(&id) = local.get(&stack) {
        return pickler.get(id);
    }
    pickler.begin_list()?;
    for frame in index.frames(info, stack) {
        pickler.push(|p| write_frame(p, &frame))?;
    }
    pickler.end()?;
    let id = memo.next;
    memo.next += 1;
    pickler.put(id)?;
    local.insert(stack, id);
    memo.frames.insert((info.start.process, stack), id);
    Ok(())
}

pub(super) fn write_frame<W: Write>(pickler: &mut Pickler<W>, frame: &Frame) -> io::Result<()> {
    pickler.begin_dict()?;
    let filename = frame
        .file
        .clone()
        .or_else(|| frame.module.clone())
        .unwrap_or_else(|| "??".into());
    pickler.entry("filename", |p| p.str(&filename))?;
    pickler.entry("line", |p| p.uint(u64::from(frame.line.unwrap_or(0))))?;
    pickler.entry("name", |p| p.str(&frame.function))?;
    pickler.end()
}
