//! The code's size, checked: in every crate of the workspace, no source file
//! has over 500 lines of code and no function over 100, so that a file has
//! one job a reader can hold and a function fits on a screen or two.
//!
//! Lines of code are the lines left with something on them once comments
//! (doc comments too) and the test module (`#[cfg(test)] mod ... { }`, or a
//! file declared `#[cfg(test)] mod ...;`) are taken out: blank lines do not
//! count, nor do lines inside a string literal that are blank.
//!
//! Sources are read as text, as `tests/layers.rs` reads them. A function runs
//! from its `fn` line (its attributes and doc comment left out) to the line
//! of its closing brace, found by counting braces outside comments, strings
//! and character literals. The approximation: a brace inside a macro's
//! pattern or a const generic argument of the signature would be taken for
//! the body's (none are written that way here), and a function inside a
//! function counts in both; a `fn` in a `macro_rules!` template counts as a
//! function, as it is one once expanded.

use std::path::{Path, PathBuf};

#[path = "support/source_files.rs"]
mod source_files;
use source_files::rust_files;

/// The most lines of code a source file may have.
const MAX_FILE_LINES: usize = 500;

/// The most lines of code a function may have.
const MAX_FUNCTION_LINES: usize = 100;

/// Every crate's source folder, relative to the workspace: the library, each
/// crate under `crates/` (read from the folder, so a new one is covered),
/// the command, and the fake CUDA the tests run over.
fn source_folders() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    crates.sort();
    let mut folders = vec![root.join("src")];
    folders.extend(crates);
    folders.push(root.join("tracer-cli/src"));
    folders.push(root.join("tests/fake-cuda/src"));
    folders
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The source with every comment blanked and the inside of every string and
/// character literal replaced by `s`; line breaks are kept everywhere, so
/// that a line of the result is the same line of the source.
fn mask(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let hide = |c: char, blank: char| if c == '\n' { '\n' } else { blank };
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let before = if i == 0 { ' ' } else { chars[i - 1] };
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            // Block comments nest.
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(hide(chars[i], ' '));
                    i += 1;
                }
            }
        } else if c == 'r' && (before == 'b' || !is_ident_char(before)) {
            // A raw string (`r"..."`, `r#"..."#`, `br"..."`), else an identifier.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if at(i + 1 + hashes) != '"' {
                out.push(c);
                i += 1;
                continue;
            }
            let opening = 2 + hashes;
            out.extend(&chars[i..i + opening]);
            i += opening;
            let closes = |i: usize| at(i) == '"' && (1..=hashes).all(|h| at(i + h) == '#');
            while i < chars.len() && !closes(i) {
                out.push(hide(chars[i], 's'));
                i += 1;
            }
            out.extend(chars.iter().skip(i).take(1 + hashes));
            i += 1 + hashes;
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push('s');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(hide(chars[i], 's'));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal; a quote not closed two characters on
            // (`'a` of a lifetime or a label) is left as code.
            let end = if at(i + 1) == '\\' {
                (i + 3..chars.len())
                    .find(|&j| chars[j] == '\'')
                    .unwrap_or(chars.len() - 1)
            } else {
                i + 2
            };
            out.push('\'');
            out.extend(std::iter::repeat_n('s', end - i - 1));
            out.push('\'');
            i = end + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The index of the brace closing the one at `open`, in masked text.
fn closing_brace(code: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &c) in code.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Masked text with its test modules blanked, and the names of the modules
/// it declares as test-only files (`#[cfg(test)] mod name;`).
fn without_test_modules(masked: &str) -> (Vec<char>, Vec<String>) {
    let mark: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut code: Vec<char> = masked.chars().collect();
    let mut test_files = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].windows(mark.len()).position(|w| w == mark.as_slice()) {
        let start = from + found;
        from = start + mark.len();
        let mut i = from;
        let skip_space = |i: &mut usize| {
            while *i < code.len() && code[*i].is_whitespace() {
                *i += 1;
            }
        };
        let starts_with = |i: usize, word: &str| {
            word.chars().enumerate().all(|(k, w)| code.get(i + k) == Some(&w))
                && !code.get(i + word.len()).is_some_and(|&c| is_ident_char(c))
        };
        // Further attributes, then the item's visibility.
        loop {
            skip_space(&mut i);
            if code.get(i) == Some(&'#') && code.get(i + 1) == Some(&'[') {
                i += code[i..].iter().position(|&c| c == ']').map_or(code.len(), |p| p + 1);
            } else {
                break;
            }
        }
        if starts_with(i, "pub") {
            i += 3;
            if code.get(i) == Some(&'(') {
                i += code[i..].iter().position(|&c| c == ')').map_or(code.len(), |p| p + 1);
            }
            skip_space(&mut i);
        }
        if !starts_with(i, "mod") {
            continue;
        }
        i += 3;
        skip_space(&mut i);
        let name: String = code[i..].iter().take_while(|&&c| is_ident_char(c)).collect();
        i += name.len();
        skip_space(&mut i);
        let end = match code.get(i) {
            Some(';') => {
                test_files.push(name);
                i
            }
            Some('{') => closing_brace(&code, i).unwrap_or(code.len() - 1),
            _ => continue,
        };
        for c in &mut code[start..=end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    }
    (code, test_files)
}

/// A function found in a source, and its lines of code.
#[derive(Debug, PartialEq, Eq)]
struct Function {
    name: String,
    /// The 1-based line of its `fn`.
    line: usize,
    lines_of_code: usize,
}

/// What is measured of one source file.
#[derive(Debug, PartialEq, Eq)]
struct Measure {
    lines_of_code: usize,
    functions: Vec<Function>,
    /// Modules the file declares as test-only files.
    test_files: Vec<String>,
}

fn measure(source: &str) -> Measure {
    let (code, test_files) = without_test_modules(&mask(source));
    // Per character: the line it is on; per line: whether it holds code.
    let mut line_of = Vec::with_capacity(code.len());
    let mut has_code = vec![false];
    for &c in &code {
        line_of.push(has_code.len() - 1);
        if c == '\n' {
            has_code.push(false);
        } else if !c.is_whitespace() {
            *has_code.last_mut().unwrap() = true;
        }
    }
    // Lines of code before each line, to count a span in one subtraction.
    let mut before = vec![0];
    for &line in &has_code {
        before.push(before.last().unwrap() + usize::from(line));
    }
    let mut functions = Vec::new();
    for i in 0..code.len() {
        let is_fn = code[i] == 'f'
            && code.get(i + 1) == Some(&'n')
            && (i == 0 || !is_ident_char(code[i - 1]))
            && code.get(i + 2).is_some_and(|c| c.is_whitespace());
        if !is_fn {
            continue;
        }
        // The name (`$name` in a macro's template); a `fn(` is a type.
        let mut j = i + 2;
        while j < code.len() && code[j].is_whitespace() {
            j += 1;
        }
        let name: String = code[j..]
            .iter()
            .take_while(|&&c| is_ident_char(c) || c == '$')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body: the first `{` outside the signature's brackets; a `;`
        // first means a declaration without one.
        let mut depth = 0i32;
        let mut body = None;
        for (k, &c) in code.iter().enumerate().skip(j) {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                '{' if depth == 0 => {
                    body = Some(k);
                    break;
                }
                ';' if depth == 0 => break,
                _ => {}
            }
        }
        let Some(open) = body else { continue };
        let Some(close) = closing_brace(&code, open) else {
            continue;
        };
        let (first, last) = (line_of[i], line_of[close]);
        functions.push(Function {
            name,
            line: first + 1,
            lines_of_code: before[last + 1] - before[first],
        });
    }
    Measure {
        lines_of_code: *before.last().unwrap(),
        functions,
        test_files,
    }
}

/// Where the file of module `name`, declared in `file`, lies (`name.rs` or
/// `name/mod.rs`, beside a `mod.rs`, `lib.rs` or `main.rs`, else in the
/// folder named after the declaring file).
fn module_files(file: &Path, name: &str) -> [PathBuf; 2] {
    let dir = file.parent().unwrap();
    let stem = file.file_stem().unwrap().to_string_lossy();
    let base = if matches!(stem.as_ref(), "mod" | "lib" | "main") {
        dir.to_path_buf()
    } else {
        dir.join(stem.as_ref())
    };
    [base.join(format!("{name}.rs")), base.join(name).join("mod.rs")]
}

#[test]
fn no_file_or_function_is_too_long() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for folder in source_folders() {
        rust_files(&folder, &mut files);
    }
    let measures: Vec<(PathBuf, Measure)> = files
        .into_iter()
        .map(|file| {
            let measure = measure(&std::fs::read_to_string(&file).unwrap());
            (file, measure)
        })
        .collect();
    let test_only: Vec<PathBuf> = measures
        .iter()
        .flat_map(|(file, measure)| measure.test_files.iter().flat_map(|name| module_files(file, name)))
        .collect();
    let mut too_long = Vec::new();
    for (file, measure) in &measures {
        if test_only.contains(file) {
            continue;
        }
        let shown = file.strip_prefix(root).unwrap().display();
        if measure.lines_of_code > MAX_FILE_LINES {
            too_long.push(format!("{shown}: {} lines of code", measure.lines_of_code));
        }
        for function in measure
            .functions
            .iter()
            .filter(|f| f.lines_of_code > MAX_FUNCTION_LINES)
        {
            too_long.push(format!(
                "{shown}:{}: fn {}: {} lines of code",
                function.line, function.name, function.lines_of_code
            ));
        }
    }
    assert!(
        too_long.is_empty(),
        "over {MAX_FILE_LINES} lines of code in a file or {MAX_FUNCTION_LINES} in a function (split them):\n{}",
        too_long.join("\n")
    );
}

#[test]
fn lines_of_code_and_functions_are_counted_as_documented() {
    let sample = r##"//! A module.

/// Doc.
fn short() -> &'static str {
    // a comment } with a brace
    let brace = '}';
    let quote = '\'';
    /* a block
       comment { */
    "a string with } and fn inside"
}

fn pointer(f: fn(u8) -> u8) -> u8 {
    let raw = r#"{ "quoted" fn x() {"#;

    f(raw.len() as u8)
}

fn lifetime<'a>(x: &'a str) -> &'a str { x }

trait Shape {
    fn area(&self) -> u32;
}

#[cfg(test)]
#[allow(dead_code)]
pub(crate) mod tests {
    fn not_counted() {}
}

#[cfg(test)]
mod helpers;
"##;
    let measure = measure(sample);
    let functions: Vec<(&str, usize, usize)> = measure
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.line, f.lines_of_code))
        .collect();
    assert_eq!(functions, [("short", 4, 5), ("pointer", 13, 4), ("lifetime", 19, 1)]);
    // 5 + 4 + 1 for the functions, 3 for the trait.
    assert_eq!(measure.lines_of_code, 13);
    assert_eq!(measure.test_files, ["helpers"]);
}
