//! `cudatrace perfetto`: the trace as a Perfetto trace, in its protobuf
//! format (see [`crate::outputs::perfetto_proto`]) or as JSON (see
//! [`crate::outputs::perfetto_json`]).

use crate::commands::arguments::{PerfettoArgs, PerfettoFormat};
use crate::outputs::{perfetto_json, perfetto_proto, perfetto_scene, say_what_the_trace_lacks};
use crate::system::failure::Failure;
use crate::system::output_file::{is_private, OutputFile};
use crate::system::terminal::{print_line, say};
use crate::wording::output_lines;
use cudatrace_analysis::Progress;
use cudatrace_analysis::Window;
use std::io::{self, BufWriter, Write};

/// Past this size Perfetto's UI struggles to open a JSON trace.
const WARN_JSON_BYTES: u64 = 500 << 20;

/// Past this size Perfetto's UI may run out of memory for a protobuf trace.
const WARN_PROTOBUF_BYTES: u64 = 2 << 30;

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
    let format = args.chosen_format();
    if args.uncompressed && format == PerfettoFormat::Json {
        return Err(output_lines::JSON_UNCOMPRESSED.into());
    }
    let index = super::open_trace::read_trace(&args.trace)?;
    let path = args.output.clone().unwrap_or_else(|| match format {
        PerfettoFormat::Protobuf => args.trace.with_extension("pftrace"),
        PerfettoFormat::Json => args.trace.with_extension("perfetto.json"),
    });
    let window = Window::seconds(index.start_ns(), args.window.from, args.window.to);
    let max_events = args.window.max_events_or(None);
    let passes = perfetto_scene::passes(max_events);
    let progress = Progress::new("perfetto", index.events * passes);
    let mut output = OutputFile::create(&path, is_private(&args.trace), args.replace.force)?;
    let mut out = Counting {
        out: BufWriter::with_capacity(1 << 20, output.file()),
        written: 0,
    };
    let written = match format {
        PerfettoFormat::Protobuf => {
            let compress = !args.uncompressed;
            perfetto_proto::write(&index, window, max_events, compress, &mut out, &progress)
        }
        PerfettoFormat::Json => perfetto_json::write(&index, window, max_events, &mut out, &progress),
    }
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
    print_line(&path.display().to_string())?;
    say(output_lines::OPEN_PERFETTO);
    match format {
        PerfettoFormat::Protobuf if written > WARN_PROTOBUF_BYTES => {
            say(&output_lines::perfetto_protobuf_too_large(&path, written))
        }
        PerfettoFormat::Json if written > WARN_JSON_BYTES => say(&output_lines::perfetto_too_large(&path, written)),
        _ => {}
    }
    Ok(say_what_the_trace_lacks(&index, &errors))
}
