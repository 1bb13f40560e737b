//! The settings contract (`cudatrace_events::settings`): the one table of
//! environment variables that the library and the command line share is
//! the one users read (the README's table, `cudatrace run --help`), no code
//! names a variable outside it, and the knob only tests turn is in no
//! library users build.

mod common;

use common::*;
use cudatrace_events::settings::{ALL, TEST_SIGNAL_WHILE_OPENING};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[path = "../../tests/support/source_files.rs"]
mod source_files;
use source_files::rust_files;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn table_names() -> BTreeSet<String> {
    ALL.iter().map(|variable| variable.name.to_string()).collect()
}

/// The words of `text` that are written like a variable of ours.
fn cudatrace_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("CUDATRACE_"))
        .map(str::to_string)
        .collect()
}

#[test]
fn run_help_names_every_variable_of_the_table_and_no_other() {
    let output = cudatrace(&["run", "--help"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let help = stdout(&output);
    let section = &help[help
        .find("Environment variables")
        .unwrap_or_else(|| panic!("no environment part in:\n{help}"))..];
    let listed: BTreeSet<String> = section
        .lines()
        .filter_map(|line| line.strip_prefix("  "))
        .filter(|name| !name.starts_with(' ') && !name.is_empty())
        // A row is the name, then who sets it where that is not the user.
        .map(|row| row.split(' ').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(listed, table_names(), "{section}");
    let named_anywhere = cudatrace_words(&help);
    let extra: Vec<_> = named_anywhere.difference(&table_names()).cloned().collect();
    assert!(
        extra.is_empty(),
        "run --help names variables not in the table: {extra:?}"
    );
}

#[test]
fn the_readme_table_names_every_variable_of_the_table_and_no_other() {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let start = readme.find("\n## Environment variables").expect("the README's part");
    let part = &readme[start + 1..];
    let part = &part[..part[3..].find("\n## ").map_or(part.len(), |end| end + 3)];
    let mut in_table = BTreeSet::new();
    for row in part.lines().filter(|line| line.starts_with('|')).skip(2) {
        let first_cell = row.split('|').nth(1).unwrap();
        for (at, name) in first_cell.split('`').enumerate() {
            if at % 2 == 1 {
                assert!(in_table.insert(name.to_string()), "{name} twice in the README's table");
            }
        }
    }
    assert_eq!(in_table, table_names(), "the README's table against the settings table");
    let extra: Vec<_> = cudatrace_words(part).difference(&table_names()).cloned().collect();
    assert!(
        extra.is_empty(),
        "the README's part names variables not in the table: {extra:?}"
    );
}

/// The string literals of Rust `source` (comments and the test module left
/// out), as written between their quotes.
fn string_literals(source: &str) -> Vec<String> {
    let source = match source.find("#[cfg(test)]\nmod ") {
        Some(at) => &source[..at],
        None => source,
    };
    let bytes = source.as_bytes();
    let mut literals = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'/' if bytes.get(at + 1) == Some(&b'/') => {
                at = source[at..].find('\n').map_or(bytes.len(), |end| at + end);
            }
            b'/' if bytes.get(at + 1) == Some(&b'*') => {
                at = source[at + 2..].find("*/").map_or(bytes.len(), |end| at + 2 + end + 2);
            }
            // A character literal (not a lifetime): skipped whole, so that
            // '"' opens no string.
            b'\'' if bytes.get(at + 2) == Some(&b'\'') || bytes.get(at + 1) == Some(&b'\\') => {
                at += 1;
                while at < bytes.len() && bytes[at] != b'\'' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
                at += 1;
            }
            b'r' if matches!(bytes.get(at + 1), Some(b'"' | b'#'))
                && (at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_')) =>
            {
                let hashes = source[at + 1..].bytes().take_while(|&b| b == b'#').count();
                let open = at + 1 + hashes;
                if bytes.get(open) != Some(&b'"') {
                    at += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let end = source[open + 1..]
                    .find(&close)
                    .map_or(bytes.len(), |end| open + 1 + end);
                literals.push(source[open + 1..end].to_string());
                at = end + close.len();
            }
            b'"' => {
                let mut end = at + 1;
                while end < bytes.len() && bytes[end] != b'"' {
                    end += if bytes[end] == b'\\' { 2 } else { 1 };
                }
                literals.push(source[at + 1..end.min(bytes.len())].to_string());
                at = end + 1;
            }
            _ => at += 1,
        }
    }
    literals
}

#[test]
fn the_literal_finder_finds_literals_and_skips_comments() {
    let source = "// \"CUDATRACE_A\"\nlet a = \"x\\\"y\"; let c = '\"'; let r = r#\"CUDATRACE_B \"q\"\"#;\n\
                  /* \"no\" */ getenv(c\"CUDATRACE_C\"); fn f<'a>(x: &'a str) {}\n\
                  #[cfg(test)]\nmod tests { \"CUDATRACE_D\" }";
    assert_eq!(
        string_literals(source),
        vec!["x\\\"y", "CUDATRACE_B \"q\"", "CUDATRACE_C"]
    );
}

#[test]
fn no_code_names_a_variable_outside_the_settings_module_and_the_wording() {
    let root = repository();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("tracer-cli/src"), &mut files);
    for crate_dir in std::fs::read_dir(root.join("crates")).unwrap() {
        rust_files(&crate_dir.unwrap().path().join("src"), &mut files);
    }
    let allowed = [
        root.join("crates/cudatrace-events/src/settings.rs"),
        root.join("tracer-cli/src/wording"),
    ];
    assert!(files.len() > 100, "the source was not found: {}", files.len());
    let mut named = Vec::new();
    for file in files.iter().filter(|file| !allowed.iter().any(|a| file.starts_with(a))) {
        let source = std::fs::read_to_string(file).unwrap();
        for literal in string_literals(&source) {
            if literal.contains("CUDATRACE_") {
                named.push(format!("{}: {literal:?}", file.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(
        named.is_empty(),
        "variables named outside cudatrace_events::settings (use its table):\n{}",
        named.join("\n")
    );
}

/// The target folder the tests were built in.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().parent().unwrap().to_path_buf()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

#[test]
fn the_library_users_build_has_no_test_knob_and_the_tests_one_has() {
    let name = TEST_SIGNAL_WHILE_OPENING.name.as_bytes();
    // The tests preload a library built with the `testing` feature...
    let tested = std::fs::read(tracer_library()).unwrap();
    assert!(
        contains(&tested, name),
        "the tests' library cannot raise the test signal"
    );
    // ...and `cargo build --release` makes one without: built here as
    // users build it (no test target, so no dev-dependency's features), in
    // a target folder of its own. In the tests' own folder it would replace
    // the library the other tests preload under `cargo test --release`, in
    // the middle of their run.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let target = target_dir().join("release-check");
    let built = std::process::Command::new(cargo)
        .current_dir(repository())
        .args([
            "build",
            "--release",
            "--offline",
            "--lib",
            "-p",
            "cudatrace",
            "--target-dir",
        ])
        .arg(&target)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let release = std::fs::read(target.join("release/libcudatrace.so")).unwrap();
    assert!(
        contains(&release, cudatrace_events::settings::DIR.name.as_bytes()),
        "not the library"
    );
    assert!(
        !contains(&release, b"CUDATRACE_TEST_SIGNAL"),
        "a release build reads the test signal"
    );
    assert!(
        !contains(&release, cudatrace_events::settings::TEST_WHOLE_WALKS.name.as_bytes()),
        "a release build reads the whole-walks knob"
    );
}
