//! Both readers of untrusted files, the trace reader and the spool reader,
//! on arbitrary bytes: they must stop with an error, never panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reader) = cudatrace_trace::TraceReader::new(data) {
        // Damaged frames may be skipped; reading must still come to an end.
        for record in reader {
            if matches!(record, Err(ref damage) if !damage.skipped) {
                break;
            }
        }
    }
    let _ = cudatrace_events::SpoolReader::parse(data);
});
