//! `cudatrace`: the tools that run outside the traced processes.
//!
//! - `run` runs a command with `libcudatrace.so` preloaded and collects every
//!   process of its tree into one trace;
//! - `collect` turns a folder of spools into a trace;
//! - `report` summarises a trace, for people or as JSON;
//! - `dump` prints spool files as JSON lines.

mod collect;
mod collector;
mod dump;
mod private_dir;
mod report;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage:
  cudatrace run [-o TRACE] [--preload LIB] [--keep-spools] -- CMD [ARGS...]
  cudatrace report [--json] TRACE
  cudatrace collect [-o TRACE] [--root-pid PID] [--detach] [--keep-spools] DIR
  cudatrace dump [--dir DIR] [SPOOL...]

run      Runs CMD with libcudatrace.so preloaded and writes every CUDA memory
         event of CMD and its descendants to TRACE (default
         cudatrace-<CMD>-<pid>.trace). Exits with CMD's exit status.
report   Per process and GPU: allocations, peak, memory live at exit, OOMs.
collect  Turns the spool files in DIR into a trace (after a crash, or for
         spools written with CUDATRACE_DIR).
dump     Prints spool files as JSON lines.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match dispatch(&args) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(message) => {
            eprintln!("cudatrace: {message}");
            ExitCode::from(2)
        }
    }
}

/// Takes the value of an option that needs one.
fn value<'a>(option: &str, rest: &mut impl Iterator<Item = &'a String>) -> Result<&'a String, String> {
    rest.next()
        .ok_or_else(|| format!("{option} needs a value (see --help)"))
}

fn unknown(option: &str) -> String {
    format!("unknown option {option} (see --help)")
}

fn dispatch(args: &[String]) -> Result<i32, String> {
    let Some(command) = args.first() else {
        return Err("no command given (see --help)".into());
    };
    let mut rest = args[1..].iter();
    match command.as_str() {
        "run" => {
            let mut options = run::RunOptions {
                output: None,
                preload: None,
                keep_spools: false,
                command: Vec::new(),
            };
            while let Some(arg) = rest.next() {
                match arg.as_str() {
                    "-o" | "--output" => options.output = Some(value(arg, &mut rest)?.into()),
                    "--preload" => options.preload = Some(value(arg, &mut rest)?.into()),
                    "--keep-spools" => options.keep_spools = true,
                    "--" => {
                        options.command = rest.by_ref().cloned().collect();
                    }
                    flag if flag.starts_with('-') => return Err(unknown(flag)),
                    first => {
                        options.command = std::iter::once(first.to_string())
                            .chain(rest.by_ref().cloned())
                            .collect();
                    }
                }
            }
            if options.command.is_empty() {
                return Err("run needs a command: cudatrace run -- CMD [ARGS...]".into());
            }
            run::run(options)
        }
        "collect" => {
            let (mut output, mut root_pid, mut detach, mut keep_spools, mut dir) = (None, None, false, false, None);
            while let Some(arg) = rest.next() {
                match arg.as_str() {
                    "-o" | "--output" => output = Some(PathBuf::from(value(arg, &mut rest)?)),
                    "--root-pid" => {
                        let text = value(arg, &mut rest)?;
                        root_pid = Some(
                            text.parse()
                                .map_err(|_| format!("--root-pid needs a process id, not '{text}'"))?,
                        );
                    }
                    "--detach" => detach = true,
                    "--keep-spools" => keep_spools = true,
                    flag if flag.starts_with('-') => return Err(unknown(flag)),
                    folder if dir.is_none() => dir = Some(PathBuf::from(folder)),
                    extra => return Err(format!("unexpected argument '{extra}' (see --help)")),
                }
            }
            let dir = dir.ok_or("collect needs a spool folder (see --help)")?;
            collect::collect(collect::CollectOptions {
                dir,
                output,
                root_pid,
                detach,
                keep_spools,
            })
        }
        "report" => {
            let (mut as_json, mut trace) = (false, None);
            for arg in rest {
                match arg.as_str() {
                    "--json" => as_json = true,
                    flag if flag.starts_with('-') => return Err(unknown(flag)),
                    path if trace.is_none() => trace = Some(PathBuf::from(path)),
                    extra => return Err(format!("unexpected argument '{extra}' (see --help)")),
                }
            }
            let trace = trace.ok_or("report needs a trace file (see --help)")?;
            let report = report::Report::read(&trace)?;
            if as_json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.to_text());
            }
            if let Some(damage) = &report.damage {
                eprintln!(
                    "cudatrace: {} is damaged {damage}; the report covers the {} records before it",
                    trace.display(),
                    report.records
                );
                return Ok(1);
            }
            if !report.complete {
                eprintln!(
                    "cudatrace: {} has no footer: it is still being written, or its writer was stopped",
                    trace.display()
                );
            }
            Ok(0)
        }
        "dump" => {
            let mut files = Vec::new();
            let mut dir_given = false;
            while let Some(arg) = rest.next() {
                match arg.as_str() {
                    "--dir" => {
                        files.extend(dump::spools_in(std::path::Path::new(value(arg, &mut rest)?))?);
                        dir_given = true;
                    }
                    flag if flag.starts_with('-') => return Err(unknown(flag)),
                    file => files.push(PathBuf::from(file)),
                }
            }
            if files.is_empty() && !dir_given {
                return Err("dump needs spool files or --dir DIR (see --help)".into());
            }
            dump::print(&files).map(|()| 0)
        }
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            Ok(0)
        }
        "-V" | "--version" => {
            println!("cudatrace {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        other => Err(format!("unknown command '{other}' (see --help)")),
    }
}
