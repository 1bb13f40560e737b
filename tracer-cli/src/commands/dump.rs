//! `cudatrace dump`: spool files and traces as JSON lines, streamed: each
//! file's header is checked before anything else is read, and records are
//! printed as they are read, so any file of any size can be given.

use crate::collector::spool_tail::SpoolTail;
use crate::commands::arguments::DumpArgs;
use crate::outputs::json::dump_lines::{damage_line, end_line, event_line, process_line, record_lines};
use crate::system::failure::Failure;
use crate::system::terminal::Stdout;
use crate::wording::problem_text;
use crate::wording::{collect_lines, output_lines};
use crate::wording::{not_regular_text, spool_error_text};
use cudatrace_events::{naming, Pass, SpoolError};
use cudatrace_trace::TraceReader;
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The first (up to) eight bytes of `path`, as they read.
fn first_bytes(path: &Path) -> Vec<u8> {
    let mut start = Vec::with_capacity(8);
    let _ = std::fs::File::open(path).and_then(|file| file.take(8).read_to_end(&mut start));
    start
}

/// Why `path`, not a trace, cannot be a spool before it is opened as one,
/// where its size says nothing: an empty file that no process named as
/// its spool (only a spool's name makes "its process could not reserve
/// room" the likely story), or a file whose size reads 0 but which has
/// content (a `/proc` file) not starting like a spool.
fn not_a_spool(path: &Path, start: &[u8]) -> Option<String> {
    if start.is_empty() {
        let named_as_spool = naming::parse_spool_file_name(path).is_some();
        return (!named_as_spool).then(|| output_lines::unreadable_input(path, output_lines::EMPTY_FILE));
    }
    let size_reads_zero = std::fs::metadata(path).is_ok_and(|meta| meta.len() == 0);
    let spool_magic = &cudatrace_events::SPOOL_MAGIC[..start.len().min(cudatrace_events::SPOOL_MAGIC.len())];
    (size_reads_zero && start != spool_magic)
        .then(|| output_lines::unreadable_input(path, spool_error_text(&SpoolError::NotASpool)))
}

/// Prints one line per record of the trace at `path`; `None` once stdout
/// is closed, else the exit code (1 if the trace is damaged).
fn dump_trace(path: &Path, out: &mut Stdout) -> Result<Option<u8>, Failure> {
    let file = std::fs::File::open(path).map_err(|e| output_lines::cannot_open(path, e))?;
    let reader = TraceReader::new(std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(|damage| output_lines::unreadable_input(path, problem_text(&damage.problem)))?;
    let mut code = 0;
    for record in reader {
        let lines: Vec<Value> = match record {
            Err(damage) => {
                code = 1;
                vec![damage_line(path, &damage)]
            }
            Ok(record) => record_lines(path, record),
        };
        for line in lines {
            if !out.write(&format!("{line}\n"))? {
                return Ok(None);
            }
        }
    }
    Ok(Some(code))
}

/// Prints every file; stops at the first unreadable one, after printing the
/// files before it.
pub fn command(args: DumpArgs) -> Result<u8, Failure> {
    if args.spools.is_empty() && args.dir.is_none() {
        return Err(output_lines::DUMP_NEEDS_INPUT.into());
    }
    let mut files: Vec<PathBuf> = args.spools;
    if let Some(dir) = &args.dir {
        files.extend(naming::spool_files_in(dir).map_err(|e| collect_lines::cannot_read(dir, e))?);
    }
    let mut out = Stdout::new();
    for path in &files {
        cudatrace_analysis::check_regular_file(path).map_err(|what| not_regular_text(path, what))?;
        let image = naming::parse_spool_file_name(path).map_or(0, |(_, image)| image);
        let start = first_bytes(path);
        if start == cudatrace_trace::MAGIC {
            match dump_trace(path, &mut out)? {
                Some(0) => continue,
                Some(code) => {
                    out.finish()?;
                    return Ok(code);
                }
                None => return Ok(0),
            }
        }
        if let Some(why) = not_a_spool(path, &start) {
            return Err(why.into());
        }
        let (mut tail, header) = SpoolTail::open(path, 0, image, false)
            .map_err(|e| output_lines::unreadable_input(path, spool_error_text(&e)))?;
        if !out.write(&format!("{}\n", process_line(path, &header)))? {
            return Ok(0);
        }
        let mut count = 0u64;
        loop {
            let (events, at_end) = tail.read_batch(Pass::Final)?;
            for event in &events {
                if !out.write(&format!("{}\n", event_line(event)))? {
                    return Ok(0);
                }
            }
            count += events.len() as u64;
            if at_end {
                break;
            }
        }
        let header = tail.header();
        tail.finish(&header);
        if !out.write(&format!("{}\n", end_line(tail.pid, count, &tail.cursor, &header)))? {
            return Ok(0);
        }
    }
    out.finish()?;
    Ok(0)
}
