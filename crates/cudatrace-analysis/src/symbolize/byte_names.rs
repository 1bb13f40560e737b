//! The frames blazesym gives up on: it refuses a symbol whose name is not
//! UTF-8 (in the symbol table, or a DWARF linkage name), and with it the
//! frame's file and line. Here the symbol table gives the function's name,
//! decoded lossily (each invalid byte an U+FFFD), and the DWARF line table
//! the file and line of the instruction. Inlined calls are not unfolded:
//! the frame is the function the symbol table names, at that line.
//!
//! Each module is mapped once, on its first such frame, and read only for
//! those frames: every other frame is blazesym's.

use gimli::{EndianSlice, RunTimeEndian};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::HashMap;
use std::fs::File;

/// A frame's function, file and line, read with names taken as bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByteFrame {
    /// The function the symbol table places the address in.
    pub function: String,
    /// The source file of the instruction; empty without a line table.
    pub file: String,
    /// Its line; 0 without a line table.
    pub line: u32,
}

/// The modules mapped so far, by path (`None`: it could not be read).
#[derive(Default)]
pub struct ByteNames {
    modules: HashMap<String, Option<memmap2::Mmap>>,
}

impl ByteNames {
    /// The frame at `address` (an address of the ELF file) of the module at
    /// `path`; `None` when no function symbol holds it.
    pub fn frame(&mut self, path: &str, address: u64) -> Option<ByteFrame> {
        let map = self.modules.entry(path.to_owned()).or_insert_with(|| {
            let file = File::open(path).ok()?;
            // SAFETY: the map is only read. A module replaced on disk while
            // it is read gives wrong names, as it would to blazesym, which
            // maps the same files.
            unsafe { memmap2::Mmap::map(&file) }.ok()
        });
        let object = object::File::parse(&map.as_ref()?[..]).ok()?;
        let function = function_at(&object, address)?;
        let (file, line) = line_at(&object, address).unwrap_or_default();
        Some(ByteFrame { function, file, line })
    }
}

/// The name of the function symbol whose range holds `address`.
fn function_at(object: &object::File<'_>, address: u64) -> Option<String> {
    object
        .symbols()
        .chain(object.dynamic_symbols())
        .find(|symbol| {
            symbol.kind() == SymbolKind::Text
                && symbol.is_definition()
                && (symbol.address()..symbol.address().saturating_add(symbol.size().max(1))).contains(&address)
        })
        .and_then(|symbol| symbol.name_bytes().ok())
        .map(|name| String::from_utf8_lossy(name).into_owned())
}

/// The source file and line of the instruction at `address`, from the
/// DWARF line table (names lossily decoded too).
fn line_at(object: &object::File<'_>, address: u64) -> Option<(String, u32)> {
    let endian = if object.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    // A section that is missing, or compressed (which this does not
    // inflate), reads as empty: no line.
    let dwarf = gimli::Dwarf::load(|id| -> Result<EndianSlice<'_, RunTimeEndian>, gimli::Error> {
        let data = object
            .section_by_name(id.name())
            .filter(|section| !matches!(section.compressed_file_range(), Ok(range) if range.format != object::CompressionFormat::None))
            .and_then(|section| section.data().ok())
            .unwrap_or(&[]);
        Ok(EndianSlice::new(data, endian))
    })
    .ok()?;
    let mut headers = dwarf.units();
    while let Ok(Some(header)) = headers.next() {
        let Ok(unit) = dwarf.unit(header) else { continue };
        let Some(program) = unit.line_program.clone() else {
            continue;
        };
        let mut rows = program.rows();
        // Each row holds from its address up to the next row's.
        let mut previous: Option<(u64, u64, u32)> = None;
        while let Ok(Some((_, row))) = rows.next_row() {
            if let Some((start, file, line)) = previous {
                if (start..row.address()).contains(&address) {
                    let path = file_path(&dwarf, &unit, rows.header(), file).unwrap_or_default();
                    return Some((path, line));
                }
            }
            previous = (!row.end_sequence()).then(|| {
                let line = row
                    .line()
                    .map_or(0, |line| u32::try_from(line.get()).unwrap_or(u32::MAX));
                (row.address(), row.file_index(), line)
            });
        }
    }
    None
}

/// The path of file `index` of a line table: its directory (below the
/// unit's own, when relative) and its name.
fn file_path<R: gimli::Reader>(
    dwarf: &gimli::Dwarf<R>,
    unit: &gimli::Unit<R>,
    header: &gimli::LineProgramHeader<R>,
    index: u64,
) -> Option<String> {
    let text = |value: gimli::AttributeValue<R>| -> Option<String> {
        let bytes = dwarf.attr_string(unit, value).ok()?;
        Some(String::from_utf8_lossy(&bytes.to_slice().ok()?).into_owned())
    };
    let file = header.file(index)?;
    let name = text(file.path_name())?;
    let mut path = std::path::PathBuf::new();
    if let Some(comp_dir) = &unit.comp_dir {
        path.push(String::from_utf8_lossy(&comp_dir.to_slice().ok()?).as_ref());
    }
    if let Some(directory) = file.directory(header).and_then(text) {
        path.push(directory);
    }
    path.push(name);
    Some(path.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_outside_every_function_or_a_missing_module_is_no_frame() {
        let me = std::env::current_exe().unwrap();
        let mut names = ByteNames::default();
        assert_eq!(names.frame(me.to_str().unwrap(), 0), None);
        assert_eq!(names.frame("/nonexistent/module.so", 0x1000), None);
    }
}
