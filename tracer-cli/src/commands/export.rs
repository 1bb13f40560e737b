//! `cudatrace export`: traces as Parquet in a folder (see
//! [`crate::outputs::parquet_export`]): `events.parquet`, then
//! `call_sites.parquet`. Both are written beside their destination and put
//! into place together at the end: a failure leaves the folder as it was.

use crate::commands::arguments::ExportArgs;
use crate::outputs::parquet_export::Export;
use crate::outputs::say_what_the_trace_lacks;
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::terminal::{print_line, say};
use crate::wording::{not_regular_text, output_lines};
use cudatrace_analysis::check_regular_file;
use cudatrace_analysis::Progress;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The rows of every event.
pub const EVENTS_FILE: &str = "events.parquet";
/// Each call site once.
pub const CALL_SITES_FILE: &str = "call_sites.parquet";

/// `cudatrace export`; 1 if a trace is damaged.
pub fn command(args: ExportArgs) -> Result<u8, Failure> {
    // A trace that cannot be opened fails the command before anything is
    // written; one that is not a trace fails it when its turn comes, and
    // the folder, where this command made it, is removed again.
    for trace in &args.traces {
        check_regular_file(trace).map_err(|what| not_regular_text(trace, what))?;
        File::open(trace).map_err(|e| output_lines::cannot_open(trace, e))?;
    }
    let made = folder(&args.output)?;
    let exported = export_into(&args);
    if exported.is_err() {
        remove_made(&made);
    }
    exported
}

/// Writes both files into the folder `-o` names, which exists.
fn export_into(args: &ExportArgs) -> Result<u8, Failure> {
    let private = args.traces.iter().any(|trace| is_private(trace));
    let events_path = args.output.join(EVENTS_FILE);
    let sites_path = args.output.join(CALL_SITES_FILE);
    let mut events = OutputFile::create(&events_path, private, args.replace.force)?;
    let mut sites = match OutputFile::create(&sites_path, private, args.replace.force) {
        Ok(sites) => sites,
        Err(failure) => {
            events.abandon();
            return Err(failure.into());
        }
    };
    match write(args, &mut events, &mut sites) {
        Ok((status, said)) => {
            // The two files go into place one after the other: a failure
            // of the first leaves neither, of the second the first alone.
            if let Err(failure) = events.finish() {
                sites.abandon();
                return Err(failure.into());
            }
            sites.finish()?;
            print_line(&events_path.display().to_string())?;
            print_line(&sites_path.display().to_string())?;
            say(&said);
            Ok(status)
        }
        Err(failure) => {
            events.abandon();
            sites.abandon();
            Err(failure)
        }
    }
}

/// Makes sure `dir` is a folder, creating it (and missing folders above
/// it) if missing: the folders made, outermost first. A link is followed;
/// one to nothing is refused, as creating the folder would fail on the
/// link itself.
fn folder(dir: &Path) -> Result<Vec<PathBuf>, Failure> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(Vec::new()),
        Ok(_) => Err(output_lines::not_a_folder(dir).into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Ok(target) = std::fs::read_link(dir) {
                return Err(output_lines::link_to_nothing(dir, &target).into());
            }
            let missing: Vec<PathBuf> = dir
                .ancestors()
                .filter(|folder| !folder.as_os_str().is_empty())
                .take_while(|folder| std::fs::symlink_metadata(folder).is_err())
                .map(Path::to_path_buf)
                .collect();
            std::fs::create_dir_all(dir).map_err(|e| Failure::from(output_lines::cannot_write(dir, e)))?;
            Ok(missing.into_iter().rev().collect())
        }
        Err(e) => Err(output_lines::cannot_write(dir, e).into()),
    }
}

/// Removes the folders `folder` made, innermost first, where they are
/// still empty: a failed export leaves nothing behind.
fn remove_made(made: &[PathBuf]) {
    for folder in made.iter().rev() {
        if std::fs::remove_dir(folder).is_err() {
            return;
        }
    }
}

/// A buffered writer of `output`'s file.
fn buffered(output: &mut OutputFile) -> Result<BufWriter<File>, Failure> {
    let file = output
        .file()
        .try_clone()
        .map_err(|e| output_lines::cannot_write(&output.destination, e))?;
    Ok(BufWriter::with_capacity(1 << 20, file))
}

/// Writes both files: the exit code the traces deserve, and what to say.
fn write(args: &ExportArgs, events: &mut OutputFile, sites: &mut OutputFile) -> Result<(u8, String), Failure> {
    let cannot = |path: &Path| {
        let path = path.to_path_buf();
        move |e: parquet::errors::ParquetError| Failure::from(output_lines::cannot_write(&path, e))
    };
    let mut export = Export::new(buffered(events)?).map_err(cannot(&events.destination))?;
    let mut status = 0;
    for trace in &args.traces {
        let index = super::open_trace::read_trace(trace)?;
        let progress = Progress::new("export", index.events);
        let name = trace.to_string_lossy();
        let errors = export
            .add_trace(&index, &name, &progress)
            .map_err(cannot(&events.destination))?;
        drop(progress);
        status = status.max(say_what_the_trace_lacks(&index, &errors));
    }
    let (out, call_sites) = export.finish_events().map_err(cannot(&events.destination))?;
    flushed(out, &events.destination)?;
    let (out, exported) = call_sites.write(buffered(sites)?).map_err(cannot(&sites.destination))?;
    flushed(out, &sites.destination)?;
    let said = output_lines::exported(exported.events, exported.call_sites as u64, args.traces.len() as u64);
    Ok((status, said))
}

/// Flushes what was written to `path`.
fn flushed(mut out: BufWriter<File>, path: &Path) -> Result<(), Failure> {
    out.flush()
        .map_err(|e| Failure::from(output_lines::cannot_write(path, e)))
}
