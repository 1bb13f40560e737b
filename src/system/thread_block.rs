//! The calling thread's small, hot state, in one block reached in two
//! instructions.
//!
//! A `thread_local!` of a preloaded library is reached through
//! `__tls_get_addr` (the general-dynamic model): 5 to 7 ns on the H100
//! machine, and one hooked call made some ten of them. This block lives in
//! the library's static TLS instead (the initial-exec model, as preloaded
//! allocators do): its address is the thread pointer plus a constant the
//! loader writes once, so a hook reaches every field for the price of one
//! load. The loader gives a preloaded library's TLS its static block; a
//! library `dlopen`ed later takes it from glibc's reserve for such blocks,
//! which is far larger than this one.
//!
//! The block's bytes start as zeros in every thread, so every field's
//! all-zero value is its "nothing known" state. It needs no destructor and
//! is valid for the thread's whole life, teardown included. A forked child
//! inherits the block of the thread that forked, its only thread: the
//! fields that a fork makes stale are cleared there, in one place
//! ([`forget_parent`]), rather than each checked against a fork count on
//! every event.
//!
//! The fields belong to the layers above (each says whose); keeping them in
//! one place is what makes them cheap. Only small values belong here: the
//! call-stack buffers stay in ordinary thread-locals.

use crate::system::prefetch::prefetch_line;
use std::cell::Cell;

/// The per-thread state of the hot path; all zeros in a new thread.
#[repr(C)]
pub(crate) struct ThreadBlock {
    /// `system::thread`: the kernel tid; 0 = not yet asked.
    pub(crate) tid: Cell<u32>,
    /// `record::recorder`: the runtime entry point this thread is inside, or 0.
    pub(crate) runtime_api: Cell<u8>,
    /// `stacks::call_stack`: set while a capture runs on this thread.
    pub(crate) capturing_stack: Cell<bool>,
    /// `record::recorder`: with `--stacks none`, the program's return
    /// address from the runtime call this thread is inside, or 0.
    pub(crate) runtime_caller: Cell<u64>,
    /// `record::devices`: (process epoch, device) of the thread's current
    /// context; epoch 0 = nothing cached.
    pub(crate) device: Cell<(u64, i8)>,
    /// `record::tensors`: (address, bytes) of the thread's last recorded
    /// driver allocation or mapping.
    pub(crate) last_segment: Cell<(u64, u64)>,
    /// `stacks::call_stack`: the last two owners of events recorded without
    /// stacks, as (stack id, module map, return address); a program's calls
    /// alternate between an allocation's and a free's.
    pub(crate) last_owners: [Cell<(u32, usize, u64)>; 2],
    /// `system::clock`: the thread's anchor of the TSC to `CLOCK_MONOTONIC`.
    pub(crate) clock: Cell<ClockAnchor>,
    /// `system::clock`: the latest record time this thread was given.
    pub(crate) clock_latest: Cell<u64>,
    /// `spool::writer`: the sequence number and slot after this thread's
    /// last record, the guess of where its next one goes (slot 0: none).
    pub(crate) next_record: Cell<(u64, usize)>,
    /// `record::memory_limit`: bytes of the memory limit this thread holds
    /// ahead, so that most allocations and frees touch no shared counter.
    pub(crate) limit_credit: Cell<LimitCredit>,
}

/// A thread's credit of the memory limit: bytes counted in the ledger for
/// one device and not allocated yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct LimitCredit {
    /// The bytes.
    pub(crate) bytes: u64,
    /// The ledger's index of their device + 1; 0 = none.
    pub(crate) device: u8,
    /// Set while the thread changes the credit through the shared
    /// counters: a hook of a signal handler that interrupted it then goes
    /// to the shared counters directly.
    pub(crate) busy: bool,
    /// Whether the thread's exit gives the credit back (a thread-specific
    /// value with a destructor is set).
    pub(crate) registered: bool,
    /// The ledger's credit epoch of the device when the credit was given:
    /// once the epoch moves on, the credit is void.
    pub(crate) epoch: u32,
}

/// A TSC reading and its `CLOCK_MONOTONIC` time, the rate to scale later
/// ticks by (nanoseconds a tick, 32.32 fixed point) and how many ticks
/// past the reading the anchor covers; all zeros covers none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct ClockAnchor {
    /// The TSC reading.
    pub(crate) tsc: u64,
    /// `CLOCK_MONOTONIC` at that reading.
    pub(crate) ns: u64,
    /// Nanoseconds a tick, 32.32 fixed point.
    pub(crate) rate: u64,
    /// Ticks past `tsc` that the anchor covers.
    pub(crate) span_ticks: u64,
}

/// Bytes reserved for the block in the TLS segment.
const RESERVED: usize = 192;
const _: () = assert!(std::mem::size_of::<ThreadBlock>() <= RESERVED);
const _: () = assert!(std::mem::align_of::<ThreadBlock>() <= 64);

#[cfg(target_arch = "x86_64")]
mod place {
    use super::ThreadBlock;

    // The block: zero-initialised thread-local bytes (`.tbss`), hidden so
    // that no other object can bind to it.
    std::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".p2align 6",
        ".globl cudatrace_thread_block",
        ".hidden cudatrace_thread_block",
        ".type cudatrace_thread_block, @object",
        ".size cudatrace_thread_block, 192",
        "cudatrace_thread_block:",
        ".zero 192",
        ".popsection",
    );

    /// The calling thread's block.
    #[inline(always)]
    pub(crate) fn current() -> &'static ThreadBlock {
        let address: usize;
        // SAFETY: the initial-exec sequence: %fs:0 holds the thread
        // pointer, and the GOT entry the block's offset from it, written by
        // the loader before any code of ours runs. Both are constant for
        // the thread's life, so the result may be reused (`pure`).
        unsafe {
            std::arch::asm!(
                "mov {address}, qword ptr fs:[0]",
                "add {address}, qword ptr [rip + cudatrace_thread_block@GOTTPOFF]",
                address = out(reg) address,
                options(pure, readonly, nostack, preserves_flags),
            );
        }
        // SAFETY: the block is RESERVED zeroed bytes, 64-byte aligned, of
        // this thread, where all zeros is a valid ThreadBlock; the cells
        // make it !Sync, so the reference cannot leave the thread.
        unsafe { &*(address as *const ThreadBlock) }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod place {
    use super::ThreadBlock;

    thread_local! {
        static BLOCK: ThreadBlock = const {
            ThreadBlock {
                tid: std::cell::Cell::new(0),
                runtime_api: std::cell::Cell::new(0),
                capturing_stack: std::cell::Cell::new(false),
                runtime_caller: std::cell::Cell::new(0),
                device: std::cell::Cell::new((0, 0)),
                last_segment: std::cell::Cell::new((0, 0)),
                last_owners: [const { std::cell::Cell::new((0, 0, 0)) }; 2],
                clock: std::cell::Cell::new(super::ClockAnchor { tsc: 0, ns: 0, rate: 0, span_ticks: 0 }),
                clock_latest: std::cell::Cell::new(0),
                next_record: std::cell::Cell::new((0, 0)),
                limit_credit: std::cell::Cell::new(super::LimitCredit { bytes: 0, device: 0, busy: false, registered: false, epoch: 0 }),
            }
        };
    }

    /// The calling thread's block.
    #[inline(always)]
    pub(crate) fn current() -> &'static ThreadBlock {
        // SAFETY: the block has no destructor, so it stays valid for the
        // thread's life; the cells keep the reference on this thread.
        BLOCK.with(|block| unsafe { &*std::ptr::from_ref(block) })
    }
}

pub(crate) use place::current;

/// In a forked child, on its only thread: clears what the fork made stale.
/// The tid and the current device are the parent's; the owners remembered
/// are ids of the parent's stack table, and the next slot one of the
/// parent's spool; the clock anchor is dropped so that the child's first
/// record takes a fresh pair, later than the start of the child's spool.
/// What a call interrupted by the fork still needs stays: the runtime call
/// the thread is inside, a capture under way, the last segment seen.
pub(crate) fn forget_parent() {
    let block = current();
    block.tid.set(0);
    block.device.set((0, 0));
    for owner in &block.last_owners {
        owner.set((0, 0, 0));
    }
    block.clock.set(ClockAnchor::default());
    block.next_record.set((0, 0));
    // The parent's credit was counted for the parent. Whether the thread's
    // exit gives credit back is kept: the thread-specific value that makes
    // it so is copied into the child with the thread.
    let registered = block.limit_credit.get().registered;
    block.limit_credit.set(LimitCredit {
        registered,
        ..LimitCredit::default()
    });
}

/// Asks for the calling thread's block, all of its lines.
#[inline(always)]
pub(crate) fn prefetch() {
    let block = std::ptr::from_ref(current()).cast::<u8>();
    for offset in (0..RESERVED).step_by(64) {
        prefetch_line(block.wrapping_add(offset));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_has_its_own_block_starting_at_zero() {
        current().runtime_caller.set(0x1234);
        current().device.set((2, 3));
        let other = std::thread::spawn(|| {
            let block = current();
            let fresh = (block.runtime_caller.get(), block.device.get(), block.tid.get());
            block.runtime_caller.set(99);
            (fresh, std::ptr::from_ref(block) as usize)
        })
        .join()
        .unwrap();
        assert_eq!(other.0, (0, (0, 0), 0));
        assert_ne!(other.1, std::ptr::from_ref(current()) as usize);
        assert_eq!(current().runtime_caller.get(), 0x1234);
        assert_eq!(current().device.get(), (2, 3));
    }
}
