//! The two files' columns, as Parquet schemas, and the writer's settings.
//!
//! Integers that no query does arithmetic on but that use all 64 bits
//! (addresses, call site ids) are unsigned; the rest are signed, so that a
//! query can negate a size (`-size`) or subtract two times.

use parquet::basic::{Compression, Encoding};
use parquet::errors::Result;
use parquet::file::properties::{WriterProperties, WriterPropertiesPtr};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::{ColumnPath, TypePtr};
use std::sync::Arc;

/// `events.parquet`'s columns, in order: name and Parquet type.
pub const EVENT_COLUMNS: [(&str, &str); 16] = [
    ("time_ns", "required int64"),
    ("wall_time_ns", "required int64"),
    ("trace", "required binary {} (STRING)"),
    ("host", "required binary {} (STRING)"),
    ("rank", "optional int32"),
    ("pid", "required int32"),
    ("process", "required int32"),
    ("device", "optional int32"),
    ("action", "required binary {} (STRING)"),
    ("api", "required binary {} (STRING)"),
    ("kind", "required binary {} (STRING)"),
    ("address", "required int64 {} (INTEGER(64,false))"),
    ("size", "required int64"),
    ("call_site_id", "optional int64 {} (INTEGER(64,false))"),
    ("owner", "required binary {} (STRING)"),
    ("seq", "required int64"),
];

/// `call_sites.parquet`'s columns, in order: name and Parquet type.
pub const CALL_SITE_COLUMNS: [(&str, &str); 5] = [
    ("call_site_id", "required int64 {} (INTEGER(64,false))"),
    ("headline", "required binary {} (STRING)"),
    ("key", "required binary {} (STRING)"),
    ("owner", "required binary {} (STRING)"),
    (
        "frames",
        "required group {} (LIST) { repeated group list { required binary element (STRING); } }",
    ),
];

/// The schema named `name` with `columns`: each type's `{}` is where the
/// column's name goes (after the type where it has none).
fn schema(name: &str, columns: &[(&str, &str)]) -> Result<TypePtr> {
    let fields: Vec<String> = columns
        .iter()
        .map(|(column, kind)| {
            let field = if kind.contains("{}") {
                kind.replacen("{}", column, 1)
            } else {
                format!("{kind} {column}")
            };
            // A group ends with its fields' braces; a primitive with `;`.
            if field.ends_with('}') {
                field
            } else {
                field + ";"
            }
        })
        .collect();
    let text = format!("message {name} {{ {} }}", fields.join(" "));
    Ok(Arc::new(parse_message_type(&text)?))
}

/// `events.parquet`'s schema.
pub fn events_schema() -> Result<TypePtr> {
    schema("events", &EVENT_COLUMNS)
}

/// `call_sites.parquet`'s schema.
pub fn call_sites_schema() -> Result<TypePtr> {
    schema("call_sites", &CALL_SITE_COLUMNS)
}

/// Columns stored as deltas from one row to the next: times and sequence
/// numbers, which rise a little from row to row and so take a few bits a
/// row instead of 64 (10 million synthetic events: 209 MiB → 130 MiB).
const DELTA_COLUMNS: [&str; 3] = ["time_ns", "wall_time_ns", "seq"];

/// Both files' settings: Snappy pages, dictionaries for the repeated
/// values (the parquet crate's default) but deltas for times, statistics
/// for every column.
pub fn properties() -> WriterPropertiesPtr {
    let mut builder = WriterProperties::builder().set_compression(Compression::SNAPPY);
    for column in DELTA_COLUMNS {
        let path = ColumnPath::from(column);
        builder = builder
            .set_column_dictionary_enabled(path.clone(), false)
            .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
    }
    Arc::new(builder.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_schemas_parse_with_their_columns_in_order() {
        let events = events_schema().unwrap();
        let names: Vec<&str> = events.get_fields().iter().map(|f| f.name()).collect();
        assert_eq!(names, EVENT_COLUMNS.map(|(name, _)| name));
        let sites = call_sites_schema().unwrap();
        let names: Vec<&str> = sites.get_fields().iter().map(|f| f.name()).collect();
        assert_eq!(names, CALL_SITE_COLUMNS.map(|(name, _)| name));
    }
}
