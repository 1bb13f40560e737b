//! `events.parquet` being written: rows gathered into row groups of
//! [`ROW_GROUP_ROWS`], each written column by column once full, so that
//! memory is one row group's, whatever the number of events.

use super::schemas::{events_schema, properties, EVENT_COLUMNS};
use cudatrace_events::{Api, Kind};
use foldhash::HashMap;
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::errors::{ParquetError, Result};
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use std::io::Write;

/// Rows a row group holds (the last one fewer).
pub const ROW_GROUP_ROWS: usize = 1 << 20;

/// Values handed to a column writer at once.
const BATCH: usize = 8192;

/// What a row records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowAction {
    /// Memory came into use.
    Alloc,
    /// Memory went out of use.
    Free,
    /// PyTorch's caching allocator handed a block to a tensor.
    TensorAlloc,
    /// A tensor's block became free for reuse.
    TensorFree,
    /// An allocation failed for lack of memory.
    Oom,
}

impl RowAction {
    /// The `action` column's text.
    pub fn name(self) -> &'static str {
        match self {
            RowAction::Alloc => "alloc",
            RowAction::Free => "free",
            RowAction::TensorAlloc => "tensor_alloc",
            RowAction::TensorFree => "tensor_free",
            RowAction::Oom => "oom",
        }
    }

    const ALL: [RowAction; 5] = [
        RowAction::Alloc,
        RowAction::Free,
        RowAction::TensorAlloc,
        RowAction::TensorFree,
        RowAction::Oom,
    ];
}

/// One process of one input trace: what every row of it repeats.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// The trace's name, in [`Texts`].
    pub trace: u32,
    /// The host, in [`Texts`].
    pub host: u32,
    /// Its rank in its job, where known.
    pub rank: Option<u32>,
    /// Process id.
    pub pid: u32,
    /// Its index within its trace.
    pub process: u32,
    /// Its clock anchor: `CLOCK_MONOTONIC` at its start ...
    pub start_monotonic_ns: u64,
    /// ... and the wall clock at the same instant.
    pub start_realtime_ns: u64,
}

impl Source {
    /// Wall-clock ns since the Unix epoch of monotonic time `time_ns`.
    fn wall_time_ns(&self, time_ns: u64) -> i64 {
        let wall = self.start_realtime_ns as i128 + (time_ns as i128 - self.start_monotonic_ns as i128);
        wall.clamp(0, i64::MAX as i128) as i64
    }
}

/// One row of `events.parquet`, its texts and process by number.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// `CLOCK_MONOTONIC` ns, as the trace has it.
    pub time_ns: u64,
    /// Address, or handle.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// The event's sequence number in its process.
    pub seq: u64,
    /// The call site, where the row has a call stack.
    pub call_site_id: Option<u64>,
    /// Index in [`EventsFile::source`]'s list.
    pub source: u32,
    /// The owner, in [`Texts`].
    pub owner: u32,
    /// Device ordinal, where known.
    pub device: Option<u8>,
    /// What happened.
    pub action: RowAction,
    /// The CUDA call.
    pub api: Api,
    /// Sort of memory.
    pub kind: Kind,
}

/// Texts stored once, numbered.
#[derive(Default)]
pub struct Texts {
    ids: HashMap<String, u32>,
    values: Vec<ByteArray>,
}

impl Texts {
    /// The number of `text`, given one if new.
    pub fn id(&mut self, text: &str) -> u32 {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        let id = self.values.len() as u32;
        // Kept for the process's life (a command's run): a static text's
        // copies are counted by no one, where a shared one's clone and drop
        // are an atomic each, for every row of six columns.
        let kept: &'static str = Box::leak(text.to_string().into_boxed_str());
        self.values
            .push(ByteArray::from(bytes::Bytes::from_static(kept.as_bytes())));
        self.ids.insert(text.to_string(), id);
        id
    }

    fn get(&self, id: u32) -> ByteArray {
        self.values[id as usize].clone()
    }
}

/// `events.parquet`, being written.
pub struct EventsFile<W: Write + Send> {
    writer: SerializedFileWriter<W>,
    rows: Vec<Row>,
    /// Rows a row group holds: [`ROW_GROUP_ROWS`], fewer in tests.
    row_group_rows: usize,
    sources: Vec<Source>,
    /// The texts rows refer to.
    pub texts: Texts,
    /// The `api`, `kind` and `action` columns' texts, by code.
    api_names: Vec<ByteArray>,
    kind_names: Vec<ByteArray>,
    action_names: Vec<ByteArray>,
    /// Rows written so far, the buffered ones too.
    pub rows_written: u64,
}

/// The texts of every value of a code, indexed by code.
fn names<T: Copy>(all: &[T], code: impl Fn(T) -> usize, name: impl Fn(T) -> &'static str) -> Vec<ByteArray> {
    let len = all.iter().map(|&value| code(value) + 1).max().unwrap_or(0);
    let mut names = vec![ByteArray::from(Vec::new()); len];
    for &value in all {
        names[code(value)] = ByteArray::from(bytes::Bytes::from_static(name(value).as_bytes()));
    }
    names
}

impl<W: Write + Send> EventsFile<W> {
    /// Starts the file in `out`.
    pub fn new(out: W) -> Result<EventsFile<W>> {
        Ok(EventsFile {
            writer: SerializedFileWriter::new(out, events_schema()?, properties())?,
            rows: Vec::new(),
            row_group_rows: ROW_GROUP_ROWS,
            sources: Vec::new(),
            texts: Texts::default(),
            api_names: names(Api::ALL, |a| a as usize, Api::name),
            kind_names: names(Kind::ALL, |k| k as usize, Kind::name),
            action_names: names(&RowAction::ALL, |a| a as usize, RowAction::name),
            rows_written: 0,
        })
    }

    /// Numbers a process whose rows follow.
    pub fn source(&mut self, source: Source) -> u32 {
        self.sources.push(source);
        (self.sources.len() - 1) as u32
    }

    /// Adds a row, writing a row group once one is full.
    pub fn push(&mut self, row: Row) -> Result<()> {
        if self.rows.capacity() == 0 {
            self.rows.reserve_exact(self.row_group_rows);
        }
        self.rows.push(row);
        self.rows_written += 1;
        if self.rows.len() >= self.row_group_rows {
            self.write_row_group()?;
        }
        Ok(())
    }

    /// Writes the rows gathered as one row group.
    fn write_row_group(&mut self) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let mut group = self.writer.next_row_group()?;
        let mut column = 0;
        while let Some(mut writer) = group.next_column()? {
            let name = EVENT_COLUMNS[column].0;
            for rows in self.rows.chunks(BATCH) {
                let columns = Columns {
                    rows,
                    sources: &self.sources,
                    texts: &self.texts,
                    api_names: &self.api_names,
                    kind_names: &self.kind_names,
                    action_names: &self.action_names,
                };
                columns.write(name, &mut writer)?;
            }
            writer.close()?;
            column += 1;
        }
        group.close()?;
        self.rows.clear();
        Ok(())
    }

    /// Writes the last row group and the footer; the output, to be flushed.
    pub fn finish(mut self) -> Result<W> {
        self.write_row_group()?;
        self.writer.into_inner()
    }
}

/// A batch of rows, and what their numbers stand for.
struct Columns<'a> {
    rows: &'a [Row],
    sources: &'a [Source],
    texts: &'a Texts,
    api_names: &'a [ByteArray],
    kind_names: &'a [ByteArray],
    action_names: &'a [ByteArray],
}

impl Columns<'_> {
    fn source(&self, row: &Row) -> &Source {
        &self.sources[row.source as usize]
    }

    /// Writes the batch's values of column `name`.
    fn write(&self, name: &str, writer: &mut SerializedColumnWriter) -> Result<()> {
        let rows = self.rows.iter();
        match name {
            "time_ns" => int64(writer, rows.map(|r| r.time_ns as i64)),
            "wall_time_ns" => int64(writer, rows.map(|r| self.source(r).wall_time_ns(r.time_ns))),
            "trace" => text(writer, rows.map(|r| self.texts.get(self.source(r).trace))),
            "host" => text(writer, rows.map(|r| self.texts.get(self.source(r).host))),
            "rank" => optional_int32(writer, rows.map(|r| self.source(r).rank.map(|rank| rank as i32))),
            "pid" => int32(writer, rows.map(|r| self.source(r).pid as i32)),
            "process" => int32(writer, rows.map(|r| self.source(r).process as i32)),
            "device" => optional_int32(writer, rows.map(|r| r.device.map(i32::from))),
            "action" => text(writer, rows.map(|r| self.action_names[r.action as usize].clone())),
            "api" => text(writer, rows.map(|r| self.api_names[r.api as usize].clone())),
            "kind" => text(writer, rows.map(|r| self.kind_names[r.kind as usize].clone())),
            // Unsigned 64-bit columns store their bits in Parquet's int64.
            "address" => int64(writer, rows.map(|r| r.address as i64)),
            "size" => int64(writer, rows.map(|r| r.size as i64)),
            "call_site_id" => optional_int64(writer, rows.map(|r| r.call_site_id.map(|id| id as i64))),
            "owner" => text(writer, rows.map(|r| self.texts.get(r.owner))),
            "seq" => int64(writer, rows.map(|r| r.seq as i64)),
            other => Err(ParquetError::General(format!("no column {other} in events.parquet"))),
        }
    }
}

fn int64(writer: &mut SerializedColumnWriter, values: impl Iterator<Item = i64>) -> Result<()> {
    let values: Vec<i64> = values.collect();
    writer.typed::<Int64Type>().write_batch(&values, None, None)?;
    Ok(())
}

fn int32(writer: &mut SerializedColumnWriter, values: impl Iterator<Item = i32>) -> Result<()> {
    let values: Vec<i32> = values.collect();
    writer.typed::<Int32Type>().write_batch(&values, None, None)?;
    Ok(())
}

/// Definition levels (1 present, 0 null) and the present values.
fn levels<T>(values: impl Iterator<Item = Option<T>>) -> (Vec<i16>, Vec<T>) {
    let mut defined = Vec::new();
    let mut present = Vec::new();
    for value in values {
        defined.push(i16::from(value.is_some()));
        present.extend(value);
    }
    (defined, present)
}

fn optional_int64(writer: &mut SerializedColumnWriter, values: impl Iterator<Item = Option<i64>>) -> Result<()> {
    let (defined, present) = levels(values);
    writer
        .typed::<Int64Type>()
        .write_batch(&present, Some(&defined), None)?;
    Ok(())
}

fn optional_int32(writer: &mut SerializedColumnWriter, values: impl Iterator<Item = Option<i32>>) -> Result<()> {
    let (defined, present) = levels(values);
    writer
        .typed::<Int32Type>()
        .write_batch(&present, Some(&defined), None)?;
    Ok(())
}

fn text(writer: &mut SerializedColumnWriter, values: impl Iterator<Item = ByteArray>) -> Result<()> {
    let values: Vec<ByteArray> = values.collect();
    writer.typed::<ByteArrayType>().write_batch(&values, None, None)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;

    /// Every row of the Parquet file at `path`, as (column, value) texts.
    fn read_back(path: &std::path::Path) -> (usize, Vec<Vec<(String, String)>>) {
        let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
        let groups = reader.metadata().num_row_groups();
        let rows = reader
            .get_row_iter(None)
            .unwrap()
            .map(|row| {
                row.unwrap()
                    .get_column_iter()
                    .map(|(name, field)| {
                        let value = match field {
                            Field::Str(text) => text.clone(),
                            Field::Null => "null".to_string(),
                            other => other.to_string(),
                        };
                        (name.clone(), value)
                    })
                    .collect()
            })
            .collect();
        (groups, rows)
    }

    #[test]
    fn rows_come_back_as_written_in_row_groups_of_the_size_asked() {
        let path = std::env::temp_dir().join(format!("cudatrace-events-file-{}.parquet", std::process::id()));
        let mut file = EventsFile::new(std::fs::File::create(&path).unwrap()).unwrap();
        file.row_group_rows = 2;
        let (trace, host, owner) = (
            file.texts.id("a.trace"),
            file.texts.id("node7"),
            file.texts.id("libx.so"),
        );
        let source = file.source(Source {
            trace,
            host,
            rank: Some(3),
            pid: 42,
            process: 1,
            start_monotonic_ns: 1_000,
            start_realtime_ns: 1_700_000_000_000_000_000,
        });
        let other = file.source(Source {
            rank: None,
            pid: 43,
            ..file.sources[0]
        });
        let row = Row {
            time_ns: 1_500,
            address: u64::MAX,
            size: 4096,
            seq: 7,
            call_site_id: Some(u64::MAX - 1),
            source,
            owner,
            device: Some(1),
            action: RowAction::Alloc,
            api: Api::CudaMalloc,
            kind: Kind::Device,
        };
        let rows = [
            row,
            Row {
                action: RowAction::Free,
                api: Api::CudaFree,
                seq: 8,
                ..row
            },
            Row {
                source: other,
                call_site_id: None,
                device: None,
                action: RowAction::Oom,
                kind: Kind::HostPinned,
                ..row
            },
        ];
        for row in rows {
            file.push(row).unwrap();
        }
        assert_eq!(file.rows_written, 3);
        file.finish().unwrap();
        let (groups, read) = read_back(&path);
        assert_eq!(groups, 2);
        let expected =
            |action: &str, api: &str, kind: &str, rank: &str, pid: &str, device: &str, id: &str, seq: &str| {
                [
                    ("time_ns", "1500"),
                    ("wall_time_ns", "1700000000000000500"),
                    ("trace", "a.trace"),
                    ("host", "node7"),
                    ("rank", rank),
                    ("pid", pid),
                    ("process", "1"),
                    ("device", device),
                    ("action", action),
                    ("api", api),
                    ("kind", kind),
                    ("address", "18446744073709551615"),
                    ("size", "4096"),
                    ("call_site_id", id),
                    ("owner", "libx.so"),
                    ("seq", seq),
                ]
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .to_vec()
            };
        let id = "18446744073709551614";
        assert_eq!(
            read[0],
            expected("alloc", "cudaMalloc", "device", "3", "42", "1", id, "7")
        );
        assert_eq!(read[1], expected("free", "cudaFree", "device", "3", "42", "1", id, "8"));
        assert_eq!(
            read[2],
            expected("oom", "cudaMalloc", "host-pinned", "null", "43", "null", "null", "7")
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn wall_time_is_the_process_s_anchor_moved_by_the_event_s_time() {
        let source = Source {
            trace: 0,
            host: 0,
            rank: None,
            pid: 1,
            process: 0,
            start_monotonic_ns: 5_000,
            start_realtime_ns: 10_000,
        };
        assert_eq!(source.wall_time_ns(5_000), 10_000);
        assert_eq!(source.wall_time_ns(7_500), 12_500);
        // Before the anchor (a clock read before the process's start).
        assert_eq!(source.wall_time_ns(4_000), 9_000);
        assert_eq!(source.wall_time_ns(0), 5_000);
    }
}
