//! The keys reports group memory by: the device, and the call stack.

use foldhash::HashMap;
use serde_json::{json, Value};

/// Bytes and allocations live per call stack (innermost node id).
pub type ByStack = HashMap<u32, (u64, u64)>;

/// A device as the report groups memory: an ordinal, or unknown (the
/// tracer could not learn which device an allocation was on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceKey {
    /// A device ordinal.
    Gpu(u8),
    /// Not known.
    Unknown,
}

impl DeviceKey {
    /// The key of an allocation's device.
    pub fn of(device: Option<u8>) -> DeviceKey {
        device.map_or(DeviceKey::Unknown, DeviceKey::Gpu)
    }

    /// The ordinal; `None` when unknown.
    pub fn ordinal(self) -> Option<u8> {
        match self {
            DeviceKey::Gpu(ordinal) => Some(ordinal),
            DeviceKey::Unknown => None,
        }
    }

    /// The ordinal, or null.
    pub fn json(self) -> Value {
        match self {
            DeviceKey::Gpu(ordinal) => json!(ordinal),
            DeviceKey::Unknown => Value::Null,
        }
    }
}
