//! What an [`Event`]'s op-specific words `arg1` and `arg2` mean, by name.
//!
//! Readers use these rather than the raw words, so that the meaning of each
//! word per operation is written down once, next to the format.

use crate::{Event, Kind, Op};

/// The `address` of an [`Op::Oom`] record that the memory limit refused
/// (`cudatrace run --limit`), rather than the card.
pub const REFUSED_BY_LIMIT: u64 = 1;

/// The `arg1` of an [`Op::Free`] record (api `unknown`) that the program
/// made by unloading the driver (`dlclose`) while the allocation was live:
/// the driver's memory went with it. The library records one for each
/// allocation it still held then.
pub const FREED_WITH_DRIVER: u64 = 1;

impl Event {
    /// Whether this out-of-memory failure was the memory limit's refusal:
    /// then [`Event::oom_device_free`] is what the limit had left and
    /// [`Event::oom_device_total`] the limit.
    pub fn refused_by_limit(&self) -> bool {
        self.op == Op::Oom && self.address == REFUSED_BY_LIMIT
    }

    /// Whether this free is of memory that went with the driver when the
    /// program unloaded it (see [`FREED_WITH_DRIVER`]).
    pub fn freed_with_driver(&self) -> bool {
        self.op == Op::Free && self.api == crate::Api::Unknown && self.arg1 == FREED_WITH_DRIVER
    }

    /// For a memory-limit record: the limit in bytes.
    pub fn memory_limit(&self) -> Option<u64> {
        (self.op == Op::MemoryLimit).then_some(self.size)
    }

    /// For a memory-limit record of a process that kept the limit to
    /// itself: why ([`crate::measures::limit_ledger`]); `None` where it
    /// shared the tree's ledger.
    pub fn memory_limit_kept_alone(&self) -> Option<u64> {
        (self.op == Op::MemoryLimit && self.arg1 != crate::measures::limit_ledger::SHARED).then_some(self.arg1)
    }

    /// For an out-of-memory failure: the device's free bytes at the time.
    pub fn oom_device_free(&self) -> Option<u64> {
        (self.op == Op::Oom).then_some(self.arg1)
    }

    /// For an out-of-memory failure: the device's total bytes.
    pub fn oom_device_total(&self) -> Option<u64> {
        (self.op == Op::Oom).then_some(self.arg2)
    }

    /// For an out-of-memory failure: the bytes that were asked for.
    pub fn oom_requested(&self) -> Option<u64> {
        (self.op == Op::Oom).then_some(self.size)
    }

    /// For a VMM mapping: the handle of the physical memory mapped.
    pub fn mapped_handle(&self) -> Option<u64> {
        (self.op == Op::Map).then_some(self.arg1)
    }

    /// For a VMM mapping: the offset into the physical memory.
    pub fn mapped_offset(&self) -> Option<u64> {
        (self.op == Op::Map).then_some(self.arg2)
    }

    /// For a pitched allocation: the row pitch in bytes.
    pub fn pitch(&self) -> Option<u64> {
        (self.op == Op::Alloc && self.kind == Kind::Pitch).then_some(self.arg1)
    }

    /// For a stream-ordered allocation from a pool: the pool's handle (0
    /// for the device's default pool).
    pub fn pool(&self) -> Option<u64> {
        (self.op == Op::Alloc && self.kind == Kind::Pool).then_some(self.arg1)
    }

    /// For an allocation, free, mapping or failure: the bytes concerned.
    pub fn bytes(&self) -> u64 {
        self.size
    }

    /// Whether this is a stack-table or blob record rather than a memory event.
    pub fn is_stack_record(&self) -> bool {
        self.op.is_stack_record()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Api, Event, Kind, Op};

    fn event(op: Op, kind: Kind) -> Event {
        Event {
            pid: 1,
            tid: 1,
            seq: 0,
            time_ns: 0,
            device: Some(0),
            stream: 0,
            api: Api::CuMemAllocV2,
            op,
            kind,
            address: 0x1000,
            size: 64,
            arg1: 11,
            arg2: 22,
            stack: 0,
        }
    }

    #[test]
    fn each_word_is_named_only_for_the_operations_that_use_it() {
        let oom = event(Op::Oom, Kind::Device);
        assert_eq!(
            (oom.oom_device_free(), oom.oom_device_total(), oom.oom_requested()),
            (Some(11), Some(22), Some(64))
        );
        assert_eq!((oom.mapped_handle(), oom.pitch(), oom.pool()), (None, None, None));
        let map = event(Op::Map, Kind::VirtualAddress);
        assert_eq!(
            (map.mapped_handle(), map.mapped_offset(), map.oom_device_free()),
            (Some(11), Some(22), None)
        );
        assert_eq!(event(Op::Alloc, Kind::Pitch).pitch(), Some(11));
        assert_eq!(event(Op::Alloc, Kind::Device).pitch(), None);
        assert_eq!(event(Op::Alloc, Kind::Pool).pool(), Some(11));
        assert_eq!(event(Op::Free, Kind::Pool).pool(), None);
        assert!(event(Op::StackNode, Kind::Device).is_stack_record());
        assert!(!event(Op::Alloc, Kind::Device).is_stack_record());
        // Only a free by no entry point, marked, went with the driver.
        let unloaded = Event {
            api: Api::Unknown,
            arg1: super::FREED_WITH_DRIVER,
            ..event(Op::Free, Kind::Device)
        };
        assert!(unloaded.freed_with_driver());
        assert!(!Event {
            api: Api::CuMemFreeV2,
            ..unloaded
        }
        .freed_with_driver());
        assert!(!Event { arg1: 0, ..unloaded }.freed_with_driver());
        assert!(!Event {
            op: Op::Alloc,
            ..unloaded
        }
        .freed_with_driver());
    }
}
