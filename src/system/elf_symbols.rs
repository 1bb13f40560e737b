//! Symbol addresses from a shared object's file: its static symbol table
//! (`.symtab`) as well as its dynamic one, since the methods the tensor
//! tracker needs are local symbols that `dlsym` cannot see.
//!
//! Reads a whole file and allocates: for cold points only (where the loader
//! lock may be taken), never on an allocation hook.

use object::{Object, ObjectSymbol};
use std::path::Path;

/// How a wanted symbol's name is matched.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SymbolName<'a> {
    /// The whole mangled name.
    Exact(&'a str),
    /// The start of a mangled name; exactly one symbol may have it.
    Prefix(&'a str),
}

/// For each wanted name, the symbol's value (its address relative to the
/// object's load base), or `None` when no symbol, or more than one for a
/// prefix, has that name. `Err` when the file cannot be read or parsed.
pub(crate) fn symbol_values(path: &Path, wanted: &[SymbolName]) -> Result<Vec<Option<u64>>, String> {
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    let file = object::File::parse(&*data).map_err(|e| e.to_string())?;
    let mut found: Vec<(Option<u64>, u32)> = vec![(None, 0); wanted.len()];
    for symbol in file.symbols().chain(file.dynamic_symbols()) {
        if !symbol.is_definition() {
            continue;
        }
        let Ok(name) = symbol.name() else { continue };
        for (slot, want) in found.iter_mut().zip(wanted) {
            let matches = match *want {
                SymbolName::Exact(text) => name == text,
                // `.cold`, `.constprop.0` and the like are pieces of the
                // function, not the function.
                SymbolName::Prefix(text) => name.starts_with(text) && !name.contains('.'),
            };
            // The same symbol may be in both tables: count distinct values.
            if matches && slot.0 != Some(symbol.address()) {
                *slot = (Some(symbol.address()), slot.1 + 1);
            }
        }
    }
    Ok(found
        .into_iter()
        .map(|(value, count)| value.filter(|_| count == 1))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_static_and_dynamic_symbols_of_the_c_library_and_refuses_ambiguous_prefixes() {
        // The test binary itself: Rust's std symbols are in its .symtab.
        let me = std::env::current_exe().unwrap();
        let values = symbol_values(
            &me,
            &[
                SymbolName::Exact("main"),
                SymbolName::Exact("no_such_symbol_anywhere"),
                SymbolName::Prefix("_ZN"),
            ],
        )
        .unwrap();
        assert!(values[0].is_some_and(|v| v > 0));
        assert_eq!(values[1], None);
        // Thousands of mangled names share that prefix: ambiguous.
        assert_eq!(values[2], None);
        assert!(symbol_values(Path::new("/nonexistent/lib.so"), &[SymbolName::Exact("x")]).is_err());
    }
}
