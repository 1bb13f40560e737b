//! Call stacks: the report names the functions, files and lines that hold
//! memory, for native code (with and without frame pointers, in a library
//! loaded after start) and for Python code.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `cudatrace run -o <fresh>/run.trace [options] -- program args...`.
/// Runs `python3 SCRIPT` (a program calling through `libdeep_library.so`)
/// under `cudatrace run`; the trace.
fn traced_deep_program(label: &str, script: &Path) -> PathBuf {
    let (mut command, trace) = run_argv(label, &[], &["python3".as_ref(), script.as_os_str()]);
    let output = command
        .env("DEEP_LIBRARY", fake_cuda::library_dir().join("libdeep_library.so"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    trace
}

/// A frame as the report names it: (function, file name, line).
type NamedFrame = (String, String, u64);

/// The frames of the first live allocation.
fn live_stack(report: &Value) -> Vec<NamedFrame> {
    stack_of(&report["processes"][0]["devices"][0]["live_at_exit"][0])
}

/// The frames of one live allocation.
fn stack_of(live: &Value) -> Vec<NamedFrame> {
    live["stack"]
        .as_array()
        .unwrap_or_else(|| panic!("no stack in {live}"))
        .iter()
        .map(|f| {
            let file = f["file"].as_str().unwrap_or("").rsplit('/').next().unwrap().to_owned();
            (
                f["function"].as_str().unwrap_or("").to_owned(),
                file,
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn frame(function: &str, file: &str, line: u64) -> (String, String, u64) {
    (function.to_owned(), file.to_owned(), line)
}

#[test]
fn native_frames_name_function_file_and_line_with_and_without_frame_pointers() {
    for program in ["stack_names_fp", "stack_names_nofp"] {
        let (mut command, trace) = run_argv(
            program,
            &[],
            &[fake_cuda::program(program).as_os_str(), "direct".as_ref()],
        );
        assert!(command.output().unwrap().status.success());
        let (report, _) = report_json_with_stacks(&trace);
        let stack = live_stack(&report);
        // Innermost first; the runtime hook records the call, so the
        // program's own frames come first.
        let program_frames: Vec<_> = stack.iter().filter(|f| f.1 == "stack_names.c").cloned().collect();
        assert_eq!(
            program_frames,
            vec![
                frame("inner_frame", "stack_names.c", 25),
                frame("outer_frame", "stack_names.c", 32),
                frame("main", "stack_names.c", 60),
            ],
            "{program}: {stack:?}"
        );
        assert_eq!(
            stack[..3],
            program_frames[..],
            "{program}: nothing of cudatrace's own in the stack"
        );
        let text = String::from_utf8(cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap().stdout).unwrap();
        assert!(
            text.contains(&format!(
                "    call sites live at exit:\n      1.0 MiB in 1 allocation: inner_frame (stack_names.c:25) [{program}]\n"
            )),
            "{text}"
        );
        assert!(text.contains("inner_frame ("), "{text}");
    }
}

#[test]
fn a_symbol_name_that_is_not_utf8_keeps_its_file_and_line() {
    // blazesym refuses the name (bytes 0xff 0xfe), and with it the frame:
    // the frame was `stack_names_fp+0x...` wherever it appeared.
    let (mut command, trace) = run_argv(
        "odd-name",
        &[],
        &[fake_cuda::program("stack_names_fp").as_os_str(), "odd".as_ref()],
    );
    assert!(command.output().unwrap().status.success());
    let (report, _) = report_json_with_stacks(&trace);
    let stack = live_stack(&report);
    let odd = "odd_\u{FFFD}\u{FFFD}_name";
    assert_eq!(
        stack[..2],
        [frame(odd, "stack_names.c", 192), frame("main", "stack_names.c", 80)],
        "{stack:?}"
    );
    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    assert!(
        text.contains(&format!(
            "    call sites live at exit:\n      5.0 MiB in 1 allocation: {odd} (stack_names.c:192) [stack_names_fp]\n"
        )),
        "{text}"
    );
}

#[test]
fn a_forked_child_allocating_from_its_parent_s_very_stack_gets_the_whole_stack() {
    let (mut command, trace) = run_argv(
        "fork-stack",
        &[],
        &[fake_cuda::program("stack_names_fp").as_os_str(), "fork".as_ref()],
    );
    assert!(command.output().unwrap().status.success());
    let (report, _) = report_json_with_stacks(&trace);
    let processes = report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{report}");
    let mut sizes_and_frames: Vec<(u64, Vec<NamedFrame>)> = processes
        .iter()
        .map(|process| {
            let live = &process["devices"][0]["live_at_exit"][0];
            let frames = stack_of(live).into_iter().filter(|f| f.1 == "stack_names.c").collect();
            (live["size"].as_u64().unwrap(), frames)
        })
        .collect();
    sizes_and_frames.sort();
    let expected = vec![
        frame("inner_frame", "stack_names.c", 25),
        frame("outer_frame", "stack_names.c", 32),
        frame("allocate_around_a_fork", "stack_names.c", 52),
        frame("main", "stack_names.c", 70),
    ];
    assert_eq!(sizes_and_frames, vec![(1 << 20, expected.clone()), (4 << 20, expected)]);
}

#[test]
fn a_library_loaded_after_start_is_symbolized() {
    let plugin = fake_cuda::library_dir().join("libstack_plugin.so");
    let program = fake_cuda::program("stack_names_nofp");
    let (mut command, trace) = run_argv(
        "plugin",
        &[],
        &[program.as_os_str(), "plugin".as_ref(), plugin.as_os_str()],
    );
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stdout));
    let (report, _) = report_json_with_stacks(&trace);
    let stack = live_stack(&report);
    let plugin_frames: Vec<_> = stack.iter().filter(|f| f.1 == "stack_plugin.c").cloned().collect();
    assert_eq!(
        plugin_frames,
        vec![
            frame("plugin_inner", "stack_plugin.c", 8),
            frame("plugin_allocate", "stack_plugin.c", 13)
        ],
        "{stack:?}"
    );
    let modules: Vec<&str> = report["processes"][0]["devices"][0]["live_at_exit"][0]["stack"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["module"].as_str())
        .collect();
    assert!(
        modules.iter().any(|m| m.ends_with("/libstack_plugin.so")),
        "{modules:?}"
    );
}

#[test]
fn stacks_none_records_only_the_immediate_caller_and_max_depth_cuts_with_a_marker() {
    let program = fake_cuda::program("stack_names_fp");
    let (mut command, trace) = run_argv(
        "no-stacks",
        &["--stacks", "none"],
        &[program.as_os_str(), "direct".as_ref()],
    );
    assert!(command.output().unwrap().status.success());
    let (report, _) = report_json_with_stacks(&trace);
    // Only the frame that called CUDA, so that the allocation still has an owner.
    assert_eq!(live_stack(&report), vec![frame("inner_frame", "stack_names.c", 25)]);
    let (mut command, trace) = run_argv(
        "depth",
        &["--max-depth", "2"],
        &[program.as_os_str(), "direct".as_ref()],
    );
    assert!(command.output().unwrap().status.success());
    let (report, _) = report_json_with_stacks(&trace);
    let stack = live_stack(&report);
    assert_eq!(stack.len(), 3, "{stack:?}");
    assert_eq!(stack[0], frame("inner_frame", "stack_names.c", 25));
    assert_eq!(stack[1], frame("outer_frame", "stack_names.c", 32));
    assert_eq!(stack[2].0, "[stack truncated at the depth limit]");
    let refused = cudatrace(&["run", "--max-depth", "0", "--", "true"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
}

/// Python with ctypes into the fake runtime, under `cudatrace run`.
fn python_run(label: &str, script: &str) -> PathBuf {
    let dir = scratch_dir(label);
    let path = dir.join("program.py");
    std::fs::write(&path, script).unwrap();
    let (mut command, trace) = run_argv(label, &[], &["python3".as_ref(), path.as_os_str()]);
    let runtime = fake_cuda::library_dir().join("libcudart.so.13");
    let output = command.env("FAKE_CUDART", runtime).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    trace
}

const PYTHON_PROGRAM: &str = r#"import ctypes, os, threading
cudart = ctypes.CDLL(os.environ["FAKE_CUDART"])

def allocate(size):
    block = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(block), ctypes.c_size_t(size)) == 0
    return block

def build_model():
    return allocate(5 << 20)

held = [build_model()]
"#;

#[test]
fn python_frames_name_the_functions_and_lines_that_allocated() {
    let trace = python_run("python", PYTHON_PROGRAM);
    let (report, _) = report_json_with_stacks(&trace);
    let python_frames: Vec<_> = live_stack(&report)
        .into_iter()
        .filter(|f| f.1 == "program.py")
        .collect();
    assert_eq!(
        python_frames,
        vec![
            frame("allocate", "program.py", 6),
            frame("build_model", "program.py", 10),
            frame("<module>", "program.py", 12),
        ]
    );
}

#[test]
fn a_thread_without_a_python_thread_state_gets_native_frames_and_the_marker() {
    // The C thread that allocates is not a Python thread: no Python frames.
    let script = format!(
        "import ctypes, os\nlib = ctypes.CDLL({:?})\nlib.run_thread_allocation()\n",
        fake_cuda::library_dir().join("libstack_plugin.so").to_str().unwrap()
    );
    let trace = python_run("python-thread", &script);
    let (report, _) = report_json_with_stacks(&trace);
    let stack = live_stack(&report);
    assert!(stack.iter().any(|f| f.0 == "plugin_inner"), "{stack:?}");
    assert_eq!(
        stack.last().unwrap().0,
        "[Python frames not available: this thread has no Python thread state]",
        "{stack:?}"
    );
    assert!(!stack.iter().any(|f| f.1.ends_with(".py")), "{stack:?}");
}

/// Runs the fake CUDA program `program` with `arguments` under
/// `--stacks native`; its output, and the allocations live at its exit.
fn native_stacks_of(program: &str, arguments: &[&str]) -> (std::process::Output, Vec<serde_json::Value>) {
    let mut argv = vec![fake_cuda::program(program).into_os_string()];
    argv.extend(arguments.iter().map(std::ffi::OsString::from));
    let argv: Vec<&std::ffi::OsStr> = argv.iter().map(|a| a.as_os_str()).collect();
    let (mut command, trace) = run_argv(&format!("{}-{program}", arguments[0]), &["--stacks", "native"], &argv);
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let (report, _) = report_json_with_stacks(&trace);
    let live = report["processes"][0]["devices"][0]["live_at_exit"]
        .as_array()
        .unwrap()
        .clone();
    (output, live)
}

#[test]
fn stacks_that_share_stack_slots_but_not_callers_each_get_their_own_frames() {
    // A thread's kept walks are copied where the words that steered them
    // agree: paths through maze_a and maze_c leave the frames below at the
    // same addresses, with the same return addresses, and only the caller's
    // slot tells them apart. (Short paths repeat: some 60 of the 400 walks
    // are copies.)
    for program in ["stack_names_fp", "stack_names_nofp"] {
        let (output, live) = native_stacks_of(program, &["maze", "400"]);
        let expected: std::collections::HashMap<u64, String> = stdout(&output)
            .lines()
            .filter_map(|line| line.strip_prefix("maze "))
            .map(|rest| {
                let (bytes, path) = rest.split_once(' ').unwrap();
                (bytes.parse().unwrap(), path.to_owned())
            })
            .collect();
        assert_eq!(expected.len(), 400);
        assert_eq!(live.len(), 400, "{program}");
        for allocation in &live {
            let size = allocation["size"].as_u64().unwrap();
            // The maze functions, outermost first, as letters.
            let path: String = stack_of(allocation)
                .iter()
                .rev()
                .filter_map(|(function, _, _)| function.strip_prefix("maze_"))
                .filter(|name| name.len() == 1)
                .collect();
            assert_eq!(path, expected[&size], "{program}: allocation of {size} bytes");
        }
    }
}

#[test]
fn a_kept_walk_is_not_taken_for_one_whose_frame_pointer_leads_further() {
    // From one call site, so from one stack pointer: first through a
    // frame-pointer frame whose frame pointer is data (the walk ends there),
    // then with a usable one (the walk goes on to main). Whether a
    // frame-pointer step's reads succeed hangs on the frame pointer, so the
    // first walk is no answer for the second.
    for program in ["stack_names_fp", "stack_names_nofp"] {
        let (_, live) = native_stacks_of(program, &["trampoline"]);
        let names_of = |size: u64| -> Vec<String> {
            let allocation = live.iter().find(|a| a["size"].as_u64() == Some(size)).unwrap();
            stack_of(allocation)
                .into_iter()
                .map(|(function, _, _)| function)
                .filter(|f| {
                    [
                        "inner_frame",
                        "trampoline",
                        "through_trampoline",
                        "trampoline_twice",
                        "main",
                    ]
                    .contains(&f.as_str())
                })
                .collect()
        };
        assert_eq!(names_of(2 << 20), ["inner_frame", "trampoline"], "{program}");
        // The trampoline's frame pointer is through_trampoline's frame, so
        // the step from it lands in through_trampoline's caller.
        assert_eq!(
            names_of(3 << 20),
            ["inner_frame", "trampoline", "trampoline_twice", "main"],
            "{program}"
        );
    }
}

/// Python calls a library that allocates 12 native frames further down
/// (`libdeep_library.so`), through ctypes and libffi.
const DEEP_PROGRAM: &str = r#"import ctypes, os
deep = ctypes.CDLL(os.environ["DEEP_LIBRARY"])

def make_buffers():
    deep.deep_allocate(ctypes.c_size_t(3 << 20))

make_buffers()
"#;

#[test]
fn the_python_line_heads_a_call_site_twelve_native_frames_above_the_allocation() {
    let dir = scratch_dir("deep");
    let script = dir.join("deep.py");
    std::fs::write(&script, DEEP_PROGRAM).unwrap();
    let trace = traced_deep_program("deep", &script);
    let trace = trace.to_str().unwrap();

    // Text: the site's first line names the Python line; the library's 12
    // levels follow in full, ctypes and the interpreter folded.
    let text = String::from_utf8(cudatrace(&["report", trace]).output().unwrap().stdout).unwrap();
    let sites = text.split("    call sites live at exit:\n").nth(1).expect(&text);
    let lines: Vec<&str> = sites.lines().collect();
    assert_eq!(
        lines[0], "      3.0 MiB in 1 allocation: deep.py:5 make_buffers",
        "{text}"
    );
    for level in 1..=12 {
        assert!(
            lines[1..]
                .iter()
                .take(16)
                .any(|l| l.contains(&format!("deep_level_{level} ("))),
            "level {level}: {text}"
        );
    }
    assert!(
        lines[1..]
            .iter()
            .any(|l| l.starts_with("        … ") && l.contains(" frames in ")),
        "{text}"
    );
    // Every frame with --frames full: none folded.
    let full = String::from_utf8(
        cudatrace(&["report", "--frames", "full", trace])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(!full.contains(" frames in "), "{full}");
    assert!(full.contains("deep_allocate ("), "{full}");

    // HTML: the chart's legend and the table name the Python line.
    let page = dir.join("deep.html");
    let html = cudatrace(&["html", trace, "-o", page.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(html.status.success(), "{}", String::from_utf8_lossy(&html.stderr));
    let page = std::fs::read_to_string(&page).unwrap();
    // The owner chart's legend names the library; the call-site chart's the line.
    let legends: Vec<&str> = page
        .split("<div class=\"legend\">")
        .skip(1)
        .map(|l| &l[..l.find("</div>").unwrap()])
        .collect();
    assert!(
        legends
            .iter()
            .any(|l| l == &"<span data-bytes-at-peak=\"3145728\"><i style=\"background:#4e79a7\"></i><b>deep.py:5 make_buffers</b> 3.0 MiB at the peak, 3.0 MiB at the end</span>"),
        "{legends:?}"
    );
    assert!(page.contains("<td class=\"site\">deep.py:5 make_buffers</td>"));

    // Flamegraph: the SVG has the line; the folded stack is the whole path,
    // outermost first, interpreter and ctypes folded.
    let svg = dir.join("deep.svg");
    let drawn = cudatrace(&["flamegraph", trace, "-o", svg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(drawn.status.success(), "{}", String::from_utf8_lossy(&drawn.stderr));
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("deep.py:5 make_buffers"));
    let folded = cudatrace(&["flamegraph", trace, "--folded", "-o", "-"])
        .output()
        .unwrap();
    let folded = String::from_utf8(folded.stdout).unwrap();
    assert_eq!(folded.lines().count(), 1, "{folded}");
    let frames: Vec<&str> = folded.trim_end().rsplit_once(' ').unwrap().0.split(';').collect();
    assert!(
        frames[0].starts_with("pid%20") && frames[0].ends_with("%20python3"),
        "{folded}"
    );
    assert_eq!(frames[1], "GPU%200");
    let at = frames
        .iter()
        .position(|f| *f == "deep.py:5%20make_buffers")
        .expect(&folded);
    assert_eq!(frames[at - 1], "deep.py:7%20<module>");
    assert!(frames[at + 1].starts_with("…%207%20frames%20in%20libffi"), "{folded}");
    let levels: Vec<String> = (1..=12)
        .map(|level| frames[at + 2 + level].split("%20").next().unwrap().to_string())
        .collect();
    let expected: Vec<String> = (1..=12).map(|level| format!("deep_level_{level}")).collect();
    assert_eq!(levels, expected);
    assert_eq!(frames.len(), at + 15, "{folded}");
    assert!(folded.ends_with(" 3145728\n"), "{folded}");
}

#[test]
fn stacks_that_share_their_headline_are_one_call_site() {
    // make_buffers allocates at line 5, called from lines 7 and 8: two
    // stacks, one place in the program.
    let dir = scratch_dir("deep-twice");
    let script = dir.join("deep.py");
    std::fs::write(
        &script,
        DEEP_PROGRAM.replace("make_buffers()\n", "make_buffers()\nmake_buffers()\n"),
    )
    .unwrap();
    let trace = traced_deep_program("deep-twice", &script);
    let text = String::from_utf8(cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap().stdout).unwrap();
    let sites = text.split("    call sites live at exit:\n").nth(1).expect(&text);
    let lines: Vec<&str> = sites.lines().collect();
    assert_eq!(
        lines[0], "      6.0 MiB in 2 allocations, 2 stacks: deep.py:5 make_buffers",
        "{text}"
    );
    assert!(!sites.contains("\n      3.0 MiB"), "{text}");
}

/// Python allocates through a native library on the main thread, twice
/// from two lines, and on a Python thread.
const WAYS_INTO_PYTHON: &str = r#"import ctypes, os, threading
deep = ctypes.CDLL(os.environ["DEEP_LIBRARY"])

def make_buffers(size):
    deep.deep_allocate(ctypes.c_size_t(size))

make_buffers(1 << 20)
make_buffers(2 << 20)
worker = threading.Thread(target=make_buffers, args=(3 << 20,))
worker.start()
worker.join()
"#;

/// A frame as the report gives it: (function, file, line, module).
type FullFrame = (String, String, u64, String);

/// Each live allocation's stack, every frame with its module, by size.
fn whole_stacks(trace: &Path) -> Vec<(u64, Vec<FullFrame>)> {
    let (report, _) = report_json_with_stacks(trace);
    let mut stacks: Vec<_> = report["processes"][0]["devices"][0]["live_at_exit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|live| {
            let frames = live["stack"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    let text = |key: &str| f[key].as_str().unwrap_or("").to_owned();
                    (
                        text("function"),
                        text("file"),
                        f["line"].as_u64().unwrap_or(0),
                        text("module"),
                    )
                })
                .collect();
            (live["size"].as_u64().unwrap(), frames)
        })
        .collect();
    stacks.sort();
    stacks
}

#[test]
fn a_walk_stopped_at_python_gives_the_stack_a_whole_walk_gives() {
    let dir = scratch_dir("ways-into-python");
    let script = dir.join("ways.py");
    std::fs::write(&script, WAYS_INTO_PYTHON).unwrap();
    // The same program, its walks stopped at the outermost Python call
    // (the frames below it walked once a thread) and walked whole.
    let stopped = whole_stacks(&traced_deep_program("ways-stopped", &script));
    let (mut command, trace) = run_argv("ways-whole", &[], &["python3".as_ref(), script.as_os_str()]);
    let output = command
        .env("DEEP_LIBRARY", fake_cuda::library_dir().join("libdeep_library.so"))
        .env(cudatrace_events::settings::TEST_WHOLE_WALKS.name, "1")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let whole = whole_stacks(&trace);
    let sizes: Vec<u64> = stopped.iter().map(|(size, _)| *size).collect();
    assert_eq!(sizes, vec![1 << 20, 2 << 20, 3 << 20]);
    assert_eq!(stopped, whole);
    for (size, frames) in &stopped {
        // Each has its Python frames and, below the outermost, the
        // interpreter's own frames down to the thread's start.
        let outermost = frames.iter().rposition(|f| f.3 == "python");
        let outermost = outermost.unwrap_or_else(|| panic!("{size}: {frames:?}"));
        assert!(frames.len() > outermost + 3, "{size}: {frames:?}");
        let last = &frames[frames.len() - 1].0;
        assert!(["_start", "clone3"].contains(&last.as_str()), "{size}: {frames:?}");
    }
}
