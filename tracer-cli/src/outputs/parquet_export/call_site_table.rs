//! `call_sites.parquet`: one row per distinct call site of every input,
//! by id, with its headline, its key, and the frames and owner of one
//! example stack (the one that allocated the most bytes among the stacks
//! of the site, the first seen where they tie).

use super::schemas::{call_sites_schema, properties, CALL_SITE_COLUMNS};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::errors::{ParquetError, Result};
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use std::collections::BTreeMap;
use std::io::Write;

/// What `call_sites.parquet` says of one site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteDescription {
    /// What its id is the hash of: the headline frame in full.
    pub key: String,
    /// Its short name, as reports head it.
    pub headline: String,
    /// The owner of the example stack.
    pub owner: String,
    /// The example stack's frames, innermost first, one line each.
    pub frames: Vec<String>,
}

/// The call sites met so far, by id.
#[derive(Default)]
pub struct CallSiteTable {
    sites: BTreeMap<u64, (SiteDescription, u64)>,
}

impl CallSiteTable {
    /// A stack of site `id` that allocated `bytes`: described (by
    /// `describe`) if the site is new, or if it allocated more than the
    /// site's example so far.
    pub fn offer(&mut self, id: u64, bytes: u64, describe: impl FnOnce() -> SiteDescription) {
        match self.sites.get_mut(&id) {
            Some((example, most)) => {
                if bytes > *most {
                    *example = describe();
                    *most = bytes;
                }
            }
            None => {
                self.sites.insert(id, (describe(), bytes));
            }
        }
    }

    /// How many sites.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// Writes the table, in order of id, as `call_sites.parquet` into `out`;
    /// the output, to be flushed.
    pub fn write<W: Write + Send>(&self, out: W) -> Result<W> {
        let mut writer = SerializedFileWriter::new(out, call_sites_schema()?, properties())?;
        let sites: Vec<(u64, &SiteDescription)> = self.sites.iter().map(|(&id, (site, _))| (id, site)).collect();
        // One row group: a site is a few hundred bytes, and sites are few.
        let mut group = writer.next_row_group()?;
        let mut column = 0;
        while let Some(mut column_writer) = group.next_column()? {
            write_column(CALL_SITE_COLUMNS[column].0, &sites, &mut column_writer)?;
            column_writer.close()?;
            column += 1;
        }
        group.close()?;
        writer.into_inner()
    }
}

fn texts<'a>(values: impl Iterator<Item = &'a str>) -> Vec<ByteArray> {
    values.map(|text| ByteArray::from(text.as_bytes().to_vec())).collect()
}

/// Writes column `name` of every site.
fn write_column(name: &str, sites: &[(u64, &SiteDescription)], writer: &mut SerializedColumnWriter) -> Result<()> {
    let strings = |values: Vec<ByteArray>, writer: &mut SerializedColumnWriter| {
        writer
            .typed::<ByteArrayType>()
            .write_batch(&values, None, None)
            .map(drop)
    };
    match name {
        "call_site_id" => {
            // Unsigned: its bits in Parquet's int64.
            let ids: Vec<i64> = sites.iter().map(|&(id, _)| id as i64).collect();
            writer.typed::<Int64Type>().write_batch(&ids, None, None).map(drop)
        }
        "headline" => strings(texts(sites.iter().map(|(_, s)| s.headline.as_str())), writer),
        "key" => strings(texts(sites.iter().map(|(_, s)| s.key.as_str())), writer),
        "owner" => strings(texts(sites.iter().map(|(_, s)| s.owner.as_str())), writer),
        "frames" => {
            // A list: each row's first element starts it (repetition 0), the
            // rest continue it (1); an empty list is one entry undefined (0).
            let mut values = Vec::new();
            let mut defined = Vec::new();
            let mut repeated = Vec::new();
            for (_, site) in sites {
                if site.frames.is_empty() {
                    defined.push(0);
                    repeated.push(0);
                }
                for (at, frame) in site.frames.iter().enumerate() {
                    values.push(ByteArray::from(frame.as_bytes().to_vec()));
                    defined.push(1);
                    repeated.push(i16::from(at > 0));
                }
            }
            writer
                .typed::<ByteArrayType>()
                .write_batch(&values, Some(&defined), Some(&repeated))
                .map(drop)
        }
        other => Err(ParquetError::General(format!(
            "no column {other} in call_sites.parquet"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    fn site(key: &str, frames: &[&str]) -> SiteDescription {
        SiteDescription {
            key: key.to_string(),
            headline: format!("short {key}"),
            owner: "owner".to_string(),
            frames: frames.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn each_site_is_one_row_with_its_largest_stack_as_example_and_its_frames_as_a_list() {
        let mut table = CallSiteTable::default();
        table.offer(9, 100, || site("b", &["first", "second"]));
        // Fewer bytes, or as many: the example stays.
        table.offer(9, 50, || site("b", &["smaller"]));
        table.offer(9, 100, || site("b", &["tie"]));
        table.offer(3, 0, || site("a", &[]));
        table.offer(9, 200, || site("b", &["larger", "stack", "here"]));
        assert_eq!(table.len(), 2);
        let path = std::env::temp_dir().join(format!("cudatrace-call-sites-{}.parquet", std::process::id()));
        table.write(std::fs::File::create(&path).unwrap()).unwrap();
        let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        let rows: Vec<String> = reader
            .get_row_iter(None)
            .unwrap()
            .map(|row| row.unwrap().to_string())
            .collect();
        assert_eq!(
            rows,
            [
                r#"{call_site_id: 3, headline: "short a", key: "a", owner: "owner", frames: []}"#,
                r#"{call_site_id: 9, headline: "short b", key: "b", owner: "owner", frames: ["larger", "stack", "here"]}"#,
            ]
        );
        std::fs::remove_file(&path).unwrap();
    }
}
