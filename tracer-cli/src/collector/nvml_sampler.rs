//! The NVML sampler thread: the devices' usage, read before the traced
//! program starts and then every [`nvml::INTERVAL`] until the collection
//! drains.

use super::nvml;
use super::shared_state::Shared;
use super::sink::Message;
use crossbeam_channel::Sender;
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// NVML opened, and read once, before the traced program starts: that
/// reading is the device's usage without it. `Err` says why NVML is unusable.
pub type NvmlStart = Result<(nvml::Nvml, Vec<cudatrace_trace::Record>), String>;

/// Opens NVML and reads every device once; call before starting the program.
pub fn start_nvml() -> NvmlStart {
    let mut nvml = nvml::Nvml::open()?;
    let first = nvml.sample(&HashSet::new());
    Ok((nvml, first))
}

/// Reads NVML until the collection drains, sending what it read to the writer.
pub(super) fn sample_nvml(shared: &Shared, to_writer: &Sender<Message>, start: NvmlStart) {
    let mut nvml = match start {
        Ok((nvml, first)) => {
            for record in first {
                let _ = to_writer.send(Message::Record(record));
            }
            nvml
        }
        Err(reason) => {
            let _ = to_writer.send(Message::Record(nvml::unavailable(reason)));
            return;
        }
    };
    let mut traced: HashSet<u32> = HashSet::new();
    while !shared.draining.load(Ordering::Acquire) {
        traced.extend(shared.latest_image.lock().unwrap().keys().copied());
        for record in nvml.sample(&traced) {
            let _ = to_writer.send(Message::Record(record));
        }
        std::thread::sleep(nvml::INTERVAL);
    }
    let _ = to_writer.send(Message::Record(nvml.final_status(!traced.is_empty())));
}
