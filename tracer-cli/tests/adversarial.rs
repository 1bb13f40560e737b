//! What cudatrace promises when used against itself: each test is an attack
//! an adversarial user made (the faults issue), and the promise it checks.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `command`, killing it (and failing) if it takes over 20 seconds: the
/// attacks here used to block for ever.
fn output_within_20_seconds(command: &mut Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("{command:?} still ran after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A finished trace of a small scenario.
fn small_trace(label: &str) -> PathBuf {
    let (output, trace) = run_scenario(label, "runtime", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    trace
}

#[test]
fn a_pipe_or_a_fifo_as_input_is_refused_at_once_by_every_command() {
    let dir = scratch_dir("fifo-input");
    let fifo = dir.join("t.trace");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for command in ["report", "snapshot", "perfetto", "html", "dump"] {
        let output = output_within_20_seconds(cudatrace(&[command, fifo.to_str().unwrap()]).current_dir(&dir));
        assert_eq!(output.status.code(), Some(2), "{command}: {}", stderr(&output));
        assert_eq!(
            stderr(&output),
            format!(
                "cudatrace: {} is a pipe, not a regular file: cudatrace reads its input more than once (save it to a file first)\n",
                fifo.display()
            ),
            "{command}"
        );
    }
    // Process substitution hands a pipe over as /dev/fd/N.
    let trace = small_trace("pipe-input");
    let output = output_within_20_seconds(
        Command::new("bash")
            .arg("-c")
            .arg(format!("\"$0\" report <(cat '{}')", trace.display()))
            .arg(cli()),
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with("cudatrace: /dev/fd/")
            && stderr(&output).contains(" is a pipe, not a regular file: "),
        "{}",
        stderr(&output)
    );
    assert!(output.stdout.is_empty(), "nothing is reported before the refusal");
}

/// The command between backticks in a message line.
fn quoted_command(line: &str) -> &str {
    line.split('`').nth(1).unwrap_or_else(|| panic!("no command in {line}"))
}

#[test]
fn commands_printed_for_pasting_are_quoted_for_the_shell_and_keep_spools_says_where() {
    // A TMPDIR whose name would run a command if pasted unquoted.
    let base = scratch_dir("quoting");
    let tmpdir = base.join("a b;touch pwned;'x");
    std::fs::create_dir_all(&tmpdir).unwrap();
    let trace = base.join("run.trace");
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .arg("--keep-spools")
        .arg("--")
        .arg(fake_cuda::program("scenarios"))
        .arg("runtime")
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stderr(&output);
    let line = text
        .lines()
        .find(|line| line.starts_with("cudatrace: kept the spools in "))
        .unwrap_or_else(|| panic!("--keep-spools does not say where: {text}"));
    let command = quoted_command(line);
    assert!(command.starts_with("cudatrace dump --dir '"), "{command}");
    // Pasted into a shell, it dumps the kept spools and runs nothing else.
    let pasted = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(&base)
        .env("PATH", format!("{}:/usr/bin:/bin", cli().parent().unwrap().display()))
        .output()
        .unwrap();
    assert!(pasted.status.success(), "{}", stderr(&pasted));
    let dumped = String::from_utf8_lossy(&pasted.stdout);
    assert!(dumped.contains("\"spool_end\""), "{dumped}");
    assert!(
        !Path::new(&base).join("pwned").exists(),
        "the pasted command ran `touch`"
    );
    let folder = line
        .strip_prefix("cudatrace: kept the spools in ")
        .and_then(|rest| rest.split(" (--keep-spools)").next())
        .unwrap();
    assert!(Path::new(folder).starts_with(&tmpdir), "{folder}");
    assert!(Path::new(folder).is_dir());
}

#[test]
fn the_documented_spool_layout_is_the_real_one() {
    use cudatrace_events::layout::{CHUNK_BYTES, CHUNK_RECORDS, HEADER_SIZE, RECORD_SIZE};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let read = |name: &str| std::fs::read_to_string(root.join(name)).unwrap();
    let format = read("docs/trace-format.md");
    for row in [
        format!("| 8 | u32 | format version ({}) |", cudatrace_events::SPOOL_VERSION),
        format!("| 12 | u32 | record size ({RECORD_SIZE}) |"),
        format!("| 20 | u32 | records per chunk ({CHUNK_RECORDS}: a chunk is 1,179,648 bytes) |"),
        format!("## Records ({RECORD_SIZE} bytes each, from offset {HEADER_SIZE})"),
    ] {
        assert!(format.contains(&row), "docs/trace-format.md lacks {row:?}");
    }
    assert_eq!(CHUNK_BYTES, 1_179_648);
    let usage = read("docs/usage.md");
    assert!(usage.contains(&format!("Spools take {RECORD_SIZE} bytes per\nevent")));
    assert!(usage.contains("16,384 records of 72 bytes (1,179,648 bytes)"));
    let readme = read("README.md");
    assert!(readme.contains(&format!("Each record is a fixed {RECORD_SIZE}-byte struct")));
    for text in [&format, &usage, &readme] {
        assert!(
            !text.contains("64-byte") && !text.contains("64 bytes per"),
            "a stale record size"
        );
    }
}

#[test]
fn a_failed_write_to_a_device_leaves_the_device_where_it_was() {
    let dir = scratch_dir("device-output");
    let trace = small_trace("device-output-trace");
    // As root, a device node of our own (the full device, 1:7): the old
    // code removed what -o named when a write failed, device nodes included.
    let device = if effective_uid() == 0 {
        let node = dir.join("full");
        let made = Command::new("mknod").arg(&node).args(["c", "1", "7"]).status().unwrap();
        assert!(made.success());
        node
    } else {
        PathBuf::from("/dev/full")
    };
    for command in ["perfetto", "html"] {
        let output = cudatrace(&[command, trace.to_str().unwrap(), "-o", device.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{command}: {}", stderr(&output));
        assert_eq!(
            stderr(&output),
            format!(
                "cudatrace: cannot write {}: No space left on device (os error 28)\n",
                device.display()
            ),
            "{command}"
        );
        let kind = std::fs::metadata(&device).unwrap().file_type();
        assert!(
            std::os::unix::fs::FileTypeExt::is_char_device(&kind),
            "{command} removed {}",
            device.display()
        );
    }
}

#[test]
fn an_output_through_a_link_keeps_the_link_and_a_failed_one_keeps_the_old_file() {
    let dir = scratch_dir("link-output");
    let trace = small_trace("link-output-trace");
    let real = dir.join("real.json");
    let link = dir.join("link.json");
    std::fs::write(&real, b"old").unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let output = cudatrace(&[
        "perfetto",
        trace.to_str().unwrap(),
        "--format",
        "json",
        "-o",
        link.to_str().unwrap(),
        "--force",
    ])
    .output()
    .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    let written = std::fs::read_to_string(&real).unwrap();
    assert!(written.starts_with('{') && written.contains("traceEvents"), "{written}");
    // On a disk too small for the output, the file already there is kept
    // whole and nothing is left beside it.
    let disk = dir.join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mut script = Command::new("sh");
    script
        .arg("-c")
        .arg(
            r#"printf old > "$1/out.json" && "$2" perfetto "$3" --format json -o "$1/out.json" --force; echo "status $?"; cat "$1/out.json"; echo; ls -A "$1""#,
        )
        .arg("sh")
        .arg(&disk)
        .arg(cli())
        .arg(&trace);
    let output = on_small_disk(&disk, "8k", &script).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text, "status 2\nold\nout.json\n", "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with(&format!("cudatrace: cannot write {}/out.json: ", disk.display())),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_snapshot_of_many_processes_tries_every_pickle_and_names_those_written_and_not() {
    let dir = scratch_dir("snapshot-partial");
    let (output, trace) = run_scenario("snapshot-partial-trace", "tree", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let stem = dir.join("snap");
    let first = cudatrace(&["snapshot", trace.to_str().unwrap(), "-o", stem.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(first.status.success(), "{}", stderr(&first));
    let pickles: Vec<String> = String::from_utf8_lossy(&first.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(pickles.len() >= 3, "{pickles:?}");
    // A folder where the second pickle goes: that one cannot be written.
    let blocked = &pickles[1];
    std::fs::remove_file(blocked).unwrap();
    std::fs::create_dir(blocked).unwrap();
    for pickle in pickles.iter().filter(|p| *p != blocked) {
        std::fs::remove_file(pickle).unwrap();
    }
    let second = cudatrace(&["snapshot", trace.to_str().unwrap(), "-o", stem.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    let others: Vec<&str> = pickles.iter().filter(|p| *p != blocked).map(String::as_str).collect();
    assert_eq!(
        stderr(&second),
        format!(
            "cudatrace: cannot write {blocked}: it is a folder; written: {}; not written: {blocked}\n",
            others.join(", ")
        )
    );
    assert_eq!(
        String::from_utf8_lossy(&second.stdout).lines().collect::<Vec<_>>(),
        others
    );
    for pickle in others {
        assert!(std::fs::metadata(pickle).unwrap().len() > 0, "{pickle}");
    }
}

/// A folder of spools, as a shared spool folder (mode 1777) holds them:
/// the spools of a finished `run --keep-spools`, moved there.
fn shared_folder_of_spools(label: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir(label);
    let (mut command, _) = run_command(&format!("{label}-run"), "runtime", &["--keep-spools"]);
    let output = command.env("TMPDIR", &dir).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let spools = run_spools(&dir);
    assert!(!spools.is_empty());
    for spool in spools {
        std::fs::rename(&spool, shared.join(spool.file_name().unwrap())).unwrap();
    }
    shared
}

#[test]
fn collect_never_follows_a_trace_pointer_to_another_user_s_file_or_to_a_file_that_is_not_a_trace() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(
        effective_uid(),
        0,
        "this test plays two users: run it as root, as CI does"
    );
    let shared = shared_folder_of_spools("pointer");
    let victim = shared.parent().unwrap().join("precious.conf");
    std::fs::write(&victim, b"root's own data").unwrap();
    let pointer = shared.join("trace.path");
    // Another user points the folder at root's file.
    std::fs::write(&pointer, victim.as_os_str().as_encoded_bytes()).unwrap();
    std::os::unix::fs::chown(&pointer, Some(65534), Some(65534)).unwrap();
    let output = cudatrace(&["collect", shared.to_str().unwrap()]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with(&format!(
            "cudatrace: ignoring {}: not a file of this user's (uid 0)\n",
            pointer.display()
        )),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's own data");
    let beside = shared.with_extension("trace");
    assert!(std::fs::read(&beside).unwrap().starts_with(&cudatrace_trace::MAGIC));
    // Root's own pointer, to a file that is not a trace: not replaced either.
    let shared = shared_folder_of_spools("pointer-not-a-trace");
    let victim = shared.parent().unwrap().join("notes.txt");
    std::fs::write(&victim, b"not a trace").unwrap();
    std::fs::write(shared.join("trace.path"), victim.as_os_str().as_encoded_bytes()).unwrap();
    let output = cudatrace(&["collect", shared.to_str().unwrap()]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("which is not a cudatrace trace"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"not a trace");
    // A private trace of root's, named by root's pointer and merged with -o:
    // the output is private too.
    let shared = shared_folder_of_spools("pointer-private");
    let old = shared.parent().unwrap().join("old.trace");
    std::fs::copy(&beside, &old).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(shared.join("trace.path"), old.as_os_str().as_encoded_bytes()).unwrap();
    let merged = shared.parent().unwrap().join("merged.trace");
    let output = cudatrace(&["collect", shared.to_str().unwrap(), "-o", merged.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(std::fs::metadata(&merged).unwrap().mode() & 0o777, 0o600);
}

#[test]
fn a_program_that_closes_every_descriptor_and_reuses_the_spool_s_number_keeps_its_file_intact() {
    let dir = scratch_dir("close-fds");
    let data = dir.join("data.bin");
    let trace = dir.join("run.trace");
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(fake_cuda::program("scenarios"))
        .args(["close-fds", data.to_str().unwrap()])
        .env("TMPDIR", &dir)
        .env("CUDATRACE_SAMPLES", "0")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("data intact 1\n"), "{text}");
    assert!(text.contains("allocations 20100\nfrees 20100\n"), "{text}");
    // The spool was opened again by its path: nothing was lost either.
    let (report, _) = report_json(&trace);
    let p = &report["processes"][0];
    assert_eq!(p["events"], 40_200, "{p}");
    assert_eq!(p["lost_events"], 0);
    assert_eq!(report["complete"], true);
}

/// A -> B -> sh -c 'exit 7': A and B replaced themselves; only sh, which
/// used no CUDA and has no spool, exited with 7. Each traced image says
/// what it exec'd, and the last one how its process ended, which `run`
/// saw: "exec'd sh; the process exited 7". With the raw exec system call
/// (which no hook sees) A was given its successor's exit status; each new
/// image now marks the spool of the image it replaced as it loads, with
/// its own `/proc/self/exe`.
#[test]
fn in_an_exec_chain_only_the_last_image_exits_the_others_exec_d() {
    let scenarios = std::fs::canonicalize(fake_cuda::program("scenarios")).unwrap();
    let shell = std::fs::canonicalize("/bin/sh").unwrap();
    for (way, a_into, b_into) in [
        ("execl", "/proc/self/exe".to_owned(), "sh".to_owned()),
        (
            "raw",
            scenarios.to_str().unwrap().to_owned(),
            shell.to_str().unwrap().to_owned(),
        ),
    ] {
        for round in 0..3 {
            let (mut command, trace) = run_command(&format!("exec-chain-{way}-{round}"), "exec-chain", &[]);
            if way == "raw" {
                command.arg("raw");
            }
            let output = command.output().unwrap();
            assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
            let (report, _) = report_json(&trace);
            let processes = report["processes"].as_array().unwrap();
            assert_eq!(processes.len(), 2, "{report}");
            let ends: Vec<_> = processes
                .iter()
                .map(|p| (&p["exit_status"], &p["exec_into"], &p["process_exit_status"]))
                .collect();
            let null = serde_json::Value::Null;
            let (a_into, b_into, seven) = (
                serde_json::json!(a_into),
                serde_json::json!(b_into),
                serde_json::json!(7),
            );
            assert_eq!(
                ends,
                [(&null, &a_into, &null), (&null, &b_into, &seven)],
                "{way} round {round}: {report}"
            );
            assert_eq!(report["complete"], true);
            let text = stdout(&cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap());
            let pid = processes[0]["pid"].as_u64().unwrap();
            let headings: Vec<&str> = text
                .lines()
                .filter(|line| line.starts_with(&format!("pid {pid} ")))
                .collect();
            assert_eq!(headings.len(), 2, "{text}");
            assert!(
                headings[0].ends_with(&format!(" — exec'd {}", a_into.as_str().unwrap())),
                "{text}"
            );
            assert!(
                headings[1].ends_with(&format!(" — exec'd {}; the process exited 7", b_into.as_str().unwrap())),
                "{text}"
            );
        }
    }
}

#[test]
fn a_relative_spool_folder_survives_a_change_of_directory_and_spools_never_go_to_the_working_directory() {
    let dir = scratch_dir("relative-dir");
    std::fs::create_dir(dir.join("spools")).unwrap();
    std::fs::create_dir(dir.join("elsewhere")).unwrap();
    let trace = dir.join("run.trace");
    // Under run, and in a plain LD_PRELOAD tree, with CUDATRACE_DIR=spools.
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(fake_cuda::program("scenarios"))
        .args(["chdir-first", dir.join("elsewhere").to_str().unwrap()])
        .current_dir(&dir)
        .env("CUDATRACE_DIR", "spools")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let (report, _) = report_json(&trace);
    assert_eq!(report["processes"][0]["events"], 2, "{report}");
    let plain = Command::new(fake_cuda::program("scenarios"))
        .args(["chdir-first", dir.join("elsewhere").to_str().unwrap()])
        .current_dir(&dir)
        .env("LD_PRELOAD", tracer_library())
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("CUDATRACE_DIR", "spools")
        .output()
        .unwrap();
    assert!(plain.status.success(), "{}", stderr(&plain));
    let spools: Vec<_> = std::fs::read_dir(dir.join("spools"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".spool"))
        .collect();
    assert_eq!(spools.len(), 1, "{spools:?}");
    // A descendant that lost CUDATRACE_DIR writes no spool where it runs.
    let output = cudatrace_run()
        .arg("-o")
        .arg(dir.join("unset.trace"))
        .args(["--", "env", "-u", "CUDATRACE_DIR"])
        .arg(fake_cuda::program("scenarios"))
        .arg("runtime")
        .current_dir(dir.join("elsewhere"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let stray: Vec<_> = std::fs::read_dir(dir.join("elsewhere"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(stray.is_empty(), "spools in the working directory: {stray:?}");
}

#[test]
fn a_trace_with_a_20_gib_hole_in_the_middle_names_its_damage_in_every_output() {
    use std::io::{Seek, SeekFrom, Write};
    let trace = small_trace("hole");
    let bytes = std::fs::read(&trace).unwrap();
    let holed = trace.with_file_name("holed.trace");
    let mut file = std::fs::File::create(&holed).unwrap();
    let half = bytes.len() / 2;
    file.write_all(&bytes[..half]).unwrap();
    file.seek(SeekFrom::Current(20 << 30)).unwrap();
    file.write_all(&bytes[half..]).unwrap();
    drop(file);
    // Where the collector's blocks fall decides whether any memory event
    // comes before the hole: either way, the damage is named.
    let output = output_within_20_seconds(&mut cudatrace(&["snapshot", holed.to_str().unwrap()]));
    let message = stderr(&output);
    match output.status.code() {
        Some(2) => assert!(
            message.starts_with(&format!(
                "cudatrace: {} has no memory events to snapshot before its damage: it is damaged at byte ",
                holed.display()
            )) && message.lines().count() == 1,
            "{message}"
        ),
        Some(1) => assert!(
            message.contains(&format!("cudatrace: {} is damaged at byte ", holed.display())),
            "{message}"
        ),
        other => panic!("snapshot exited {other:?}: {message}"),
    }
    for command in ["report", "perfetto", "html"] {
        let output = output_within_20_seconds(&mut cudatrace(&[command, holed.to_str().unwrap()]));
        assert_eq!(output.status.code(), Some(1), "{command}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(&format!("cudatrace: {} is damaged at byte ", holed.display())),
            "{command}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn a_later_collector_never_truncates_a_finished_trace() {
    let dir = scratch_dir("late-collector");
    let trace = dir.join("tree.trace");
    let plain_tree = || {
        let output = plain_preload_scenario("runtime", &trace, &dir);
        assert!(output.status.success(), "{}", stderr(&output));
    };
    plain_tree();
    let first = finished_trace(&trace);
    let bytes = std::fs::read(&trace).unwrap();
    // A collector started later for the same trace (as a late process of the
    // tree starts one) writes beside it.
    plain_tree();
    let beside = dir.join("tree-2.trace");
    let second = finished_trace(&beside);
    assert_eq!(std::fs::read(&trace).unwrap(), bytes, "the finished trace was changed");
    assert_eq!(first["processes"][0]["events"], second["processes"][0]["events"]);
}

#[test]
fn run_waits_for_a_daemon_that_records_after_the_command_exits() {
    let (output, trace) = run_scenario("late-daemon", "late-daemon", &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let daemon: u32 = field(&stdout(&output), "daemon", 0).parse().unwrap();
    let (report, _) = report_json(&trace);
    assert_eq!(report["complete"], true);
    assert_eq!(report["lost_events"], 0);
    let p = process(&report, daemon);
    assert_eq!(p["events"], 2, "{p}");
    // Its status, from its own exit().
    assert_eq!(p["exit_status"], 4, "{p}");
}

#[test]
fn under_ulimit_f_the_spool_reuses_the_space_given_back_and_stays_within_the_limit() {
    use cudatrace_events::layout::{CHUNK_BYTES, CHUNK_RECORDS, HEADER_SIZE};
    // 8 MiB: room for 6 chunks, so a ring of 4 places; 200,000 pairs need 25.
    let limit = 8 << 20;
    let (mut command, trace) = run_command("ulimit-f", "space-back", &[]);
    command.arg("200000").env("CUDATRACE_SAMPLES", "0");
    let output = wrapped(&["prlimit", &format!("--fsize={limit}"), "--"], &command)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let value = |key: &str| -> u64 { field(&text, key.trim_end(), 0).parse().unwrap() };
    assert_eq!(value("ring "), 4);
    assert!(
        value("spool bytes ") <= (HEADER_SIZE + 4 * CHUNK_BYTES) as u64,
        "{text}"
    );
    let (report, _) = report_json(&trace);
    assert_eq!(report["complete"], true);
    let p = &report["processes"][0];
    let (events, lost) = (p["events"].as_u64().unwrap(), p["lost_events"].as_u64().unwrap());
    assert_eq!(events + lost, value("allocations ") + value("frees "));
    // Recording went round the ring six times; at most the rest of a batch
    // of 500 pairs is dropped each time the collector was behind.
    assert!(events > 6 * 4 * CHUNK_RECORDS as u64, "{events}");
    assert!(
        lost <= value("waits ") * 1_000,
        "{lost} lost in {} waits",
        value("waits ")
    );
}

/// The processes the report names as having could not record: (pid, errno, reason).
fn unrecorded(report: &serde_json::Value) -> Vec<(u64, i64, String)> {
    report["unrecorded_processes"]
        .as_array()
        .unwrap_or_else(|| panic!("no unrecorded_processes in {report}"))
        .iter()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap(),
                p["errno"].as_i64().unwrap(),
                p["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_process_without_a_free_descriptor_says_it_could_not_record_and_run_never_says_nothing_to_record() {
    let (output, trace) = run_scenario("no-free-fd", "no-free-fd", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let pid: u64 = field(&stdout(&output), "pid", 0).parse().unwrap();
    let (report, _) = report_json(&trace);
    let spool_dir = unrecorded(&report)
        .first()
        .map(|(_, _, reason)| reason.trim_start_matches("cannot create its spool in ").to_string())
        .unwrap_or_default();
    assert_eq!(
        unrecorded(&report),
        vec![(
            pid,
            i64::from(libc::EMFILE),
            format!("cannot create its spool in {spool_dir}")
        )]
    );
    assert_eq!(report["processes"].as_array().unwrap().len(), 0);
    let said = stderr(&output);
    assert!(!said.contains("nothing to record"), "{said}");
    let line = said
        .lines()
        .find(|l| l.contains("could not record"))
        .unwrap_or_default();
    assert!(
        line.starts_with(&format!(
            "cudatrace: 1 process could not record (pid {pid} (scenarios, parent "
        )),
        "{said}"
    );
    assert!(
        line.ends_with(&format!(
            "uid 0): cannot create its spool in {spool_dir} (EMFILE: Too many open files))"
        )),
        "{said}"
    );
    // The text report says it too.
    let text = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    assert!(
        stdout(&text).contains("\n1 process could not record; the trace has none of their events:\n  pid "),
        "{}",
        stdout(&text)
    );
}

fn assert_root() {
    assert_eq!(effective_uid(), 0, "this test changes user: run it as root, as CI does");
}

#[test]
fn a_process_that_setuid_before_its_first_cuda_call_says_it_could_not_record() {
    assert_root();
    let (output, trace) = run_scenario("setuid-first", "setuid-first", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let pid: u64 = field(&stdout(&output), "pid", 0).parse().unwrap();
    let (report, _) = report_json(&trace);
    let found = unrecorded(&report);
    assert_eq!(found.len(), 1, "{report}");
    assert_eq!((found[0].0, found[0].1), (pid, i64::from(libc::EACCES)));
    assert!(found[0].2.starts_with("cannot create its spool in /"), "{found:?}");
    assert_eq!(report["unrecorded_processes"][0]["uid"], 65534);
    let said = stderr(&output);
    assert!(!said.contains("nothing to record"), "{said}");
    assert!(
        said.contains(&format!("could not record (pid {pid} (scenarios, parent ")),
        "{said}"
    );
    assert!(said.contains("uid 65534): cannot create its spool in /"), "{said}");
    assert!(said.contains("(EACCES: Permission denied))"), "{said}");
}

#[test]
fn a_child_forked_after_setuid_is_in_the_trace_as_a_process_that_could_not_record() {
    assert_root();
    let (output, trace) = run_scenario("setuid-fork", "setuid-then-fork", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let child: u64 = field(&stdout(&output), "child", 0).parse().unwrap();
    let (report, _) = report_json(&trace);
    // The parent recorded both its events; the child's 14 are not lost unseen.
    assert_eq!(report["processes"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["processes"][0]["events"], 2, "{report}");
    let found = unrecorded(&report);
    assert_eq!(found.len(), 1, "{report}");
    assert_eq!((found[0].0, found[0].1), (child, i64::from(libc::EACCES)));
    assert_eq!(
        report["unrecorded_processes"][0]["ppid"], report["processes"][0]["pid"],
        "{report}"
    );
    let said = stderr(&output);
    assert!(
        said.contains(&format!("could not record (pid {child} (scenarios, parent ")),
        "{said}"
    );
}

#[test]
fn a_descendant_that_lost_cudatrace_dir_is_named_as_one_that_could_not_record() {
    let dir = scratch_dir("lost-dir");
    let trace = dir.join("run.trace");
    let output = cudatrace_run()
        .arg("-o")
        .arg(&trace)
        .args(["--", "env", "-u", "CUDATRACE_DIR"])
        .arg(fake_cuda::program("scenarios"))
        .arg("runtime")
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let (report, _) = report_json(&trace);
    let found = unrecorded(&report);
    assert_eq!(found.len(), 1, "{report}");
    assert_eq!(
        (found[0].1, found[0].2.as_str()),
        (0, "its environment lost CUDATRACE_DIR, which names the spool folder")
    );
    let said = stderr(&output);
    assert!(!said.contains("nothing to record"), "{said}");
    assert!(
        said.contains("uid 0): its environment lost CUDATRACE_DIR, which names the spool folder)"),
        "{said}"
    );
}

#[test]
fn a_program_that_took_the_notice_descriptor_s_number_never_gets_a_notice_in_its_file() {
    assert_root();
    let dir = scratch_dir("notice-fd-reuse");
    let own = dir.join("own.txt");
    let (mut command, _) = run_command("notice-fd-reuse-run", "reuse-notice-fd", &[]);
    let output = command.arg(&own).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("own fd "), "{}", stdout(&output));
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "program data\n");
}

#[test]
fn without_run_a_child_forked_after_setuid_says_in_its_parent_s_spool_that_it_could_not_record() {
    assert_root();
    // Plain LD_PRELOAD: no run, so no notice file; the child, locked out of
    // the spool folder, still has its parent's spool header mapped.
    let dir = scratch_dir("plain-setuid-fork");
    let trace = dir.join("tree.trace");
    let output = plain_preload_scenario("setuid-then-fork", &trace, &dir);
    assert!(output.status.success(), "{}", stderr(&output));
    let child: u64 = field(&stdout(&output), "child", 0).parse().unwrap();
    let report = finished_trace(&trace);
    assert_eq!(report["processes"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["processes"][0]["events"], 2, "{report}");
    // The tree's spool folder is root's, in a folder only root may use.
    let spool_dir = report["unrecorded_processes"][0]["reason"]
        .as_str()
        .unwrap_or_default()
        .trim_start_matches("cannot create the spool folder ")
        .to_string();
    assert!(
        spool_dir.starts_with(dir.join("cudatrace-0").to_str().unwrap()),
        "{report}"
    );
    assert_eq!(
        unrecorded(&report),
        vec![(
            child,
            i64::from(libc::EACCES),
            format!("cannot create the spool folder {spool_dir}")
        )]
    );
    let process = &report["unrecorded_processes"][0];
    assert_eq!(process["ppid"], report["processes"][0]["pid"], "{report}");
    assert_eq!(
        (process["uid"].as_u64(), process["name"].as_str()),
        (Some(65534), Some("scenarios"))
    );
    // It was forked by a recorded process, and said why it has no spool:
    // not a silent child.
    assert_eq!(report["forked_without_spool"], serde_json::json!([]), "{report}");
    let text = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    assert!(
        stdout(&text).contains(&format!(
            "\n1 process could not record; the trace has none of their events:\n  pid {child} (scenarios, parent "
        )),
        "{}",
        stdout(&text)
    );
}

/// The pids a scenario printed as `idle child PID`.
fn idle_children(output: &Output) -> Vec<u64> {
    stdout(output)
        .lines()
        .filter_map(|line| line.strip_prefix("idle child ")?.parse().ok())
        .collect()
}

fn assert_silent_children(report: &serde_json::Value, children: &[u64]) {
    assert_eq!(children.len(), 3);
    let parent = report["processes"][0]["pid"].as_u64().unwrap();
    let listed: Vec<(u64, u64)> = report["forked_without_spool"]
        .as_array()
        .unwrap_or_else(|| panic!("no forked_without_spool in {report}"))
        .iter()
        .map(|c| (c["pid"].as_u64().unwrap(), c["ppid"].as_u64().unwrap()))
        .collect();
    assert_eq!(listed, children.iter().map(|&c| (c, parent)).collect::<Vec<_>>());
    // Children that made no CUDA call do not make the trace incomplete.
    assert_eq!(report["unrecorded_processes"], serde_json::json!([]));
    assert_eq!(report["complete"], true);
    assert_eq!(report["lost_events"], 0);
}

#[test]
fn forked_children_that_leave_no_spool_are_named_and_the_trace_stays_complete() {
    let (output, trace) = run_scenario("idle-children", "idle-children", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let children = idle_children(&output);
    let (report, _) = report_json(&trace);
    assert_silent_children(&report, &children);
    let parent = report["processes"][0]["pid"].as_u64().unwrap();
    let text = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
    let expected = format!(
        "\n3 forked children left no spool (pid {}, {}, {} forked by pid {parent}): they made no CUDA call, or \
         exec'd an image that could not record and had no way to say so\n",
        children[0], children[1], children[2]
    );
    assert!(stdout(&text).contains(&expected), "{}", stdout(&text));
    // On the page, the children are a note at the bottom, after every
    // device's section, not above the answer.
    let page = html_page(&trace);
    let said = format!(
        "<li>3 forked children left no spool (pid {}, {}, {} forked by pid {parent}): they made no CUDA call, or \
         exec&#39;d an image that could not record and had no way to say so.</li>",
        children[0], children[1], children[2]
    );
    let notes = page.find("<h2>Notes</h2>").expect("notes");
    assert!(page[notes..].contains(&said), "{}", &page[notes..]);
    assert_eq!(
        page.find("forked children"),
        Some(notes + page[notes..].find("forked children").unwrap())
    );
    assert!(
        page.rfind("<h2>pid ").unwrap() < notes,
        "a note above a device's section"
    );
    // The same without run.
    let dir = scratch_dir("plain-idle-children");
    let plain = dir.join("tree.trace");
    let output = plain_preload_scenario("idle-children", &plain, &dir);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_silent_children(&finished_trace(&plain), &idle_children(&output));
}

/// A forked child's first recorded calls, an unmap and a free of its
/// parent's memory, reserve their sequence numbers before the real call and
/// so make the child's spool there: the program's errno must come back as
/// it was, under plain `LD_PRELOAD` and under `run`.
#[test]
fn a_forked_child_s_first_recorded_calls_keep_its_errno() {
    let dir = scratch_dir("errno-fork-plain");
    let trace = dir.join("tree.trace");
    let plain = plain_preload_scenario("errno-in-forked-child", &trace, &dir);
    assert!(plain.status.success(), "{}{}", stdout(&plain), stderr(&plain));
    assert_eq!(
        lines_after_pid(&stdout(&plain)),
        "child errno 78 after the unmap (result 0), 77 after the free (result 0)\n"
    );
    let report = finished_trace(&trace);
    assert_eq!(report["processes"].as_array().unwrap().len(), 2, "{report}");
    let (output, _) = run_scenario("errno-fork-run", "errno-in-forked-child", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        lines_after_pid(&stdout(&output)),
        "child errno 78 after the unmap (result 0), 77 after the free (result 0)\n"
    );
}

/// A scenario's output without the line that names its pid.
fn lines_after_pid(out: &str) -> String {
    out.lines()
        .filter(|line| !line.starts_with("pid "))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// The size of the thread-local storage of the ELF shared object at `path`
/// (its `PT_TLS` segment's size in memory), 0 if it has none.
fn thread_local_storage_bytes(path: &Path) -> u64 {
    let elf = std::fs::read(path).unwrap();
    let word = |at: usize, len: usize| {
        let mut bytes = [0u8; 8];
        bytes[..len].copy_from_slice(&elf[at..at + len]);
        u64::from_le_bytes(bytes)
    };
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    let (table, entry, count) = (word(0x20, 8) as usize, word(0x36, 2) as usize, word(0x38, 2) as usize);
    (0..count)
        .map(|n| table + n * entry)
        .find(|&header| word(header, 4) == 7)
        .map_or(0, |header| word(header + 0x28, 8))
}

/// The bytes of its 20 KiB stack that `scenarios small-stack`'s thread
/// used, from its `stack used N of 20480` line.
fn thread_stack_used(stdout: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|line| line.starts_with("stack used "))
        .unwrap_or_else(|| panic!("no stack line in {stdout}"));
    line.split(' ').nth(2).unwrap().parse().unwrap()
}

/// A preloaded library's thread-local storage is carved out of every
/// thread's stack, before the thread runs a line: ours must stay small. It
/// held a 5 KiB cache of the thread's last stack, and a thread with a
/// 20 KiB stack crashed traced.
///
/// A thread on a 20 KiB stack that allocates and frees then ends well at
/// every `--stacks`, whether its calls are the process's first or only the
/// thread's, and uses at most 4 KiB more of its stack traced than untraced.
/// Native walks crashed it: the unwinder's first reading of a frame's
/// rules takes several KiB, and now runs on a spare stack of the library's
/// when the thread's has little room left.
#[test]
fn thread_local_storage_stays_small_and_a_thread_with_a_20_kib_stack_records() {
    let tls = thread_local_storage_bytes(&tracer_library());
    assert!(tls <= 1024, "{tls} bytes of thread-local storage");
    for (mode, events) in [("warm", 4), ("first", 2)] {
        let untraced = Command::new(fake_cuda::program("scenarios"))
            .args(["small-stack", "20", mode])
            .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
            .output()
            .unwrap();
        assert!(untraced.status.success(), "{}", stderr(&untraced));
        let untraced_used = thread_stack_used(&stdout(&untraced));
        for stacks in ["none", "python", "native", "all"] {
            let (mut command, trace) = run_command(
                &format!("small-stack-{mode}-{stacks}"),
                "small-stack",
                &["--stacks", stacks],
            );
            let output = command.args(["20", mode]).output().unwrap();
            assert!(output.status.success(), "{mode} {stacks}: {}", stderr(&output));
            let used = thread_stack_used(&stdout(&output));
            assert!(
                used <= untraced_used + 4096,
                "{mode} {stacks}: {used} bytes of the thread's stack used traced, {untraced_used} untraced"
            );
            let report = finished_trace(&trace);
            assert_eq!(report["processes"][0]["events"], events, "{mode} {stacks}: {report}");
            assert_eq!(report["processes"][0]["lost_events"], 0, "{mode} {stacks}");
            if stacks == "native" || stacks == "all" {
                // The walk was made (on the spare stack), from the thread's frames.
                let (report, _) = report_json_with_stacks(&trace);
                let sites = &report["processes"][0]["devices"][0]["peak_by_call_site"];
                let frames: Vec<&str> = sites[0]["stack"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|frame| frame["function"].as_str().unwrap())
                    .collect();
                assert_eq!(
                    frames[..2],
                    ["small_stack_body", "start_thread"],
                    "{mode} {stacks}: {sites}"
                );
            }
        }
    }
}

/// Under plain `LD_PRELOAD` the first CUDA call creates the spool and
/// starts the collector helper. A signal can arrive inside that call (the
/// helper's SIGCHLD did, before the helper became unseen; the test raises
/// one there), and a handler that calls CUDA then runs its hooks on the
/// thread that is creating the spool. They must not wait for it (the
/// process hung for good); their events are counted as lost, never
/// silently dropped.
#[test]
fn a_signal_handler_calling_cuda_inside_the_first_call_does_not_hang() {
    let dir = scratch_dir("sigchld-first-call");
    let trace = dir.join("tree.trace");
    let output = Command::new("timeout")
        .arg("30")
        .arg(fake_cuda::program("scenarios"))
        .arg("sigchld-first-call")
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .env("LD_PRELOAD", tracer_library())
        .env_remove("CUDATRACE_DIR")
        .env("CUDATRACE_OUT", &trace)
        .env("CUDATRACE_CLI", cli())
        .env("CUDATRACE_TEST_SIGNAL_WHILE_OPENING", libc::SIGCHLD.to_string())
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "hung or failed: {}", stderr(&output));
    assert_eq!(lines_after_pid(&stdout(&output)), "alloc 0 handled 1\n");
    let report = finished_trace(&trace);
    let process = &report["processes"][0];
    let (events, lost) = (
        process["events"].as_u64().unwrap(),
        process["lost_events"].as_u64().unwrap(),
    );
    // The signal came while the spool was being made: every record of the
    // handler's (its allocation and free, and the readings of the device's
    // first use: 11 in all) is counted as lost; the program's allocation
    // is in the trace.
    assert_eq!((events, lost), (1, 11), "{report}");
}

/// 100 MiB of random bytes after a trace's magic number: every command
/// reads it without a panic, says in one line where it is damaged, and
/// exits 1 (an output of nothing) or 2 (nothing to output).
#[test]
fn a_hundred_mib_of_random_bytes_is_a_damaged_trace_to_every_command() {
    let dir = scratch_dir("random-trace");
    let trace = dir.join("random.trace");
    let mut bytes = b"CUTRACE\0".to_vec();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    while bytes.len() < (100 << 20) + 8 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    std::fs::write(&trace, &bytes).unwrap();
    // The first frame: a tag byte, then the length it declares.
    let declared = u32::from_le_bytes([bytes[9], bytes[10], bytes[11], bytes[12]]);
    assert!(
        declared > 64 << 20,
        "this seed's first frame is too long to be a record"
    );
    let damage = format!(
        "{} is damaged at byte 8: frame declares {declared} bytes, more than any record",
        trace.display()
    );
    let path = trace.to_str().unwrap();
    let report = cudatrace(&["report", path]).output().unwrap();
    assert_eq!(report.status.code(), Some(1));
    assert_eq!(
        stderr(&report),
        format!("cudatrace: {damage}; the output covers the 0 records before it\n")
    );
    for (command, code) in [("html", 1), ("perfetto", 1), ("snapshot", 2), ("flamegraph", 2)] {
        let output = cudatrace(&[command, path, "-o", dir.join(command).to_str().unwrap(), "--force"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(code), "{command}: {}", stderr(&output));
        assert!(!stderr(&output).contains("panicked"), "{command}: {}", stderr(&output));
    }
    let snapshot = cudatrace(&["snapshot", path, "-o", dir.join("s").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        stderr(&snapshot),
        format!(
            "cudatrace: {} has no memory events to snapshot before its damage: it is damaged at byte 8: frame declares {declared} bytes, more than any record\n",
            trace.display()
        )
    );
    // Not kept with the other tests' traces: it is large.
    std::fs::remove_file(&trace).unwrap();
}

/// (op, api, size) of a trace's allocations and frees, in order.
fn memory_events(trace: &Path) -> Vec<(String, String, u64)> {
    let output = cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|record| record["op"] == "alloc" || record["op"] == "free")
        .map(|record| {
            (
                record["op"].as_str().unwrap().to_owned(),
                record["api"].as_str().unwrap().to_owned(),
                record["size"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Runs `driver_reload MODE` into `trace`: under `cudatrace run`, or with
/// plain `LD_PRELOAD` (the library's own helper writes the trace). Checks
/// that it ran to its end, with the driver unloaded and back elsewhere.
fn run_driver_reload(mode: &str, plain: bool, dir: &Path) -> PathBuf {
    run_driver_reload_with(mode, plain, &[], dir)
}

/// [`run_driver_reload`], with `options` for `cudatrace run`.
fn run_driver_reload_with(mode: &str, plain: bool, options: &[&str], dir: &Path) -> PathBuf {
    let trace = dir.join(format!(
        "{}{}.trace",
        if plain { "plain" } else { "run" },
        options.concat()
    ));
    let output = if plain {
        Command::new(fake_cuda::program("driver_reload"))
            .arg(mode)
            .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
            .env("LD_PRELOAD", tracer_library())
            .env("CUDATRACE_OUT", &trace)
            .env("CUDATRACE_CLI", cli())
            .env("TMPDIR", dir)
            .env_remove("CUDATRACE_DIR")
            .output()
            .unwrap()
    } else {
        let mut command = cudatrace_run();
        command
            .args(options)
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(fake_cuda::program("driver_reload"))
            .arg(mode)
            .env("TMPDIR", dir);
        command.output().unwrap()
    };
    assert_eq!(
        output.status.code(),
        Some(0),
        "{mode} plain {plain}: {}",
        stderr(&output)
    );
    assert_eq!(stdout(&output), "unloaded 1\nmoved 1\ndone\n", "{mode} plain {plain}");
    trace
}

/// Launchers and health checks load the driver, probe the GPU and unload
/// it; the program may load it again, elsewhere. The library remembered
/// the old driver's handle and functions: it handed out the new driver's
/// functions unhooked (a trace of 0 events, "complete"), or crashed
/// calling into the unloaded one. Now every allocation through the driver
/// loaded again is recorded, whether the first load only looked entry
/// points up, called `cuInit`, or allocated; and the library's own lookups
/// no longer keep the driver loaded after the program unloads it.
#[test]
fn a_driver_unloaded_and_loaded_again_elsewhere_is_recorded_after_it_comes_back() {
    let first = ("alloc", "cuMemAlloc_v2", 1 << 20);
    let first_free = ("free", "cuMemFree_v2", 1 << 20);
    let after = [
        ("alloc", "cuMemAlloc_v2", 2 << 20),
        ("alloc", "cuMemAlloc_v2", 3 << 20),
        ("free", "cuMemFree_v2", 2 << 20),
    ];
    for mode in ["lookup", "init", "alloc"] {
        let mut expected: Vec<(String, String, u64)> = Vec::new();
        if mode == "alloc" {
            expected.extend([first, first_free].map(|(op, api, size)| (op.into(), api.into(), size)));
        }
        expected.extend(after.map(|(op, api, size)| (op.to_owned(), api.to_owned(), size)));
        let dir = scratch_dir(&format!("driver-reload-{mode}"));
        for plain in [false, true] {
            let trace = run_driver_reload(mode, plain, &dir);
            let report = finished_trace(&trace);
            assert_eq!(report["complete"], true, "{mode} plain {plain}");
            let p = &report["processes"][0];
            assert_eq!(
                (
                    &p["events"],
                    &p["lost_events"],
                    &p["exit_status"],
                    &p["reused_without_free"],
                    &p["freed_with_driver"]
                ),
                (
                    &serde_json::json!(expected.len()),
                    &serde_json::json!(0),
                    &serde_json::json!(0),
                    &serde_json::json!(0),
                    &serde_json::json!({"allocations": 0, "bytes": 0})
                ),
                "{mode} plain {plain}"
            );
            assert_eq!(p["devices"][0]["live_bytes_at_exit"], 3 << 20, "{mode} plain {plain}");
            assert_eq!(memory_events(&trace), expected, "{mode} plain {plain}");
        }
    }
}

/// Issue 48, item 29: a driver unloaded after `cuInit` with an allocation
/// still live, then loaded again elsewhere. The fake driver's memory goes
/// with it, and the driver loaded again hands out the same address for its
/// first allocation: the library still held the old allocation there, took
/// the new one for a record of it and dropped it. The trace had 2 of 3
/// allocations, said complete with 0 lost, and counted the old 1 MiB live
/// to the end. Now what was live goes with the driver, recorded as freed
/// (api `unknown`, `arg1` 1) where the program unloaded it, and the report
/// says so.
#[test]
fn allocations_live_when_the_driver_unloads_go_with_it_and_the_next_ones_are_recorded() {
    let dir = scratch_dir("driver-reload-held");
    for plain in [false, true] {
        let trace = run_driver_reload("held", plain, &dir);
        let report = finished_trace(&trace);
        assert_eq!(report["complete"], true, "plain {plain}");
        let p = &report["processes"][0];
        assert_eq!(
            (
                &p["events"],
                &p["lost_events"],
                &p["exit_status"],
                &p["reused_without_free"],
                &p["freed_with_driver"]
            ),
            (
                &serde_json::json!(5),
                &serde_json::json!(0),
                &serde_json::json!(0),
                &serde_json::json!(0),
                &serde_json::json!({"allocations": 1, "bytes": 1 << 20})
            ),
            "plain {plain}"
        );
        let device = &p["devices"][0];
        assert_eq!(
            (&device["allocations"], &device["frees"], &device["live_bytes_at_exit"]),
            (
                &serde_json::json!(3),
                &serde_json::json!(2),
                &serde_json::json!(3 << 20)
            ),
            "plain {plain}"
        );
        let expected: Vec<(String, String, u64)> = [
            ("alloc", "cuMemAlloc_v2", 1 << 20),
            ("free", "unknown", 1 << 20),
            ("alloc", "cuMemAlloc_v2", 2 << 20),
            ("alloc", "cuMemAlloc_v2", 3 << 20),
            ("free", "cuMemFree_v2", 2 << 20),
        ]
        .map(|(op, api, size)| (op.to_owned(), api.to_owned(), size))
        .to_vec();
        assert_eq!(memory_events(&trace), expected, "plain {plain}");
        // The case itself: the driver loaded again gave the 2 MiB the old
        // 1 MiB's address, and the free the unload recorded is marked.
        let output = cudatrace(&["dump", trace.to_str().unwrap()]).output().unwrap();
        let records: Vec<serde_json::Value> = stdout(&output)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .filter(|record: &serde_json::Value| record["op"] == "alloc" || record["op"] == "free")
            .collect();
        assert_eq!(records[0]["address"], records[2]["address"], "plain {plain}");
        assert_eq!(
            (&records[1]["address"], &records[1]["arg1"], &records[1]["device"]),
            (&records[0]["address"], &serde_json::json!(1), &serde_json::json!(0)),
            "plain {plain}"
        );
        let text = cudatrace(&["report", trace.to_str().unwrap()]).output().unwrap();
        assert!(
            stdout(&text).contains(
                "\n  freed with the driver: 1 allocation (1.0 MiB) was live when the program unloaded the driver (`dlclose`)\n"
            ),
            "plain {plain}: {}",
            stdout(&text)
        );
    }
    // The memory limit gets the bytes that went with the driver back: 1 MiB
    // before the unload, 2 and 3 MiB after fit a 5 MiB limit.
    let trace = run_driver_reload_with("held", false, &["--limit", "5MiB"], &dir);
    let report = finished_trace(&trace);
    let device = &report["processes"][0]["devices"][0];
    assert_eq!(
        (&device["allocations"], &device["live_bytes_at_exit"], &device["ooms"]),
        (
            &serde_json::json!(3),
            &serde_json::json!(3 << 20),
            &serde_json::json!([])
        )
    );
}

/// A child made by `_Fork()`, `clone()` or the raw clone system call runs
/// none of the fork handlers, and wrote into its parent's spool: the trace
/// showed one process with the sum of both's allocations and a free that
/// never happened ("reused without free"), and said complete. Each child is
/// now a process of its own, noticed at its first event.
#[test]
fn a_child_made_by_fork_without_handlers_or_by_clone_is_a_process_of_its_own() {
    for how in ["_Fork", "clone", "syscall"] {
        let (mut command, trace) = run_command(&format!("raw-child-{how}"), "raw-child", &[]);
        let output = command.arg(how).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{how}: {}", stderr(&output));
        let out = stdout(&output);
        let line = out
            .lines()
            .find(|line| line.starts_with("child "))
            .unwrap_or_else(|| panic!("{how}: {out}"));
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words[2..], ["exit", "5"], "{how}: {line}");
        let child: u64 = words[1].parse().unwrap();
        let report = finished_trace(&trace);
        let processes = report["processes"].as_array().unwrap();
        assert_eq!(processes.len(), 2, "{how}: {report}");
        let parent = processes.iter().find(|p| p["pid"] != child).unwrap();
        let forked = processes.iter().find(|p| p["pid"] == child).unwrap();
        assert_eq!(forked["ppid"], parent["pid"], "{how}");
        for (p, events, live, exit) in [
            (parent, 3, 3u64 << 20, serde_json::json!(0)),
            (forked, 1, 2 << 20, serde_json::Value::Null),
        ] {
            assert_eq!(
                (
                    &p["events"],
                    &p["lost_events"],
                    &p["reused_without_free"],
                    &p["unknown_frees"],
                    &p["exit_status"]
                ),
                (
                    &serde_json::json!(events),
                    &serde_json::json!(0),
                    &serde_json::json!(0),
                    &serde_json::json!(0),
                    &exit
                ),
                "{how} pid {}",
                p["pid"]
            );
            assert_eq!(p["devices"][0]["live_bytes_at_exit"], live, "{how} pid {}", p["pid"]);
        }
    }
}

/// Under plain `LD_PRELOAD` the library starts the collector's helper. It
/// was the program's child: a program that never forks got a SIGCHLD, and
/// a supervisor thread waiting for any child (`waitpid(-1)`) reaped the
/// helper instead of its own worker in 1 to 3 runs of 8, and took it for
/// the worker. The helper now starts through a child with no exit signal
/// that never execs (a `wait(-1)` cannot see it), and is orphaned at once.
#[test]
fn the_collector_helper_is_never_the_programs_child_in_any_way_a_wait_or_sigchld_sees() {
    let run = |label: &str, args: &[&str]| {
        let dir = scratch_dir(label);
        let trace = dir.join("tree.trace");
        let output = Command::new(fake_cuda::program("scenarios"))
            .args(args)
            .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
            .env("LD_PRELOAD", tracer_library())
            .env_remove("CUDATRACE_DIR")
            .env("CUDATRACE_OUT", &trace)
            .env("CUDATRACE_CLI", cli())
            .env("TMPDIR", &dir)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{label}: {}", stderr(&output));
        let report = finished_trace(&trace);
        assert_eq!(report["processes"][0]["events"], 1, "{label}");
        lines_after_pid(&stdout(&output))
    };
    assert_eq!(run("helper-alone", &["supervisor", "alone"]), "sigchld 0 children 0\n");
    for attempt in 0..8 {
        assert_eq!(
            run(&format!("helper-supervised-{attempt}"), &["supervisor"]),
            "sigchld 1 reaped 1 status 3 others 0\n",
            "run {attempt}"
        );
    }
}

/// The `vm peak` line of `scenarios address-limit`, in kB.
fn vm_peak_kb(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("vm peak "))
        .unwrap_or_else(|| panic!("no vm peak in {stdout}"))
        .parse()
        .unwrap()
}

/// A small program's address space grew from 48 MB to 4.8 GB traced (the
/// spool's ring reserved whole, tables sized for the largest jobs, a
/// `malloc` arena for every thread), and under `ulimit -v` its own
/// `malloc(32 MiB)` failed. Under any address-space limit the untraced
/// program runs under, plus 64 MiB, the traced one now runs as untraced,
/// at every `--stacks`, with everything recorded.
#[test]
fn a_program_runs_traced_under_its_own_address_space_limit_plus_64_mib() {
    let untraced = program("scenarios", &["address-limit"]).output().unwrap();
    assert!(untraced.status.success(), "{}", stderr(&untraced));
    let peak = vm_peak_kb(&stdout(&untraced));
    let limit = format!("--as={}", (peak + (64 << 10)) * 1024);
    let limited = Command::new("prlimit")
        .arg(&limit)
        .arg(fake_cuda::program("scenarios"))
        .arg("address-limit")
        .env("LD_LIBRARY_PATH", fake_cuda::library_dir())
        .output()
        .unwrap();
    assert!(stdout(&limited).contains("malloc ok\n"), "{}", stdout(&limited));
    for stacks in ["none", "python", "all"] {
        let (mut command, trace) = run_program(
            &format!("address-limit-{stacks}"),
            Path::new("prlimit"),
            &["--stacks", stacks],
        );
        let output = command
            .arg(&limit)
            .arg(fake_cuda::program("scenarios"))
            .arg("address-limit")
            .output()
            .unwrap();
        let out = stdout(&output);
        assert!(out.contains("malloc ok\n"), "{stacks}: {out} {}", stderr(&output));
        assert_eq!(output.status.code(), Some(0), "{stacks}: {}", stderr(&output));
        let traced_peak = vm_peak_kb(&out);
        assert!(
            traced_peak <= peak + (64 << 10),
            "{stacks}: {traced_peak} kB against {peak} kB"
        );
        let report = finished_trace(&trace);
        let p = &report["processes"][0];
        assert_eq!(
            (&p["events"], &p["lost_events"], &p["exit_status"]),
            (&serde_json::json!(12), &serde_json::json!(0), &serde_json::json!(0)),
            "{stacks}: {report}"
        );
        assert_eq!(p["devices"][0]["live_bytes_at_exit"], 4 << 20, "{stacks}");
    }
}

/// Signals at random points of steady-state hooks: a timer raises SIGALRM
/// every 50 µs while the program makes 20,000 allocation and free pairs,
/// and the handler allocates and frees too, re-entering the library
/// wherever the main thread was in it. (The fake driver holds its lock
/// with signals blocked here, so that only the library could hang.) The
/// process ends as untraced; every event of both is in the trace or
/// counted as lost, and no free goes unmatched.
#[test]
fn signals_at_random_points_of_steady_state_hooks_neither_hang_nor_lose_events_uncounted() {
    for round in 0..2 {
        let (command, trace) = run_command(&format!("signal-storm-{round}"), "signal-storm", &[]);
        let output = Command::new("timeout")
            .arg("120")
            .arg(command.get_program())
            .args(command.get_args())
            .arg("20000")
            .envs(
                command
                    .get_envs()
                    .filter_map(|(key, value)| value.map(|value| (key, value))),
            )
            .env("FAKE_CUDA_SIGNAL_SAFE", "1")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "round {round}: {}", stderr(&output));
        let out = lines_after_pid(&stdout(&output));
        let words: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(
            (words[0], words[1], words[2], words[4], words[5]),
            ("main", "20000", "handler", "failed", "0"),
            "round {round}: {out}"
        );
        let handled: u64 = words[3].parse().unwrap();
        assert!(handled > 0, "round {round}: no signal arrived");
        let report = finished_trace(&trace);
        let p = &report["processes"][0];
        let (events, lost) = (p["events"].as_u64().unwrap(), p["lost_events"].as_u64().unwrap());
        assert_eq!(events + lost, 2 + 2 * (20_000 + handled), "round {round}: {report}");
        assert_eq!(
            (&p["unknown_frees"], &p["reused_without_free"], &p["exit_status"]),
            (&serde_json::json!(0), &serde_json::json!(0), &serde_json::json!(0)),
            "round {round}"
        );
        assert_eq!(p["devices"][0]["live_bytes_at_exit"], 0, "round {round}");
    }
}

/// A thread's tables are given back at its end, through a key destructor
/// of the library's. A program's key destructor that runs after it (made
/// later) and calls CUDA found the library using the freed tables. Its
/// calls are now recorded without them, at every `--stacks`.
#[test]
fn cuda_calls_from_a_later_key_destructor_of_the_thread_are_recorded_after_its_tables_are_gone() {
    for stacks in ["none", "all"] {
        let (mut command, trace) = run_command(
            &format!("key-destructor-{stacks}"),
            "key-destructor",
            &["--stacks", stacks],
        );
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{stacks}: {}", stderr(&output));
        assert_eq!(lines_after_pid(&stdout(&output)), "destructor ran 1\n", "{stacks}");
        let report = finished_trace(&trace);
        let p = &report["processes"][0];
        assert_eq!(
            (&p["events"], &p["lost_events"], &p["unknown_frees"]),
            (&serde_json::json!(5), &serde_json::json!(0), &serde_json::json!(0)),
            "{stacks}: {report}"
        );
        assert_eq!(p["devices"][0]["live_bytes_at_exit"], 1 << 20, "{stacks}");
    }
}
