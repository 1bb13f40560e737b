//! `cudatrace pause`, `cudatrace resume` and `run --start-paused`: events of
//! a paused span are all in the trace, without call stacks, and every
//! output says which spans were paused.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The stack id of an event recorded while paused.
const PAUSED_STACK: u64 = u32::MAX as u64;
const PAUSED_SITE: &str = "(recorded while paused: no call stack)";

/// (size, stack id) of every allocation in the trace, in order.
fn allocations(trace: &Path) -> Vec<(u64, u64)> {
    let output = cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["op"] == "alloc")
        .map(|event| (event["size"].as_u64().unwrap(), event["stack"].as_u64().unwrap()))
        .collect()
}

/// What a trace of `scenarios switching` paused from the start, resumed
/// after the first allocation and paused after the second shows.
fn check_paused_then_resumed_then_paused(trace: &Path) {
    let allocated = allocations(trace);
    assert_eq!(allocated.len(), 3, "{allocated:?}");
    assert_eq!(allocated[0], (1 << 20, PAUSED_STACK));
    assert_eq!(allocated[1].0, 2 << 20);
    assert!(
        allocated[1].1 != 0 && allocated[1].1 != PAUSED_STACK,
        "recorded with its stack: {allocated:?}"
    );
    assert_eq!(allocated[2], (4 << 20, PAUSED_STACK));

    let (report, _) = report_json_with_stacks(trace);
    let spans = report["recording_paused"].as_array().unwrap();
    assert_eq!(spans.len(), 2, "{report}");
    let (first_start, first_end) = (
        spans[0]["start_s"].as_f64().unwrap(),
        spans[0]["end_s"].as_f64().unwrap(),
    );
    let second_start = spans[1]["start_s"].as_f64().unwrap();
    assert!(first_start <= first_end && first_end <= second_start, "{spans:?}");
    assert_eq!(spans[1]["end_s"], Value::Null, "still paused at the end");
    let live = &report["processes"][0]["devices"][0]["live_at_exit"];
    assert_eq!(live.as_array().unwrap().len(), 1, "{live}");
    assert_eq!(live[0]["size"], 4 << 20);
    assert_eq!(live[0]["stack"][0]["function"], PAUSED_SITE, "{live}");
    assert_eq!(live[0]["stack"].as_array().unwrap().len(), 1);

    let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
    assert!(text.contains("recording was paused 2 times, "), "{text}");
    assert!(
        text.contains(&format!("4.0 MiB in 1 allocation: {PAUSED_SITE}")),
        "the paused allocation is named so: {text}"
    );
    assert!(
        text.contains(&format!(
            "  {PAUSED_SITE}                    4.0 MiB 100.0%      5.0 MiB  71.4%\n"
        )),
        "and owned so, not by an unknown caller: {text}"
    );
}

#[test]
fn a_job_started_paused_records_every_event_and_stacks_only_while_resumed() {
    let cli = cli();
    let resume = format!("{} resume", cli.display());
    let pause = format!("{} pause", cli.display());
    let (mut command, trace) = run_command("start-paused", "switching", &["--start-paused"]);
    let output = command.args([&resume, &pause]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).ends_with("\nswitching done\n"), "{}", stdout(&output));
    let said = stderr(&output);
    assert!(
        said.contains(" is now recording, with the call stacks it was started with\n"),
        "{said}"
    );
    assert!(
        said.contains(" is now paused: events are recorded without call stacks until `cudatrace resume`\n"),
        "{said}"
    );
    check_paused_then_resumed_then_paused(&trace);
}

#[test]
fn plain_ld_preload_starts_paused_with_its_variable_and_is_switched_by_pid() {
    let dir = scratch_dir("plain-start-paused");
    let trace = dir.join("plain.trace");
    // By pid: the shell's parent is the traced program, whose own
    // environment (as it started) has no CUDATRACE_DIR, and which has no
    // other child: it is found by the switch it has mapped.
    let resume = format!("exec {} resume \"$PPID\"", cli().display());
    let pause = format!("exec {} pause \"$PPID\"", cli().display());
    let output = Command::new(fake_cuda::program("scenarios"))
        .args(["switching", &resume, &pause])
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("LD_PRELOAD", tracer_library())
        .env_remove("CUDATRACE_DIR")
        .env("CUDATRACE_START_PAUSED", "1")
        .env("CUDATRACE_OUT", &trace)
        .env("CUDATRACE_CLI", cli())
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    finished_trace(&trace);
    check_paused_then_resumed_then_paused(&trace);
}

#[test]
fn resume_with_other_stacks_and_a_repeated_pause_are_said_and_logged_once() {
    let cli = cli();
    let first = format!("{0} resume --stacks none && {0} resume --stacks none", cli.display());
    let second = format!("{0} pause && {0} pause", cli.display());
    let (mut command, trace) = run_command("resume-stacks", "switching", &["--start-paused", "--stacks", "all"]);
    let output = command.args([&first, &second]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(said.contains(" is now recording, with --stacks none\n"), "{said}");
    assert!(said.contains(" was already recording, with --stacks none\n"), "{said}");
    assert!(
        said.contains(" was already paused: events are recorded without call stacks until `cudatrace resume`\n"),
        "{said}"
    );
    let lines = stdout(&cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap());
    let switches: Vec<Value> = lines
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter_map(|record| record.get("recording_switch").cloned())
        .collect();
    let states: Vec<(bool, Value)> = switches
        .iter()
        .map(|s| (s["paused"].as_bool().unwrap(), s["stacks"].clone()))
        .collect();
    assert_eq!(
        states,
        vec![
            (true, Value::Null),
            (false, Value::from("none")),
            (true, Value::from("none")),
        ],
        "the repeat is not logged; a pause keeps the setting for the next resume"
    );
    // With --stacks none an event carries one node, the caller of CUDA (here
    // two frames: `scenario_switching` is inlined into `main`), and none of
    // the frames below it that --stacks all records.
    let (report, _) = report_json_with_stacks(&trace);
    let peak_sites = &report["processes"][0]["devices"][0]["peak_by_call_site"];
    let functions: Vec<Vec<&str>> = peak_sites
        .as_array()
        .unwrap()
        .iter()
        .map(|site| {
            let stack = site["stack"].as_array().unwrap();
            stack.iter().map(|frame| frame["function"].as_str().unwrap()).collect()
        })
        .collect();
    assert_eq!(
        functions,
        vec![vec![PAUSED_SITE], vec!["scenario_switching", "main"]],
        "{peak_sites}"
    );
}

#[test]
fn a_job_that_is_not_there_is_one_line_and_status_2() {
    // A CUDATRACE_DIR exported by hand is where runs make folders, not a job.
    let mut sleeper = Command::new("sleep")
        .arg("30")
        .env("CUDATRACE_DIR", std::env::temp_dir())
        .spawn()
        .unwrap();
    let plain_folder = scratch_dir("not-a-spool-folder");
    let cases = [
        (
            vec!["pause".to_string(), "4000000000".to_string()],
            "cudatrace: no process 4000000000 is running\n".to_string(),
        ),
        (
            vec!["resume".to_string(), sleeper.id().to_string()],
            format!(
                "cudatrace: process {} is not traced by cudatrace (or is another user's)\n",
                sleeper.id()
            ),
        ),
        (
            vec!["pause".to_string(), "/nonexistent/cudatrace-job".to_string()],
            "cudatrace: /nonexistent/cudatrace-job does not exist: the job has not recorded anything yet, or has finished\n"
                .to_string(),
        ),
        (
            vec!["pause".to_string(), plain_folder.display().to_string()],
            format!(
                "cudatrace: {} is not a cudatrace spool folder (no spool, switch or notice file in it)\n",
                plain_folder.display()
            ),
        ),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = cudatrace(&args).env_remove("CUDATRACE_DIR").output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr(&output), expected, "{args:?}");
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(
        std::fs::read_dir(&plain_folder).unwrap().next().is_none(),
        "nothing was made in a folder that is not a job's"
    );
}

#[test]
fn collect_reads_past_a_fifo_or_a_link_where_the_switch_should_be() {
    for case in ["fifo", "link"] {
        let dir = scratch_dir(&format!("switch-{case}"));
        let spools = dir.join("spools");
        std::fs::create_dir_all(&spools).unwrap();
        let output = Command::new(fake_cuda::program("scenarios"))
            .arg("runtime")
            .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
            .env("LD_PRELOAD", tracer_library())
            .env("CUDATRACE_DIR", &spools)
            .env("TMPDIR", &dir)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        let switch = spools.join("recording.switch");
        let _ = std::fs::remove_file(&switch);
        if case == "fifo" {
            let made = Command::new("mkfifo").arg(&switch).status().unwrap();
            assert!(made.success());
        } else {
            // A whole switch file, paused at 1 ns, elsewhere: followed, it
            // would put a paused span in the trace.
            let mut elsewhere = vec![0u8; 4096];
            elsewhere[..8].copy_from_slice(b"CUTRSWI\0");
            elsewhere[8] = 1;
            elsewhere.extend_from_slice(&1u64.to_le_bytes());
            elsewhere.extend_from_slice(&1u64.to_le_bytes());
            let target = dir.join("elsewhere.switch");
            std::fs::write(&target, elsewhere).unwrap();
            std::os::unix::fs::symlink(&target, &switch).unwrap();
        }
        let trace = dir.join(format!("{case}.trace"));
        let mut collect = cudatrace(&["collect", spools.to_str().unwrap(), "-o", trace.to_str().unwrap()])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(status) = collect.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = collect.kill();
                panic!("collect waited on the {case}");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert!(status.success(), "{case}");
        let (report, _) = report_json_with_stacks(&trace);
        assert_eq!(report["recording_paused"], serde_json::json!([]), "{case}");
        assert_eq!(report["complete"], true, "{case}");
    }
}

/// Runs `jobs.sh` (below) in a pid namespace of its own, so that the only
/// traced jobs `cudatrace pause` can see are the script's: jobs started
/// from other sessions and terminals (a pseudo-terminal made by `script`).
/// Returns what it printed, without the terminal's carriage returns.
fn switch_jobs_of_several_terminals(work: &Path) -> String {
    const SCRIPT: &str = r#"
set -u
cli=$1 preload=$2 program=$3 work=$4 part=$5
cd "$work"
# start NAME FD [setsid]: `cudatrace run` of a program that waits until
# its stdin, a FIFO held open on descriptor FD, is closed.
start() {
    name=$1 fd=$2
    shift 2
    mkdir "$name" && mkfifo "$name.in"
    CUDATRACE_DIR=$work/$name "$@" "$cli" run --preload "$preload" -o "$name.trace" \
        -- "$program" pairs 1 wait <"$name.in" >"$name.out" 2>"$name.err" &
    eval "exec $fd>$name.in"
    i=0
    until grep -qx ready "$name.out" 2>/dev/null; do
        i=$((i + 1))
        [ "$i" -lt 1200 ] || { echo "$name never got ready"; exit 1; }
        sleep 0.05
    done
    echo "dir $name:" "$work/$name"/run-*
}
step() {
    echo "== $1"
    shift
    "$@" 2>&1
    echo "rc=$?"
}
if [ "$part" = other-terminal ]; then
    step "resume, from another terminal" "$cli" resume
    start d 5
    step "pause, from another terminal with a job of its own" "$cli" pause
    exec 5>&-
    wait
    exit
fi
start a 3 setsid
step "pause, with only another session's job" "$cli" pause
start b 4
step "pause, with one job of this terminal" "$cli" pause
script -qec "sh '$work/jobs.sh' '$cli' '$preload' '$program' '$work' other-terminal" /dev/null
start c 6
step "resume, with two jobs of this terminal" "$cli" resume
exec 3>&- 4>&- 6>&-
wait
"#;
    std::fs::write(work.join("jobs.sh"), SCRIPT).unwrap();
    let output = Command::new("unshare")
        .args(["-rm", "--pid", "--fork", "--mount-proc", "setsid", "sh"])
        .arg(work.join("jobs.sh"))
        .args([cli(), tracer_library(), fake_cuda::program("scenarios")])
        .arg(work)
        .arg("main")
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("TMPDIR", work)
        .env_remove("CUDATRACE_DIR")
        .env_remove("CUDATRACE_COLLECTOR")
        .env_remove("CUDATRACE_ROOT_PID")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}{}", stdout(&output), stderr(&output));
    stdout(&output).replace('\r', "")
}

#[test]
fn with_no_job_named_only_a_job_of_this_terminal_is_switched() {
    let work = scratch_dir("terminals");
    let said = switch_jobs_of_several_terminals(&work);
    // Each job's spool folder, as the script saw it, and its program's pid
    // (in the script's pid namespace), as its trace says.
    let dir = |name: &str| {
        let prefix = format!("dir {name}: ");
        let line = said.lines().find_map(|line| line.strip_prefix(&prefix));
        line.unwrap_or_else(|| panic!("no folder for job {name}: {said}"))
            .to_string()
    };
    let trace = |name: &str| report_json(&work.join(format!("{name}.trace"))).0;
    let pid = |name: &str| trace(name)["processes"][0]["pid"].as_u64().unwrap();
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|name| format!("{} (pid {}", dir(name), pid(name)));
    let paused = " is now paused: events are recorded without call stacks until `cudatrace resume`";
    let expected = format!(
        "dir a: {a_dir}
== pause, with only another session's job
cudatrace: no traced job was started from this terminal; name one by pid or spool folder: {a})
rc=2
dir b: {b_dir}
== pause, with one job of this terminal
cudatrace: the job in {b}, started from this terminal){paused}
rc=0
== resume, from another terminal
cudatrace: no traced job was started from this terminal; name one by pid or spool folder: {a}), {b})
rc=2
dir d: {d_dir}
== pause, from another terminal with a job of its own
cudatrace: the job in {d}, started from this terminal){paused}
rc=0
dir c: {c_dir}
== resume, with two jobs of this terminal
cudatrace: 2 traced jobs were started from this terminal; name one by pid or spool folder: {a}), {b}, this terminal), {c}, this terminal)
rc=2
",
        a_dir = dir("a"),
        b_dir = dir("b"),
        c_dir = dir("c"),
        d_dir = dir("d"),
    );
    assert_eq!(said, expected);
    // Only the jobs switched were: b and d stay paused to their end.
    for (name, spans) in [("a", 0), ("b", 1), ("c", 0), ("d", 1)] {
        let report = trace(name);
        assert_eq!(report["complete"], true, "{name}");
        let paused = report["recording_paused"].as_array().unwrap();
        assert_eq!(paused.len(), spans, "{name}: {paused:?}");
    }
}
