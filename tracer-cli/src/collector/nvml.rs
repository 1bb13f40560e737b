//! NVML, read by the collector: the only place cudatrace uses it, so the
//! traced processes pay nothing for it. About ten times a second it reads
//! each device's usage and, for every traced pid, NVML's per-process usage,
//! which is the reference figure the report explains.
//!
//! NVML is opened at run time (`libnvidia-ml.so.1` ships with the driver);
//! where it is missing or its pids are not ours (a container with its own pid
//! namespace), the trace says so and readers fall back on the processes' own
//! readings.

use crate::wording::collector_lines;
use cudatrace_trace::{NvmlSample, NvmlStatus, Record};
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::time::Duration;

/// `NVML_ERROR_INSUFFICIENT_SIZE`.
const INSUFFICIENT_SIZE: c_int = 7;

/// How often NVML is read.
pub const INTERVAL: Duration = Duration::from_millis(100);

type Device = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// The NVML entry points the collector calls.
struct Api {
    device_count: unsafe extern "C" fn(*mut c_uint) -> c_int,
    handle_by_index: unsafe extern "C" fn(c_uint, *mut Device) -> c_int,
    uuid: unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_int,
    memory_info: unsafe extern "C" fn(Device, *mut Memory) -> c_int,
    processes: unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> c_int,
}

/// An open NVML and the devices it lists.
pub struct Nvml {
    api: Api,
    devices: Vec<(Device, String)>,
    /// Pids NVML listed that are not traced, while none traced was listed.
    foreign_pids_seen: bool,
    traced_pid_seen: bool,
}

// SAFETY: NVML handles may be used from any thread; only the sampler uses them.
unsafe impl Send for Nvml {}

fn symbol<T: Copy>(library: *mut c_void, name: &CStr) -> Result<T, String> {
    // SAFETY: a handle from dlopen and a NUL-terminated name.
    let address = unsafe { libc::dlsym(library, name.as_ptr()) };
    if address.is_null() {
        return Err(collector_lines::nvml_lacks(name.to_string_lossy()));
    }
    // SAFETY: T is the function pointer type of the named NVML function.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&address) })
}

/// `CLOCK_MONOTONIC` now.
fn now_ns() -> u64 {
    super::host::monotonic_ns()
}

impl Nvml {
    /// Opens NVML; `Err` says in one line why it cannot be used.
    pub fn open() -> Result<Nvml, String> {
        // SAFETY: a NUL-terminated name; NVML has no constructors that matter.
        let library = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if library.is_null() {
            return Err(collector_lines::NVML_NOT_INSTALLED.into());
        }
        let init: unsafe extern "C" fn() -> c_int = symbol(library, c"nvmlInit_v2")?;
        // SAFETY: nvmlInit_v2 takes no arguments.
        let status = unsafe { init() };
        if status != 0 {
            return Err(collector_lines::nvml_did_not_start(status));
        }
        let api = Api {
            device_count: symbol(library, c"nvmlDeviceGetCount_v2")?,
            handle_by_index: symbol(library, c"nvmlDeviceGetHandleByIndex_v2")?,
            uuid: symbol(library, c"nvmlDeviceGetUUID")?,
            memory_info: symbol(library, c"nvmlDeviceGetMemoryInfo")?,
            processes: symbol(library, c"nvmlDeviceGetComputeRunningProcesses_v3")?,
        };
        let mut count: c_uint = 0;
        // SAFETY: a valid out-pointer.
        if unsafe { (api.device_count)(&mut count) } != 0 {
            return Err(collector_lines::NVML_CANNOT_COUNT.into());
        }
        let mut devices = Vec::new();
        for index in 0..count {
            let mut device: Device = std::ptr::null_mut();
            let mut uuid = [0 as c_char; 96];
            // SAFETY: valid out-pointers; the buffer's length is passed.
            let ok = unsafe {
                (api.handle_by_index)(index, &mut device) == 0
                    && (api.uuid)(device, uuid.as_mut_ptr(), uuid.len() as c_uint) == 0
            };
            if ok {
                // SAFETY: NVML wrote a NUL-terminated string into the buffer.
                let text = unsafe { CStr::from_ptr(uuid.as_ptr()) }.to_string_lossy().into_owned();
                devices.push((device, text));
            }
        }
        Ok(Nvml {
            api,
            devices,
            foreign_pids_seen: false,
            traced_pid_seen: false,
        })
    }

    /// One reading of every device, and of each traced pid on it.
    pub fn sample(&mut self, traced: &HashSet<u32>) -> Vec<Record> {
        let time_ns = now_ns();
        let mut records = Vec::new();
        for (device, uuid) in &self.devices {
            let mut memory = Memory::default();
            // SAFETY: a handle NVML gave us and a valid out-pointer.
            if unsafe { (self.api.memory_info)(*device, &mut memory) } == 0 {
                records.push(Record::Nvml(NvmlSample {
                    time_ns,
                    uuid: uuid.clone(),
                    pid: 0,
                    used_bytes: memory.used,
                    free_bytes: memory.free,
                    total_bytes: memory.total,
                }));
            }
            let Some(infos) = self.processes_on(*device) else {
                continue;
            };
            for info in &infos {
                // NVML_VALUE_NOT_AVAILABLE: no figure for this process.
                if info.used_gpu_memory == u64::MAX {
                    continue;
                }
                if traced.contains(&info.pid) {
                    self.traced_pid_seen = true;
                    records.push(Record::Nvml(NvmlSample {
                        time_ns,
                        uuid: uuid.clone(),
                        pid: info.pid,
                        used_bytes: info.used_gpu_memory,
                        free_bytes: 0,
                        total_bytes: 0,
                    }));
                } else {
                    self.foreign_pids_seen = true;
                }
            }
        }
        records
    }

    /// The compute processes on `device`, growing the buffer while NVML says
    /// it is too small.
    fn processes_on(&self, device: Device) -> Option<Vec<ProcessInfo>> {
        let mut room: c_uint = 64;
        for _ in 0..4 {
            let mut infos = vec![ProcessInfo::default(); room as usize];
            let mut count = room;
            // SAFETY: `count` says how many entries `infos` has room for.
            match unsafe { (self.api.processes)(device, &mut count, infos.as_mut_ptr()) } {
                0 => {
                    infos.truncate(count as usize);
                    return Some(infos);
                }
                INSUFFICIENT_SIZE => room = count.max(room) * 2,
                _ => return None,
            }
        }
        None
    }

    /// What to say of NVML's pids once the run is over.
    pub fn final_status(&self, any_traced: bool) -> Record {
        let pids_match = self.traced_pid_seen || !any_traced;
        let reason = if pids_match {
            String::new()
        } else if self.foreign_pids_seen {
            collector_lines::NVML_OTHER_NAMESPACE.into()
        } else {
            collector_lines::NVML_NEVER_LISTED.into()
        };
        Record::NvmlStatus(NvmlStatus {
            time_ns: now_ns(),
            devices_ok: true,
            pids_match,
            reason,
        })
    }
}

/// The status record of an NVML that could not be opened.
pub fn unavailable(reason: String) -> Record {
    Record::NvmlStatus(NvmlStatus {
        time_ns: now_ns(),
        devices_ok: false,
        pids_match: false,
        reason,
    })
}
