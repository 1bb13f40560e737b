//! `cudatrace`: the tools that run outside the traced process.
//!
//! `cudatrace dump SPOOL...` decodes spool files written by `libcudatrace.so`
//! into one JSON object per line: a `process` line for each file, then its
//! events in sequence order.

mod dump;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage: cudatrace dump [--dir DIR] [SPOOL...]

Decodes the spool files libcudatrace.so writes (one per process image) and
prints them as JSON lines: a \"process\" object per file, then its events.
With --dir, every *.spool file in DIR is read, in pid order.

Trace a program with:  CUDATRACE_DIR=out LD_PRELOAD=/path/to/libcudatrace.so CMD...
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("cudatrace: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("dump") => {
            let mut files = Vec::new();
            let mut dir_given = false;
            let mut rest = args[1..].iter();
            while let Some(arg) = rest.next() {
                match arg.as_str() {
                    "--dir" => {
                        let dir = rest.next().ok_or("--dir needs a folder")?;
                        files.extend(dump::spools_in(std::path::Path::new(dir))?);
                        dir_given = true;
                    }
                    flag if flag.starts_with('-') => return Err(format!("unknown option {flag} (see --help)")),
                    file => files.push(PathBuf::from(file)),
                }
            }
            if files.is_empty() && !dir_given {
                return Err("dump needs spool files or --dir DIR (see --help)".into());
            }
            dump::print(&files)
        }
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            Ok(())
        }
        Some("-V" | "--version") => {
            println!("cudatrace {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Some(other) => Err(format!("unknown command '{other}' (see --help)")),
        None => Err("no command given (see --help)".into()),
    }
}
