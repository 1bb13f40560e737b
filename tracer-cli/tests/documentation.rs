//! What the user documentation states holds: the spool and trace format
//! versions it names are the code's, the test prerequisites the README
//! lists are those `tests/run` needs, `cudatrace dump`'s part names
//! everything `dump` can print, the PyTorch examples say in one line
//! what they lack, as their docstrings promise, the README's sample of the
//! report is what the no-GPU demo's report prints, and the GPU validation
//! page has a row for every GPU scenario.

mod common;

use cudatrace_events::measures::limit_ledger;
use cudatrace_events::{Kind, Op, SPOOL_VERSION};
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

/// The words of a shell command line, with single-quoted parts kept whole
/// (enough for `tests/run`'s own lines).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[test]
fn the_readme_names_every_test_prerequisite_tests_run_needs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let script = std::fs::read_to_string(root.join("tests/run")).unwrap();
    let script = script.replace("\\\n", " ");
    let readme = read("README.md");
    let tests_part = &readme[readme.find("## Tests").unwrap()..];
    let tests_part = &tests_part[..tests_part[3..].find("## ").map_or(tests_part.len(), |end| end + 3)];
    // What `require` and `require_python` check, each `CHECK:PACKAGE`:
    // the package (Debian's, or Python's) is what a user installs.
    let mut packages = Vec::new();
    for line in script.lines().map(str::trim) {
        let words = shell_words(line);
        if matches!(words.first().map(String::as_str), Some("require" | "require_python")) {
            for check in &words[2..] {
                packages.push(check.rsplit(':').next().unwrap().to_string());
            }
        }
    }
    assert!(
        packages.len() >= 10,
        "tests/run's prerequisites not found: {packages:?}"
    );
    for package in &packages {
        assert!(
            tests_part.contains(&format!("`{package}`")),
            "README.md's Tests section does not name {package}, which tests/run requires"
        );
    }
    // The Python packages `tests/run` installs itself with pip, at the
    // versions it pins, and where.
    let pins: Vec<(String, String)> = script
        .lines()
        .filter(|line| line.contains("-m pip install"))
        .flat_map(shell_words)
        .filter_map(|word| {
            let (name, version) = word.split_once("==")?;
            Some((name.to_string(), version.to_string()))
        })
        .collect();
    assert_eq!(
        pins.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(),
        ["perfetto", "protobuf"],
        "tests/run's pip installs"
    );
    for (name, version) in &pins {
        let said = format!("`{name}`");
        let at = tests_part
            .find(&said)
            .unwrap_or_else(|| panic!("README.md's Tests section does not name {name}, which tests/run installs"));
        assert!(
            tests_part[at..].contains(&format!("({version})")),
            "README.md does not give {name}'s version {version}"
        );
    }
    let venv = "venv=${CARGO_TARGET_DIR:-target}/test-python";
    assert!(script.contains(venv), "tests/run's virtual environment moved");
    assert!(tests_part.contains("`target/test-python` (under `$CARGO_TARGET_DIR` if that is set)"));
}

/// `docs/usage.md`'s part on `cudatrace dump` (up to the next part).
fn dump_part() -> String {
    let usage = read("docs/usage.md");
    let at = usage
        .find("## Spools and traces as JSON lines")
        .expect("docs/usage.md has a part on dump");
    let rest = &usage[at + 3..];
    let end = rest.find(" ## ").map_or(usage.len(), |end| at + 3 + end);
    usage[at..end].to_string()
}

/// A file of the repository's source, as it reads.
fn source(name: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::read_to_string(root.join(name)).unwrap()
}

#[test]
fn the_dump_part_of_usage_md_names_every_op_kind_and_record_dump_prints() {
    let part = dump_part();
    // Each op has a row of the ops' table, and each kind is named.
    let missing: Vec<&str> = Op::ALL
        .iter()
        .map(|op| op.name())
        .filter(|name| !part.contains(&format!("| `{name}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/usage.md's table of dump ops lacks {missing:?}"
    );
    let missing: Vec<&str> = Kind::ALL
        .iter()
        .map(|kind| kind.name())
        .filter(|name| !part.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/usage.md's dump part lacks the kinds {missing:?}"
    );
    // Each object dump prints for a record that is not an event: the first
    // key of each JSON object its lines are made of (an event's line and a
    // symbol's frame start with fields of their own).
    let lines = source("tracer-cli/src/outputs/json/dump_lines.rs");
    let lines = lines.split_whitespace().collect::<Vec<_>>().join(" ");
    let objects: std::collections::BTreeSet<&str> = lines
        .split("json!({")
        .skip(1)
        .filter_map(|after| after.trim_start().strip_prefix('"')?.split('"').next())
        .filter(|name| !["pid", "function"].contains(name))
        .collect();
    assert!(objects.len() >= 15, "dump_lines.rs's objects not found: {objects:?}");
    let missing: Vec<&&str> = objects
        .iter()
        .filter(|name| !part.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/usage.md's dump part does not name {missing:?}"
    );
    // The memory limit record's codes of why a process kept the limit to
    // itself: each code the events crate has words for.
    let unknown = limit_ledger::reason(u64::MAX);
    let codes: Vec<u64> = (1..)
        .take_while(|&code| limit_ledger::reason(code) != unknown)
        .collect();
    assert!(codes.len() >= 7, "limit_ledger's codes: {codes:?}");
    let usage = source("docs/usage.md");
    let row = usage
        .lines()
        .find(|line| line.starts_with("| `memory-limit` |"))
        .expect("a memory-limit row");
    assert!(row.contains(&format!("`arg1` {} when", limit_ledger::SHARED)), "{row}");
    for code in codes {
        assert!(
            row.contains(&format!(" {code} ")),
            "the memory-limit row lacks code {code}: {row}"
        );
    }
}

/// Runs `python3 -S -B EXAMPLE` (no site packages, so no PyTorch installed
/// there is found) with `PYTHONPATH` set to `path`, or unset.
fn run_example(example: &Path, path: Option<&Path>) -> std::process::Output {
    let mut python = std::process::Command::new("python3");
    python.arg("-S").arg("-B").arg(example).env_remove("PYTHONPATH");
    if let Some(path) = path {
        python.env("PYTHONPATH", path);
    }
    python.output().unwrap()
}

#[test]
fn the_pytorch_examples_say_in_one_line_that_they_need_pytorch_and_a_gpu() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut examples: Vec<_> = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "py"))
        .filter(|path| std::fs::read_to_string(path).unwrap().contains("import torch"))
        .collect();
    examples.sort();
    let names: Vec<String> = examples
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["leak_validation_loss.py", "leak_zero_grad.py", "train.py"]);
    // A PyTorch that sees no GPU, as on a machine without one.
    let stub = std::env::temp_dir().join(format!("cudatrace-stub-torch-{}", std::process::id()));
    std::fs::create_dir_all(stub.join("torch")).unwrap();
    std::fs::write(
        stub.join("torch/__init__.py"),
        "import types\ncuda = types.SimpleNamespace(is_available=lambda: False)\n",
    )
    .unwrap();
    std::fs::write(stub.join("torch/nn.py"), "").unwrap();
    let runs: Vec<_> = examples
        .iter()
        .flat_map(|example| [run_example(example, None), run_example(example, Some(&stub))])
        .collect();
    std::fs::remove_dir_all(&stub).unwrap();
    for (outputs, name) in runs.chunks(2).zip(&names) {
        let without_pytorch = format!(
            "{name}: cannot import PyTorch (No module named 'torch'); it needs PyTorch and a CUDA GPU \
             (examples/no-gpu-demo.sh shows a report without either)\n"
        );
        let without_gpu = format!(
            "{name}: no CUDA GPU is available to PyTorch; it needs a CUDA GPU \
             (examples/no-gpu-demo.sh shows a report without one)\n"
        );
        for (output, said) in outputs.iter().zip([without_pytorch, without_gpu]) {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!((output.status.code(), stderr.as_ref()), (Some(2), said.as_str()));
            assert!(output.stdout.is_empty(), "{name}");
        }
    }
}

/// The scenarios of the GPU suite, by the names `tests/gpu/run.sh --only`
/// takes: the first word of each entry's label in `run_scenarios.py`'s
/// `SCENARIOS` list, whose entries are `("NAME what it checks", function)`,
/// one or two lines each.
fn gpu_scenarios() -> Vec<String> {
    let script = source("tests/gpu/run_scenarios.py");
    let start = script
        .find("\nSCENARIOS = [\n")
        .expect("tests/gpu/run_scenarios.py has its SCENARIOS list");
    let list = &script[start + "\nSCENARIOS = [\n".len()..];
    let list = &list[..list.find("\n]\n").expect("the SCENARIOS list ends with `]`")];
    let names: Vec<String> = list
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("(\""))
        .map(|label| label.split([' ', '"']).next().unwrap().to_string())
        .collect();
    // Each entry names its function once: as many functions as names, so
    // that an entry written in a shape this reader misses is not skipped.
    let functions = list.matches("scenario_").count();
    assert!(!names.is_empty(), "no scenario found in run_scenarios.py's SCENARIOS");
    assert_eq!(names.len(), functions, "run_scenarios.py's entries as read: {names:?}");
    names
}

/// The rows of the first table of a Markdown text, each as its cells
/// (header and separator left out).
fn first_table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let cells = |line: &str| -> Vec<String> {
        let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
        inner.split('|').map(|cell| cell.trim().to_string()).collect()
    };
    let mut lines = text
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'));
    let header = cells(lines.next().expect("a table"));
    let rows = lines.skip(1).map(cells).collect();
    (header, rows)
}

#[test]
fn the_gpu_validation_table_has_one_row_for_every_gpu_scenario() {
    let scenarios = gpu_scenarios();
    assert!(scenarios.len() >= 40, "run_scenarios.py's scenarios: {scenarios:?}");
    let page = source("docs/gpu-validation.md");
    let (header, rows) = first_table(&page);
    assert_eq!(
        header,
        ["scenario", "what it checks", "last result", "date", "device, run"],
        "docs/gpu-validation.md's first table"
    );
    for row in &rows {
        assert_eq!(row.len(), header.len(), "a row of docs/gpu-validation.md: {row:?}");
        assert!(row.iter().all(|cell| !cell.is_empty()), "an empty cell: {row:?}");
    }
    // One row for each scenario, and no row for a scenario the suite lost
    // (the rows of several words are the measures run outside `run.sh`).
    for scenario in &scenarios {
        let found = rows.iter().filter(|row| &row[0] == scenario).count();
        assert_eq!(
            found, 1,
            "docs/gpu-validation.md has {found} rows for GPU scenario {scenario}"
        );
    }
    for row in rows.iter().filter(|row| !row[0].contains(' ')) {
        assert!(
            scenarios.contains(&row[0]),
            "docs/gpu-validation.md has a row for {:?}, which tests/gpu/run_scenarios.py lacks",
            row[0]
        );
    }
    // The run log: every month's file is linked from the page, and every
    // file linked is there.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut logs: Vec<String> = std::fs::read_dir(root.join("docs/history"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("gpu-runs-") && name.ends_with(".md"))
        .collect();
    logs.sort();
    assert!(!logs.is_empty(), "no docs/history/gpu-runs-*.md");
    let mut linked: Vec<String> = page
        .match_indices("](history/")
        .map(|(at, _)| page[at + "](history/".len()..].split(')').next().unwrap().to_string())
        .filter(|name| name.starts_with("gpu-runs-"))
        .collect();
    linked.sort();
    linked.dedup();
    assert_eq!(linked, logs, "the run logs docs/gpu-validation.md links");
}

/// The ```text blocks of a Markdown text, as they read.
fn text_blocks(text: &str) -> Vec<Vec<String>> {
    text.split("\n```text\n")
        .skip(1)
        .map(|block| {
            block
                .split("\n```")
                .next()
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// A report line with what varies from one machine or run to the next made
/// plain: the checkout's path (`<checkout>`), process ids, absolute paths
/// (the Python program's), and the libraries of a run of frames.
fn line_shape(line: &str, checkout: &str) -> String {
    let line = line.replace(checkout, "<checkout>");
    let indent = &line[..line.len() - line.trim_start().len()];
    if line.trim_start().starts_with("… ") {
        return format!("{indent}… frames");
    }
    let mut words: Vec<String> = Vec::new();
    for word in line.split(' ') {
        let pid = words.last().is_some_and(|last| last == "pid");
        words.push(if pid && word.chars().all(|c| c.is_ascii_digit()) {
            "N".to_string()
        } else if word.starts_with('/') {
            "<path>".to_string()
        } else {
            word.to_string()
        });
    }
    words.join(" ")
}

/// Whether `sample`'s lines are `report`'s, in order, after `line_shape`:
/// from the report's first line when `from_the_start`, anywhere after it
/// otherwise; a sample line `...` stands for any report lines.
fn sample_in_report(sample: &[String], report: &[String], from_the_start: bool, checkout: &str) -> Result<(), String> {
    let shapes: Vec<String> = report.iter().map(|line| line_shape(line, checkout)).collect();
    let mut at = 0;
    let mut skipping = !from_the_start;
    for line in sample {
        if line.trim() == "..." {
            skipping = true;
            continue;
        }
        let wanted = line_shape(line, checkout);
        let found = if skipping {
            shapes[at..]
                .iter()
                .position(|shape| *shape == wanted)
                .map(|offset| at + offset)
        } else {
            (shapes.get(at) == Some(&wanted)).then_some(at)
        };
        match found {
            Some(index) => at = index + 1,
            None => return Err(format!("the report does not have {line:?} there (as {wanted:?})")),
        }
        skipping = false;
    }
    Ok(())
}

#[test]
fn the_readme_s_sample_of_the_report_is_what_the_no_gpu_demo_prints() {
    // The demo's run, as `examples/no-gpu-demo.sh` makes it: from the
    // checkout, `python3 examples/no_gpu_demo.py` over the fake driver; the
    // host named as in the README.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .canonicalize()
        .unwrap();
    let (mut run, trace) = common::run_program("readme-sample", Path::new("python3"), &["--force"]);
    let out = run
        .arg("examples/no_gpu_demo.py")
        .current_dir(&root)
        .env("CUDATRACE_TEST_HOST", "vm")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let report = common::cudatrace(&["report"]).arg(&trace).output().unwrap();
    assert!(report.status.success(), "{}", common::stderr(&report));
    let report: Vec<String> = common::stdout(&report).lines().map(str::to_string).collect();
    // The first block is the report's first lines; the second, lines of it
    // further down.
    let readme = source("README.md");
    let blocks = text_blocks(&readme);
    assert!(blocks.len() >= 2, "README.md's text blocks: {blocks:?}");
    let checkout = root.to_str().unwrap();
    for (block, from_the_start) in [(&blocks[0], true), (&blocks[1], false)] {
        assert!(block.len() >= 4, "{block:?}");
        if let Err(error) = sample_in_report(block, &report, from_the_start, checkout) {
            panic!(
                "README.md's sample {block:#?}\ndoes not match the demo's report:\n{}\n{error}",
                report.join("\n")
            );
        }
    }
    assert!(blocks[0][0].starts_with("trace of `python3 examples/no_gpu_demo.py`"));
    assert!(blocks[0].iter().any(|line| line.starts_with("  growing: ")));
}
