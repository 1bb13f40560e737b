//! The code's structure, checked: no module of any crate imports, at any
//! depth, from a module that imports it back; in `libcudatrace.so`
//! (`src/`), in the `cudatrace` command (`tracer-cli/src`) and in the
//! analysis crate it stands on (`crates/cudatrace-analysis/src`), no layer
//! uses a layer above it:
//!
//! lifecycle → hooks → record → stacks → spool → system
//! commands → (collector | outputs) → wording → system
//! analysis → symbolize → system (of the analysis crate)
//!
//! Layers in parentheses are peers: they stand side by side on the layers
//! below them, and neither imports the other.
//!
//! and no two files of the command share a name (but `mod.rs`).
//!
//! Imports are read from the source as text: every path through `crate::`,
//! `super::` or a child module's name, in `use` trees and in code, each
//! resolved to the deepest module it names. Test modules are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[path = "support/source_files.rs"]
mod source_files;
use source_files::rust_files;

/// The layers of `src/`, lowest first; each a list of peers.
const LAYERS: &[&[&str]] = &[
    &["system"],
    &["spool"],
    &["stacks"],
    &["record"],
    &["hooks"],
    &["lifecycle"],
];

/// The layers of `tracer-cli/src`, lowest first; each a list of peers: the
/// collector and the outputs both stand on the wording, and neither uses
/// the other.
const COMMAND_LAYERS: &[&[&str]] = &[&["system"], &["wording"], &["outputs", "collector"], &["commands"]];

/// The layers of the analysis crate, lowest first. The command line stands
/// on the whole crate; Cargo keeps the crate from using the command line.
const ANALYSIS_LAYERS: &[&[&str]] = &[&["system"], &["symbolize"], &["analysis"]];

/// Every crate of the workspace: their modules must not import each other
/// in a circle.
const CRATES: &[&str] = &[
    "src",
    "crates/cudatrace-events/src",
    "crates/cudatrace-trace/src",
    "crates/cudatrace-analysis/src",
    "tracer-cli/src",
    "tests/fake-cuda/src",
];

struct Crate {
    /// Module path (`a::b`, "" for the root) to its source, tests cut off.
    modules: BTreeMap<String, String>,
}

fn module_path(root: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts.join("::")
}

/// Where the source's test module starts: the `#[cfg(test)]` whose item is
/// a module (other test-only items are code like the rest).
fn test_module_start(source: &str) -> Option<usize> {
    source.match_indices("#[cfg(test)]").map(|(at, _)| at).find(|&at| {
        let item = source[at + "#[cfg(test)]".len()..]
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty() && !line.starts_with("#["))
            .unwrap_or_default();
        let item = item
            .strip_prefix("pub(crate) ")
            .or_else(|| item.strip_prefix("pub "))
            .unwrap_or(item);
        item.starts_with("mod ")
    })
}

/// The source without comments and without its test module.
fn code_of(source: &str) -> String {
    let source = &source[..test_module_start(source).unwrap_or(source.len())];
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn read_crate(dir: &str) -> Crate {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let modules = files
        .iter()
        .map(|file| {
            (
                module_path(&root, file),
                code_of(&std::fs::read_to_string(file).unwrap()),
            )
        })
        .collect();
    Crate { modules }
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand_use_tree(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut start, mut items) = (0, 0, Vec::new());
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|item| !item.is_empty())
        .flat_map(|item| expand_use_tree(item).into_iter().map(move |p| format!("{prefix}{p}")))
        .collect()
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path the code mentions that starts at `crate`, `super`, `self` or
/// a name followed by `::`.
fn paths_in(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before_ok = at == 0 || !is_ident_char(rest[..at].chars().last().unwrap());
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if before_ok {
            paths.extend(expand_use_tree(&after[..end]));
        }
        rest = &after[end.min(after.len())..];
    }
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if is_ident_char(chars[i]) && (i == 0 || !(is_ident_char(chars[i - 1]) || chars[i - 1] == ':')) {
            let start = i;
            let mut end = i;
            loop {
                while end < chars.len() && is_ident_char(chars[end]) {
                    end += 1;
                }
                if end + 2 < chars.len() && chars[end] == ':' && chars[end + 1] == ':' && is_ident_char(chars[end + 2])
                {
                    end += 2;
                } else {
                    break;
                }
            }
            let path: String = chars[start..end].iter().collect();
            if path.contains("::") {
                paths.push(path);
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    paths
}

/// The module each path names (the deepest one), seen from `module`.
fn imports_of(krate: &Crate, module: &str) -> BTreeSet<String> {
    let parent = |m: &str| m.rsplit_once("::").map_or(String::new(), |(p, _)| p.to_owned());
    let join = |base: &str, rest: &str| {
        if base.is_empty() {
            rest.to_owned()
        } else if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}::{rest}")
        }
    };
    let mut found = BTreeSet::new();
    for path in paths_in(&krate.modules[module]) {
        let absolute = if let Some(rest) = path.strip_prefix("crate::") {
            rest.to_owned()
        } else if let Some(mut rest) = path.strip_prefix("super::") {
            let mut base = parent(module);
            while let Some(further) = rest.strip_prefix("super::") {
                base = parent(&base);
                rest = further;
            }
            join(&base, rest)
        } else if let Some(rest) = path.strip_prefix("self::") {
            join(module, rest)
        } else {
            let first = path.split("::").next().unwrap();
            if !krate.modules.contains_key(&join(module, first)) {
                continue;
            }
            join(module, &path)
        };
        let parts: Vec<&str> = absolute.split("::").collect();
        let named = (0..=parts.len())
            .rev()
            .map(|n| parts[..n].join("::"))
            .find(|candidate| krate.modules.contains_key(candidate));
        if let Some(named) = named.filter(|named| named != module) {
            found.insert(named);
        }
    }
    found
}

/// Strongly connected groups of more than one module (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, v: &'a str) {
        let n = state.index.len();
        state.index.insert(v, n);
        state.low.insert(v, n);
        state.stack.push(v);
        state.on_stack.insert(v);
        for w in &state.edges[v] {
            let w = w.as_str();
            if !state.index.contains_key(w) {
                visit(state, w);
                let low = state.low[v].min(state.low[w]);
                state.low.insert(v, low);
            } else if state.on_stack.contains(w) {
                let low = state.low[v].min(state.index[w]);
                state.low.insert(v, low);
            }
        }
        if state.low[v] == state.index[v] {
            let mut group = Vec::new();
            while let Some(w) = state.stack.pop() {
                state.on_stack.remove(w);
                group.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                state.found.push(group);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found
}

fn edges_of(krate: &Crate) -> BTreeMap<String, BTreeSet<String>> {
    krate
        .modules
        .keys()
        .map(|m| (m.clone(), imports_of(krate, m)))
        .collect()
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let mut found = Vec::new();
    for dir in CRATES {
        for group in circles(&edges_of(&read_crate(dir))) {
            found.push(format!("{dir}: {}", group.join(" <-> ")));
        }
    }
    assert_eq!(found, Vec::<String>::new(), "import circles");
}

/// Every import from a module of `krate` into a layer above its own or
/// into a peer of its layer, as `module -> import`; the crate root stands
/// above every layer.
fn upward_imports(krate: &Crate, layers: &[&[&str]]) -> Vec<String> {
    let top = |module: &str| module.split("::").next().unwrap_or_default().to_owned();
    let rank = |module: &str| layers.iter().position(|peers| peers.contains(&top(module).as_str()));
    let mut upward = Vec::new();
    for (module, imports) in edges_of(krate) {
        if module.is_empty() {
            continue;
        }
        let from = rank(&module).unwrap_or_else(|| panic!("module {module} is in no layer"));
        for import in imports {
            let to = rank(&import).unwrap_or(usize::MAX);
            if to > from || (to == from && top(&import) != top(&module)) {
                upward.push(format!("{module} -> {import}"));
            }
        }
    }
    upward
}

#[test]
fn no_layer_of_the_library_uses_a_layer_above_it() {
    assert_eq!(
        upward_imports(&read_crate("src"), LAYERS),
        Vec::<String>::new(),
        "imports from a layer above"
    );
}

#[test]
fn no_layer_of_the_command_uses_a_layer_above_it() {
    assert_eq!(
        upward_imports(&read_crate("tracer-cli/src"), COMMAND_LAYERS),
        Vec::<String>::new(),
        "imports from a layer above"
    );
}

#[test]
fn no_layer_of_the_analysis_uses_a_layer_above_it() {
    assert_eq!(
        upward_imports(&read_crate("crates/cudatrace-analysis/src"), ANALYSIS_LAYERS),
        Vec::<String>::new(),
        "imports from a layer above"
    );
}

/// The analysis is a library of its own, for other front ends too: it
/// names nothing of the command line, in its code or its manifest.
#[test]
fn the_analysis_crate_knows_nothing_of_the_command_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/cudatrace-analysis");
    let mut files = vec![root.join("Cargo.toml")];
    rust_files(&root.join("src"), &mut files);
    let naming: Vec<String> = files
        .iter()
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            text.contains("cudatrace_cli") || text.contains("cudatrace-cli") || text.contains("tracer-cli")
        })
        .map(|file| file.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert_eq!(naming, Vec::<String>::new(), "files that name the command line");
}

/// Nor do two files of the command and of the analysis it stands on.
#[test]
fn no_two_files_of_the_command_share_a_name() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for dir in ["tracer-cli/src", "crates/cudatrace-analysis/src"] {
        let mut files = Vec::new();
        rust_files(&workspace.join(dir), &mut files);
        for file in &files {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            if !matches!(name.as_str(), "mod.rs" | "lib.rs" | "main.rs") {
                let path = file.strip_prefix(workspace).unwrap().display().to_string();
                seen.entry(name).or_default().push(path);
            }
        }
    }
    let shared: Vec<String> = seen
        .into_values()
        .filter(|paths| paths.len() > 1)
        .map(|paths| paths.join(" and "))
        .collect();
    assert_eq!(shared, Vec::<String>::new(), "files that share a name");
}

/// What a `mod.rs` may hold besides comments: module declarations,
/// re-exports and their attributes. Its logic lives in named files beside it.
fn lines_not_declaring(code: &str) -> Vec<String> {
    let mut other = Vec::new();
    let mut in_use = false;
    for line in code.lines().map(str::trim).filter(|line| !line.is_empty()) {
        let declares = [
            "mod ",
            "pub mod ",
            "pub(crate) mod ",
            "pub use ",
            "pub(crate) use ",
            "#[",
        ]
        .iter()
        .any(|start| line.starts_with(start));
        if !(in_use || declares) {
            other.push(line.to_owned());
        }
        if line.starts_with("pub use ") || line.starts_with("pub(crate) use ") || in_use {
            in_use = !line.ends_with(';');
        }
    }
    other
}

/// One convention for a module with parts: `x/mod.rs`, never `x.rs` beside
/// `x/`, and the `mod.rs` only declares and re-exports.
#[test]
fn module_files_only_declare_and_re_export() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for dir in ["tracer-cli/src", "crates/cudatrace-analysis/src"] {
        let mut files = Vec::new();
        rust_files(&workspace.join(dir), &mut files);
        for file in &files {
            let path = file.strip_prefix(workspace).unwrap().display().to_string();
            if file.with_extension("").is_dir() {
                found.push(format!("{path} beside its folder"));
            }
            if file.file_name().is_some_and(|name| name == "mod.rs") {
                let code = code_of(&std::fs::read_to_string(file).unwrap());
                found.extend(
                    lines_not_declaring(&code)
                        .into_iter()
                        .map(|line| format!("{path}: {line}")),
                );
            }
        }
    }
    assert_eq!(found, Vec::<String>::new(), "module files with more than declarations");
    assert_eq!(
        lines_not_declaring("mod a;\npub use a::{\n    b,\n    c,\n};\n#[cfg(test)]\npub mod t;\nfn f() {}"),
        vec!["fn f() {}"]
    );
}

/// Where `code` calls one of `macros` (`println!` but not `eprintln!`).
fn calls_macro(code: &str, macros: &[&str]) -> bool {
    macros.iter().any(|name| {
        code.match_indices(name)
            .any(|(at, _)| !code[..at].chars().next_back().is_some_and(is_ident_char))
    })
}

/// `println!` panics when stdout is a closed pipe (`cudatrace html T | true`):
/// the command writes stdout through `system::terminal` alone, which ends
/// quietly then.
#[test]
fn the_command_writes_stdout_only_through_the_terminal_module() {
    let krate = read_crate("tracer-cli/src");
    let writers: Vec<&String> = krate
        .modules
        .iter()
        .filter(|(module, _)| module.as_str() != "system::terminal")
        .filter(|(_, code)| calls_macro(code, &["println!", "print!"]) || code.contains("io::stdout()"))
        .map(|(module, _)| module)
        .collect();
    assert_eq!(writers, Vec::<&String>::new(), "modules that write stdout themselves");
    assert!(calls_macro("x; println!(\"a\")", &["println!"]));
    assert!(!calls_macro("eprintln!(\"a\")", &["println!"]));
}

#[test]
fn the_layer_check_sees_an_import_from_above() {
    let krate = Crate {
        modules: [
            ("".to_owned(), String::new()),
            ("low".to_owned(), "fn f() { crate::high::g(); }".to_owned()),
            ("low::part".to_owned(), "use super::other;".to_owned()),
            ("high".to_owned(), "use crate::low::{other, part::x};".to_owned()),
        ]
        .into_iter()
        .collect(),
    };
    assert_eq!(upward_imports(&krate, &[&["low"], &["high"]]), vec!["low -> high"]);
    assert_eq!(
        upward_imports(&krate, &[&["high"], &["low"]]),
        vec!["high -> low", "high -> low::part"]
    );
    // Peers import neither each other nor each other's parts.
    assert_eq!(
        upward_imports(&krate, &[&["low", "high"]]),
        vec!["high -> low", "high -> low::part", "low -> high"]
    );
}

#[test]
fn the_checker_sees_use_trees_parents_and_circles() {
    assert_eq!(
        expand_use_tree("crate::a::{b, c::{d, e}}"),
        vec!["crate::a::b", "crate::a::c::d", "crate::a::c::e"]
    );
    let krate = Crate {
        modules: [
            ("".to_owned(), String::new()),
            ("a".to_owned(), "use crate::b::thing;".to_owned()),
            ("b".to_owned(), "fn f() { crate::a::g(); }".to_owned()),
            ("b::c".to_owned(), "use super::{x, y};".to_owned()),
            ("d".to_owned(), "fn f() { c::h() }".to_owned()),
            ("b::c::e".to_owned(), "use super::super::x;".to_owned()),
        ]
        .into_iter()
        .collect(),
    };
    assert_eq!(imports_of(&krate, "b::c"), BTreeSet::from(["b".to_owned()]));
    assert_eq!(imports_of(&krate, "d"), BTreeSet::new());
    // A test-only item before the test module is still code that is read.
    assert_eq!(
        code_of(
            "#[cfg(test)]\nfn helper() {}\nfn f() { crate::b::g(); }\n#[cfg(test)]\nmod tests {\n    use crate::z;\n}"
        ),
        "#[cfg(test)]\nfn helper() {}\nfn f() { crate::b::g(); }"
    );
    assert_eq!(code_of("fn f() {}\n#[cfg(test)]\npub(crate) mod tests {}"), "fn f() {}");
    assert_eq!(imports_of(&krate, "b::c::e"), BTreeSet::from(["b".to_owned()]));
    assert_eq!(circles(&edges_of(&krate)), vec![vec!["a".to_owned(), "b".to_owned()]]);
}
