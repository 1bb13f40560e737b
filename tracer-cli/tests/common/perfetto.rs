//! `cudatrace perfetto`'s two formats read back: the protobuf with
//! Perfetto's own message definitions (pftrace.py beside this file, which
//! also checks the sequence's rules), the JSON with serde; both brought to
//! one shape, so that a test can say they draw the same.

use super::cudatrace;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python that reads protobuf traces: `CUDATRACE_TEST_PYTHON` (tests/run
/// sets it to a virtual environment with the perfetto package), else python3.
fn python() -> std::ffi::OsString {
    std::env::var_os("CUDATRACE_TEST_PYTHON").unwrap_or_else(|| "python3".into())
}

/// What pftrace.py reads in a protobuf trace, asserting it found no broken rule.
pub fn read_pftrace(path: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/pftrace.py");
    let output = Command::new(python())
        .arg(script)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {:?} ({e}): tests/run sets CUDATRACE_TEST_PYTHON", python()));
    assert!(
        output.status.success(),
        "pftrace.py {}: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let read: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(read["problems"], json!([]), "{}", path.display());
    for (lanes, figures) in read["lanes"].as_object().unwrap() {
        assert_eq!(
            figures["lanes"], figures["most_alive"],
            "{lanes}: more lanes than needed"
        );
    }
    read
}

/// Runs `cudatrace perfetto TRACE ARGS --force -o OUT`; OUT.
pub fn convert(trace: &Path, out: PathBuf, args: &[&str]) -> PathBuf {
    let output = cudatrace(&[
        "perfetto",
        trace.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--force",
    ])
    .args(args)
    .output()
    .unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// A frame of the protobuf as the JSON writes it: `function (file:line)
/// [library]`, the library being the end of the protobuf's function name.
fn frame_text(frame: &Value) -> String {
    let function = frame["function"].as_str().unwrap();
    let (base, library) = match function.strip_suffix(']').and_then(|f| f.rsplit_once(" [")) {
        Some((base, library)) => (base, Some(library)),
        None => (function, None),
    };
    let mut text = base.to_string();
    if let Some(file) = frame["file"].as_str() {
        text += &match frame["line"].as_u64() {
            Some(line) => format!(" ({file}:{line})"),
            None => format!(" ({file})"),
        };
    }
    if let Some(library) = library {
        text += &format!(" [{library}]");
    }
    text
}

fn stack_texts(stack: &Value) -> Value {
    match stack.as_array() {
        Some(frames) => frames.iter().map(frame_text).map(Value::from).collect(),
        None => json!([]),
    }
}

/// Sorts the items of each list of `drawing`, so that order in the file
/// does not count (counters excepted: their values stay in time order).
fn sorted(mut drawing: Value) -> Value {
    for key in ["processes", "slices", "instants", "marks"] {
        let list = drawing[key].as_array_mut().unwrap();
        list.sort_by_key(|item| item.to_string());
    }
    drawing
}

/// The drawing of a protobuf trace as [`read_pftrace`] reads it: processes
/// (pid, name, labels), slices (pid, name, category, begin, end, arguments,
/// frames), instants (pid, tid, name, category, time, arguments, frames),
/// marks (name, time) and counters (their values by pid and name). Times
/// are ns from the trace's start, those before it as 0, as the JSON has them.
pub fn proto_drawing(read: &Value) -> Value {
    let ns = |value: &Value| value.as_i64().unwrap().max(0);
    let processes: Vec<Value> = read["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == "process")
        .map(|t| json!([t["pid"], t["process_name"], t["labels"]]))
        .collect();
    let slices: Vec<Value> = read["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            json!([
                s["pid"],
                s["name"],
                s["categories"][0],
                ns(&s["begin"]),
                ns(&s["end"]),
                s["args"],
                stack_texts(&s["stack"])
            ])
        })
        .collect();
    let (mut instants, mut marks) = (Vec::new(), Vec::new());
    for i in read["instants"].as_array().unwrap() {
        if i["tid"].is_null() {
            assert_eq!(i["track"], "recording");
            marks.push(json!([i["name"], ns(&i["ts"])]));
        } else {
            instants.push(json!([
                i["pid"],
                i["tid"],
                i["name"],
                i["categories"][0],
                ns(&i["ts"]),
                i["args"],
                stack_texts(&i["stack"])
            ]));
        }
    }
    let mut counters = Map::new();
    for c in read["counters"].as_array().unwrap() {
        let key = format!("{} {}", c["pid"], c["name"].as_str().unwrap());
        let values = counters.entry(key).or_insert_with(|| json!([]));
        values.as_array_mut().unwrap().push(json!([ns(&c["ts"]), c["value"]]));
    }
    sorted(json!({
        "processes": processes,
        "slices": slices,
        "instants": instants,
        "marks": marks,
        "counters": counters,
    }))
}

/// The drawing of a JSON trace, in the shape of [`proto_drawing`].
pub fn json_drawing(path: &Path) -> Value {
    let trace: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let ns = |event: &Value| (event["ts"].as_f64().unwrap() * 1000.0).round() as i64;
    let (mut names, mut labels) = (Map::new(), Map::new());
    let mut begun: Map<String, Value> = Map::new();
    let (mut slices, mut instants, mut marks) = (Vec::new(), Vec::new(), Vec::new());
    let mut counters = Map::new();
    let without_stack = |args: &Value| -> (Value, Value) {
        let mut args = args.as_object().cloned().unwrap_or_default();
        let stack = args.remove("stack").unwrap_or(json!([]));
        (Value::Object(args), stack)
    };
    for e in trace["traceEvents"].as_array().unwrap() {
        let pid = e["pid"].to_string();
        match e["ph"].as_str().unwrap() {
            "M" if e["name"] == "process_name" => {
                names.insert(pid, e["args"]["name"].clone());
            }
            "M" => {
                labels.insert(pid, json!([e["args"]["labels"]]));
            }
            "b" => {
                let key = format!("{pid} {}", e["id"]);
                assert!(begun.insert(key, e.clone()).is_none(), "{e}");
            }
            "e" => {
                let begin = begun
                    .remove(&format!("{pid} {}", e["id"]))
                    .expect("an end with its begin");
                let (mut args, stack) = without_stack(&begin["args"]);
                for (key, value) in e["args"].as_object().unwrap() {
                    args[key] = value.clone();
                }
                slices.push(json!([
                    begin["pid"],
                    begin["name"],
                    begin["cat"],
                    ns(&begin),
                    ns(e),
                    args,
                    stack
                ]));
            }
            "i" if e["s"] == "g" => marks.push(json!([e["name"], ns(e)])),
            "i" => {
                let (args, stack) = without_stack(&e["args"]);
                instants.push(json!([e["pid"], e["tid"], e["name"], e["cat"], ns(e), args, stack]));
            }
            "C" => {
                let key = format!("{pid} {}", e["name"].as_str().unwrap());
                let values = counters.entry(key).or_insert_with(|| json!([]));
                values.as_array_mut().unwrap().push(json!([ns(e), e["args"]["bytes"]]));
            }
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    assert!(begun.is_empty(), "slices that never end: {begun:?}");
    let processes: Vec<Value> = names
        .iter()
        .map(|(pid, name)| json!([pid.parse::<u64>().unwrap(), name, labels[pid]]))
        .collect();
    sorted(json!({
        "processes": processes,
        "slices": slices,
        "instants": instants,
        "marks": marks,
        "counters": counters,
    }))
}

/// Converts `trace` to both formats with `args` (`--uncompressed` for the
/// protobuf alone) and asserts they draw the same; returns what pftrace.py
/// read in the protobuf.
pub fn assert_same_drawing(trace: &Path, label: &str, args: &[&str]) -> Value {
    let mut json_args = vec!["--format", "json"];
    json_args.extend(args.iter().filter(|&&a| a != "--uncompressed"));
    let json_path = convert(trace, trace.with_file_name(format!("{label}.json")), &json_args);
    let proto_path = convert(trace, trace.with_file_name(format!("{label}.pftrace")), args);
    let read = read_pftrace(&proto_path);
    let (from_json, from_proto) = (json_drawing(&json_path), proto_drawing(&read));
    for key in ["processes", "slices", "instants", "marks", "counters"] {
        assert_eq!(from_proto[key], from_json[key], "{label}: {key} differ");
    }
    read
}
