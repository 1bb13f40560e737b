//! The set of allocations this process holds right now, keyed by address or
//! handle. It makes event emission idempotent (an allocation is recorded only
//! when it is new, a free only when it removes something) and lets a free
//! record carry the size and kind of what it freed.
//!
//! Lock-free open addressing over one anonymous mapping made on first use:
//! insertion claims a slot with a compare-and-swap on its key, removal turns
//! the key into a tombstone. Probing is bounded; when no slot is found the
//! caller records the event anyway and counts an overflow.

use crate::system::lazy_mapping::{LazyMapping, ZeroIsEmpty};
use cudatrace_events::Kind;
use std::sync::atomic::{AtomicU64, Ordering};

const SLOT_COUNT: usize = 1 << 21;
const MAX_PROBE: usize = 512;
const EMPTY: u64 = 0;
const TOMBSTONE: u64 = u64::MAX;

/// Independent key spaces: the same number may be a device pointer and an
/// array handle at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Namespace {
    /// Device pointers: device, managed, pitched and pool memory.
    Device = 1,
    /// Pinned host pointers.
    Host = 2,
    /// `CUarray` and `CUmipmappedArray` handles.
    Array = 3,
    /// VMM physical handles from `cuMemCreate`.
    VmmHandle = 4,
    /// Pointers opened with `cuIpcOpenMemHandle`.
    IpcImport = 5,
}

impl Namespace {
    const ALL: [Namespace; 5] = [
        Namespace::Device,
        Namespace::Host,
        Namespace::Array,
        Namespace::VmmHandle,
        Namespace::IpcImport,
    ];

    fn from_code(code: u64) -> Option<Namespace> {
        Namespace::ALL.into_iter().find(|&namespace| namespace as u64 == code)
    }
}

/// What the table remembers about one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Bytes.
    pub(crate) size: u64,
    /// Kind of memory.
    pub(crate) kind: Kind,
    /// Device ordinal or -1.
    pub(crate) device: i8,
}

/// Result of [`insert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inserted {
    /// Newly recorded.
    New,
    /// Already present: the allocation was recorded before.
    AlreadyPresent,
    /// No room within the probe limit.
    NoRoom,
}

#[repr(C)]
struct Slot {
    key: AtomicU64,
    size: AtomicU64,
    meta: AtomicU64,
}

// SAFETY: zeroed, a slot is EMPTY.
unsafe impl ZeroIsEmpty for Slot {}

/// Slots under an address-space limit (1.5 MiB): allocations past what it
/// holds are counted as the live table's overflows.
const LEAN_SLOT_COUNT: usize = 1 << 16;

#[unsafe(link_section = "cudatrace_hot")]
static TABLE: LazyMapping<Slot> = LazyMapping::with_lean_len(SLOT_COUNT, LEAN_SLOT_COUNT);

fn table() -> Option<&'static [Slot]> {
    TABLE.get()
}

fn key_of(namespace: Namespace, address: u64) -> Option<u64> {
    let key = address ^ ((namespace as u64) << 60);
    (key != EMPTY && key != TOMBSTONE).then_some(key)
}

fn first_slot(key: u64) -> usize {
    let mixed = (key ^ (key >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> (64 - SLOT_COUNT.trailing_zeros())) as usize
}

fn pack_meta(entry: Entry) -> u64 {
    u64::from(entry.kind as u8) | (u64::from(entry.device as u8) << 8)
}

fn unpack(size: u64, meta: u64) -> Entry {
    Entry {
        size,
        kind: Kind::from_code(meta as u8).unwrap_or(Kind::Device),
        device: (meta >> 8) as u8 as i8,
    }
}

/// Asks for the line where the look-up of `address` starts, so that a
/// free's look-up before its driver call finds it on its way.
#[inline(always)]
pub(crate) fn prefetch(namespace: Namespace, address: u64) {
    if let Some(key) = key_of(namespace, address) {
        TABLE.prefetch(first_slot(key));
    }
}

/// Records a new allocation.
pub(crate) fn insert(namespace: Namespace, address: u64, entry: Entry) -> Inserted {
    let (Some(key), Some(slots)) = (key_of(namespace, address), table()) else {
        return Inserted::NoRoom;
    };
    let start = first_slot(key);
    for _attempt in 0..8 {
        let mut free_slot = None;
        for step in 0..MAX_PROBE {
            let index = (start + step) & (slots.len() - 1);
            let current = slots[index].key.load(Ordering::Acquire);
            if current == key {
                return Inserted::AlreadyPresent;
            }
            if current == TOMBSTONE && free_slot.is_none() {
                free_slot = Some((index, current));
            }
            if current == EMPTY {
                free_slot.get_or_insert((index, current));
                break;
            }
        }
        let Some((index, expected)) = free_slot else {
            return Inserted::NoRoom;
        };
        let slot = &slots[index];
        if slot
            .key
            .compare_exchange(expected, key, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            slot.size.store(entry.size, Ordering::Release);
            slot.meta.store(pack_meta(entry), Ordering::Release);
            return Inserted::New;
        }
    }
    Inserted::NoRoom
}

fn find(slots: &[Slot], key: u64) -> Option<usize> {
    let start = first_slot(key);
    (0..MAX_PROBE)
        .map(|step| (start + step) & (slots.len() - 1))
        .take_while(|&index| slots[index].key.load(Ordering::Acquire) != EMPTY)
        .find(|&index| slots[index].key.load(Ordering::Acquire) == key)
}

/// Removes an allocation, returning what was recorded for it.
pub(crate) fn remove(namespace: Namespace, address: u64) -> Option<Entry> {
    let key = key_of(namespace, address)?;
    let slots = table()?;
    loop {
        let index = find(slots, key)?;
        let slot = &slots[index];
        let entry = unpack(slot.size.load(Ordering::Acquire), slot.meta.load(Ordering::Acquire));
        if slot
            .key
            .compare_exchange(key, TOMBSTONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return Some(entry);
        }
    }
}

/// Looks an allocation up without removing it.
pub(crate) fn get(namespace: Namespace, address: u64) -> Option<Entry> {
    let key = key_of(namespace, address)?;
    let slots = table()?;
    let slot = &slots[find(slots, key)?];
    Some(unpack(
        slot.size.load(Ordering::Acquire),
        slot.meta.load(Ordering::Acquire),
    ))
}

/// Removes every allocation from the table, handing each to `each` with
/// its namespace and address: the driver that held them is gone. Each is
/// removed by the same exchange as [`remove`], so a free racing with this
/// gets an allocation or nothing, never one handed out twice. Reads the
/// whole table (pages never written read as the zero page and cost no
/// memory), so for cold paths only.
pub(crate) fn drain(each: impl FnMut(Namespace, u64, Entry)) {
    if let Some(slots) = TABLE.get_if_mapped() {
        drain_slots(slots, each);
    }
}

fn drain_slots(slots: &[Slot], mut each: impl FnMut(Namespace, u64, Entry)) {
    for slot in slots {
        let key = slot.key.load(Ordering::Acquire);
        if key == EMPTY || key == TOMBSTONE {
            continue;
        }
        // Addresses and handles are user-space pointers or small numbers,
        // below bit 60: the key's top bits are its namespace.
        let Some(namespace) = Namespace::from_code(key >> 60) else {
            continue;
        };
        let entry = unpack(slot.size.load(Ordering::Acquire), slot.meta.load(Ordering::Acquire));
        if slot
            .key
            .compare_exchange(key, TOMBSTONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            each(namespace, key ^ ((namespace as u64) << 60), entry);
        }
    }
}

/// Called in a forked child: the parent's allocations are not the child's.
pub(crate) fn forget_parent_table() {
    TABLE.forget();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(size: u64) -> Entry {
        Entry {
            size,
            kind: Kind::Pool,
            device: 3,
        }
    }

    #[test]
    fn insert_is_idempotent_and_remove_returns_what_was_inserted() {
        let address = 0x7e00_0000_1000;
        assert_eq!(insert(Namespace::Device, address, entry(4096)), Inserted::New);
        assert_eq!(
            insert(Namespace::Device, address, entry(4096)),
            Inserted::AlreadyPresent
        );
        // The same number in another namespace is another allocation.
        assert_eq!(insert(Namespace::Array, address, entry(8)), Inserted::New);
        assert_eq!(get(Namespace::Device, address), Some(entry(4096)));
        assert_eq!(remove(Namespace::Device, address), Some(entry(4096)));
        assert_eq!(remove(Namespace::Device, address), None);
        assert_eq!(remove(Namespace::Array, address), Some(entry(8)));
        assert_eq!(insert(Namespace::Device, address, entry(64)), Inserted::New);
        assert_eq!(remove(Namespace::Device, address), Some(entry(64)));
    }

    #[test]
    fn draining_hands_out_every_allocation_once_with_its_namespace_and_address() {
        // A table of this test's own: the other tests use the process's.
        static SLOTS: LazyMapping<Slot> = LazyMapping::new(64);
        let slots = SLOTS.get().unwrap();
        let fill = |index: usize, namespace: Namespace, address: u64, entry: Entry| {
            slots[index]
                .key
                .store(key_of(namespace, address).unwrap(), Ordering::Release);
            slots[index].size.store(entry.size, Ordering::Release);
            slots[index].meta.store(pack_meta(entry), Ordering::Release);
        };
        let device = 0x7e00_0000_1000;
        let host = Entry {
            size: 16,
            kind: Kind::HostPinned,
            device: -1,
        };
        fill(3, Namespace::Device, device, entry(4096));
        fill(9, Namespace::Array, device, entry(8));
        fill(10, Namespace::Host, 0x5555_0000, host);
        fill(40, Namespace::VmmHandle, 7, entry(2 << 20));
        slots[41].key.store(TOMBSTONE, Ordering::Release);
        let mut drained = Vec::new();
        drain_slots(slots, |namespace, address, entry| {
            drained.push((namespace, address, entry))
        });
        assert_eq!(
            drained,
            vec![
                (Namespace::Device, device, entry(4096)),
                (Namespace::Array, device, entry(8)),
                (Namespace::Host, 0x5555_0000, host),
                (Namespace::VmmHandle, 7, entry(2 << 20)),
            ]
        );
        // Each is handed out once: the slots are tombstones now.
        drain_slots(slots, |_, _, _| panic!("drained twice"));
        assert!(slots
            .iter()
            .all(|slot| [EMPTY, TOMBSTONE].contains(&slot.key.load(Ordering::Acquire))));
    }

    #[test]
    fn host_entries_keep_a_negative_device() {
        let host = Entry {
            size: 10,
            kind: Kind::HostPinned,
            device: -1,
        };
        assert_eq!(insert(Namespace::Host, 0x5555_0000, host), Inserted::New);
        assert_eq!(remove(Namespace::Host, 0x5555_0000), Some(host));
    }

    #[test]
    fn many_threads_inserting_and_removing_lose_nothing() {
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let address = 0x1_0000_0000 + ((i % 64) << 12) + (t << 32);
                        assert_eq!(insert(Namespace::IpcImport, address, entry(i)), Inserted::New);
                        assert_eq!(remove(Namespace::IpcImport, address), Some(entry(i)));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
    }
}
