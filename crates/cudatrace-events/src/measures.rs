//! What the measurement records ([`Op::is_measurement`]) carry: readings of
//! the device's memory taken by the hooks at the moments a category of
//! driver memory appears (a context, a module, a kernel's first launch, a
//! pool or graph growing), and the description of each device a process uses.
//!
//! Free bytes are stored as the driver reported them; "used" is always
//! worked out by the reader as a difference of two free readings of the
//! same device, so that no reader needs the driver's idea of "total".

use crate::{Event, Op};

/// Why a [`Op::Sample`] was taken (its `stream` word).
pub mod sample_reason {
    /// Rate-limited, from a hook the program called anyway.
    pub const PERIODIC: u64 = 0;
    /// From the library's exit path.
    pub const EXIT: u64 = 1;
}

/// Why a process kept the memory limit to itself rather than share the
/// tree's ledger: the `arg1` word of its [`Op::MemoryLimit`] records (0:
/// the tree's ledger, shared by every process of the job).
pub mod limit_ledger {
    /// The tree's shared ledger.
    pub const SHARED: u64 = 0;
    /// No spool folder was known to keep the tree's ledger in.
    pub const NO_FOLDER: u64 = 1;
    /// The ledger file could not be opened.
    pub const CANNOT_OPEN: u64 = 2;
    /// The file is another user's, or others may read or write it.
    pub const NOT_PRIVATE: u64 = 3;
    /// `ulimit -f` is smaller than the ledger.
    pub const FILE_SIZE_LIMIT: u64 = 4;
    /// No disk space could be reserved for it.
    pub const NO_SPACE: u64 = 5;
    /// The file is not a ledger of this version.
    pub const NOT_A_LEDGER: u64 = 6;
    /// Every device entry of the tree's ledger names another device.
    pub const NO_DEVICE_ROOM: u64 = 7;

    /// Why, in words, for reports.
    pub fn reason(code: u64) -> &'static str {
        match code {
            NO_FOLDER => "no spool folder to share a ledger in",
            CANNOT_OPEN => "the tree's ledger file could not be opened",
            NOT_PRIVATE => "the ledger file found in the spool folder is another user's or open to others",
            FILE_SIZE_LIMIT => "ulimit -f is smaller than the ledger",
            NO_SPACE => "no disk space for the ledger",
            NOT_A_LEDGER => "the ledger file is of another version",
            NO_DEVICE_ROOM => "every device entry of the tree's ledger was taken",
            _ => "the tree's ledger could not be used",
        }
    }
}

/// `CUlimit` values recorded by [`Op::Limit`] records.
pub mod limit {
    /// `CU_LIMIT_STACK_SIZE`: bytes of stack per GPU thread.
    pub const STACK_SIZE: u64 = 0;
    /// `CU_LIMIT_PRINTF_FIFO_SIZE`.
    pub const PRINTF_FIFO_SIZE: u64 = 1;
    /// `CU_LIMIT_MALLOC_HEAP_SIZE`: the device-side `malloc` heap.
    pub const MALLOC_HEAP_SIZE: u64 = 2;

    /// The name reports use for a limit.
    pub fn name(limit: u64) -> &'static str {
        match limit {
            STACK_SIZE => "stack",
            PRINTF_FIFO_SIZE => "printf",
            MALLOC_HEAP_SIZE => "heap",
            _ => "other",
        }
    }
}

/// Blob kind of a [`DeviceInfo`] (see [`crate::stacks::blob_kind`]); its key
/// is the device ordinal.
pub const DEVICE_BLOB: u8 = 3;

/// The device behind an ordinal, as the process saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Ordinal in the process (after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: u32,
    /// `cuDeviceGetUuid_v2`: unique per GPU and per MIG instance.
    pub uuid: [u8; 16],
    /// `cuDeviceTotalMem_v2`.
    pub total_bytes: u64,
    /// `cuDeviceGetName`.
    pub name: String,
}

impl DeviceInfo {
    /// Encodes the blob: uuid, total bytes, then the name.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.name.len());
        out.extend_from_slice(&self.uuid);
        out.extend_from_slice(&self.total_bytes.to_le_bytes());
        out.extend_from_slice(self.name.as_bytes());
        out
    }

    /// Decodes a blob of device `ordinal`; `None` if it is too short.
    pub fn decode(ordinal: u32, bytes: &[u8]) -> Option<DeviceInfo> {
        Some(DeviceInfo {
            ordinal,
            uuid: bytes.get(..16)?.try_into().ok()?,
            total_bytes: u64::from_le_bytes(bytes.get(16..24)?.try_into().ok()?),
            name: String::from_utf8_lossy(bytes.get(24..)?)
                .trim_end_matches('\0')
                .to_string(),
        })
    }

    /// The UUID as NVML and `nvidia-smi` print it: `GPU-xxxxxxxx-xxxx-...`.
    pub fn uuid_text(&self) -> String {
        format_uuid(&self.uuid)
    }
}

/// Formats 16 UUID bytes the way NVML prints a GPU's, with the `GPU-` prefix.
pub fn format_uuid(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

impl Event {
    /// The bytes a load or limit change took from the device: the fall in
    /// its free bytes across the call (0 if free memory grew).
    pub fn load_cost(&self) -> Option<u64> {
        match self.op {
            Op::ModuleLoad | Op::KernelLoad => Some(self.arg1.saturating_sub(self.arg2)),
            // Each measured creation stands for `size` of them.
            Op::StreamObjects => Some(self.arg1.saturating_sub(self.arg2).saturating_mul(self.size.max(1))),
            // Graph memory that grew meanwhile is the graph samples' to count.
            Op::GraphExec => Some(self.arg1.saturating_sub(self.arg2).saturating_sub(self.size)),
            Op::Limit if self.arg1 != 0 || self.arg2 != 0 => Some(self.arg1.saturating_sub(self.arg2)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Api, Kind};

    #[test]
    fn device_info_round_trips_and_prints_its_uuid_as_nvml_does() {
        let info = DeviceInfo {
            ordinal: 3,
            uuid: [
                0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
            ],
            total_bytes: 85_899_345_920,
            name: "NVIDIA H100 80GB HBM3".into(),
        };
        assert_eq!(DeviceInfo::decode(3, &info.encode()), Some(info.clone()));
        assert_eq!(info.uuid_text(), "GPU-12345678-9abc-def0-0123-456789abcdef");
        assert_eq!(DeviceInfo::decode(3, &[0; 23]), None);
    }

    #[test]
    fn load_costs_are_falls_in_free_memory() {
        let mut event = Event {
            pid: 1,
            tid: 1,
            seq: 0,
            time_ns: 0,
            device: Some(0),
            stream: 0,
            api: Api::CuModuleLoadData,
            op: Op::ModuleLoad,
            kind: Kind::Device,
            address: 0x10,
            size: 0,
            arg1: 5 << 20,
            arg2: 3 << 20,
            stack: 0,
        };
        assert_eq!(event.load_cost(), Some(2 << 20));
        event.arg2 = 6 << 20;
        assert_eq!(event.load_cost(), Some(0));
        event.op = Op::Limit;
        assert_eq!(event.load_cost(), Some(0), "a limit set with readings");
        event.arg1 = 0;
        event.arg2 = 0;
        assert_eq!(event.load_cost(), None, "a limit read with the context");
        event.op = Op::Sample;
        assert_eq!(event.load_cost(), None);
    }
}
