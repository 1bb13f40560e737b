//! `cudatrace perfetto`: the trace as Perfetto JSON (see
//! [`crate::outputs::perfetto_json`]).

use crate::analysis::Window;
use crate::commands::arguments::PerfettoArgs;
use crate::outputs::wording::output_lines;
use crate::outputs::{perfetto_json, perfetto_scene, say_what_the_trace_lacks};
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::progress::Progress;
use crate::system::terminal::say;
use std::io::{self, BufWriter, Write};

/// Past this size Perfetto's UI struggles to open a JSON trace.
const WARN_BYTES: u64 = 500 << 20;

/// Counts what it writes.
struct Counting<W: Write> {
    out: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// `cudatrace perfetto`; 1 if the trace is damaged.
pub fn command(args: PerfettoArgs) -> Result<u8, Failure> {
    let index = super::open_trace::read_trace(&args.trace)?;
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| args.trace.with_extension("perfetto.json"));
    let window = Window::seconds(index.start_ns(), args.window.from, args.window.to);
    let passes = perfetto_scene::passes(args.window.max_events);
    let progress = Progress::new("perfetto", index.events * passes);
    let mut output = OutputFile::create(&path, is_private(&args.trace), args.replace.force)?;
    let mut out = Counting {
        out: BufWriter::with_capacity(1 << 20, output.file()),
        written: 0,
    };
    let written = perfetto_json::write(&index, window, args.window.max_events, &mut out, &progress)
        .and_then(|errors| out.flush().map(|()| errors));
    let errors = match written {
        Ok(errors) => errors,
        Err(e) => {
            drop(out);
            output.abandon();
            return Err(output_lines::cannot_write(&path, e).into());
        }
    };
    let written = out.written;
    drop(out);
    output.finish()?;
    drop(progress);
    println!("{}", path.display());
    say(output_lines::OPEN_PERFETTO);
    if written > WARN_BYTES {
        say(&output_lines::perfetto_too_large(&path, written));
    }
    Ok(say_what_the_trace_lacks(&index, &errors))
}
