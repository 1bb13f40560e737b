//! What the user documentation states holds: the spool and trace format
//! versions it names are the code's, and the test prerequisites the README
//! lists are those `tests/run` needs.

use cudatrace_events::SPOOL_VERSION;
use cudatrace_trace::{FORMAT_VERSION, OLDEST_READABLE_VERSION};
use std::path::Path;

/// A file of the repository, with its line breaks and runs of spaces made
/// single spaces, so that a phrase is found wherever the text wraps.
fn read(name: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join(name)).unwrap();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The numbers that follow each `phrase` in `text`, in order.
fn numbers_after(text: &str, phrase: &str) -> Vec<u32> {
    text.match_indices(phrase)
        .map(|(at, _)| {
            let digits: String = text[at + phrase.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits
                .parse()
                .unwrap_or_else(|_| panic!("no number after {phrase:?} at byte {at}"))
        })
        .collect()
}

/// `docs/trace-format.md` split into its spool part and its trace part.
fn format_parts() -> (String, String) {
    let format = read("docs/trace-format.md");
    let at = format.find("# Trace format").expect("a trace format part");
    (format[..at].to_string(), format[at..].to_string())
}

#[test]
fn every_version_the_documentation_states_is_the_code_s() {
    let (spool_part, trace_part) = format_parts();
    let (readme, usage) = (read("README.md"), read("docs/usage.md"));
    // Where a version is stated as the current one, it must be the code's;
    // each of these statements is there.
    let statements: [(&str, &str, &str, u32); 6] = [
        ("README.md", &readme, "A spool (version ", SPOOL_VERSION),
        (
            "docs/trace-format.md (spools)",
            &spool_part,
            "this page describes version ",
            SPOOL_VERSION,
        ),
        (
            "docs/trace-format.md (spools)",
            &spool_part,
            "| format version (",
            SPOOL_VERSION,
        ),
        (
            "docs/trace-format.md (traces)",
            &trace_part,
            "This page describes format version ",
            FORMAT_VERSION,
        ),
        (
            "docs/trace-format.md (traces)",
            &trace_part,
            "v format version (",
            FORMAT_VERSION,
        ),
        ("docs/usage.md", &usage, "\"format_version\": ", FORMAT_VERSION),
    ];
    for (name, text, phrase, version) in statements {
        let found = numbers_after(text, phrase);
        assert!(!found.is_empty(), "{name} no longer says {phrase:?}");
        assert!(
            found.iter().all(|&n| n == version),
            "{name} says {phrase:?} {found:?}; the code's version is {version}"
        );
    }
    // Wherever else a JSON sample or a sentence names the current version
    // of a spool or a trace, it is the code's too.
    let everywhere = [
        ("\"format_version\": ", FORMAT_VERSION),
        ("spool format version ", SPOOL_VERSION),
        ("trace format version ", FORMAT_VERSION),
    ];
    for (name, text) in [("README.md", &readme), ("docs/usage.md", &usage)] {
        for (phrase, version) in everywhere {
            let found = numbers_after(text, phrase);
            assert!(found.iter().all(|&n| n == version), "{name} says {phrase:?} {found:?}");
        }
    }
    // The versions readers accept, and a note for each version that came
    // after the oldest: what it added.
    let accepted = format!(
        "readers also read versions {OLDEST_READABLE_VERSION} to {}",
        FORMAT_VERSION - 1
    );
    assert!(
        trace_part.contains(&accepted),
        "docs/trace-format.md lacks {accepted:?}"
    );
    for version in OLDEST_READABLE_VERSION + 2..=FORMAT_VERSION {
        let note = format!("Version {version} ");
        assert!(
            trace_part.contains(&note),
            "docs/trace-format.md says nothing of trace format version {version}"
        );
    }
    for version in 3..=SPOOL_VERSION {
        let note = format!("version {version} ");
        assert!(
            spool_part.contains(&note),
            "docs/trace-format.md says nothing of spool format version {version}"
        );
    }
    // No version later than the code's is named anywhere.
    for (name, text, newest) in [
        ("docs/trace-format.md (spools)", &spool_part, SPOOL_VERSION),
        ("docs/trace-format.md (traces)", &trace_part, FORMAT_VERSION),
    ] {
        for phrase in ["version ", "Version ", "format "] {
            let later: Vec<u32> = text
                .match_indices(phrase)
                .filter_map(|(at, _)| {
                    let digits: String = text[at + phrase.len()..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    digits.parse().ok()
                })
                .filter(|&n| n > newest)
                .collect();
            assert!(later.is_empty(), "{name} names versions {later:?} after {newest}");
        }
    }
}
