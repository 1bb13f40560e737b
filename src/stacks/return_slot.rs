//! A hook's caller, found with one load: where the hook's own return address
//! lies at one place in it, learnt once from the unwinder.

use crate::stacks::module_map;
use crate::stacks::native_unwind::{RuleCache, ROOM_FOR_A_WALK};
use crate::stacks::thread_stack::{registers, thread_stack_bounds};
use crate::system::spare_stack;
use crate::system::thread_box::MappedBox;
use crate::system::tracing_switch::guarded;
use framehop::x86_64::UnwindRegsX86_64;
use framehop::{FrameAddress, Unwinder};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where, at one place in a hook, the hook's own return address lies: its
/// distance from the stack pointer there, learnt once from the unwinder.
/// Reading it is then a load, where finding the hook's caller otherwise
/// takes a few unwinding steps.
pub(crate) struct ReturnSlot {
    /// Where the slot is: `BP_RELATIVE` set for an offset from the frame
    /// pointer (a frame that keeps one, and may realign its stack), else from
    /// the stack pointer; the offset + 1 below. 0 = not learnt yet,
    /// `u64::MAX` = could not be learnt.
    place: AtomicU64,
}

const BP_RELATIVE: u64 = 1 << 62;

impl ReturnSlot {
    /// A slot not learnt yet.
    pub(crate) const fn new() -> ReturnSlot {
        ReturnSlot {
            place: AtomicU64::new(0),
        }
    }

    /// The return address of the function this is inlined into: the hook's
    /// caller. 0 when it cannot be known. Each use site needs its own
    /// `ReturnSlot` (a `static` inside the hook), and must call this in the
    /// hook's body itself, not from a closure or helper of its own.
    #[inline(always)]
    pub(crate) fn caller(&'static self) -> u64 {
        let (ip, sp, bp) = registers();
        match self.place.load(Ordering::Relaxed) {
            0 => {
                let mut caller = 0;
                guarded(|| caller = self.learn(ip, sp, bp));
                caller
            }
            u64::MAX => 0,
            // SAFETY: a slot of this function's own frame, at the place the
            // unwinder found for this instruction: live while it runs.
            place if place & BP_RELATIVE != 0 => unsafe { ((bp + (place & !BP_RELATIVE) - 1) as *const u64).read() },
            // SAFETY: as above.
            offset => unsafe { ((sp + offset - 1) as *const u64).read() },
        }
    }

    #[cold]
    #[inline(never)]
    fn learn(&self, ip: u64, sp: u64, bp: u64) -> u64 {
        let Some(map) = module_map::current() else { return 0 };
        let (low, high) = thread_stack_bounds();
        if !(low..high).contains(&sp) {
            // Not on the thread's own stack (a signal stack): try again later.
            return 0;
        }
        let readable =
            |address: u64| address >= sp && address >= low && address.checked_add(8).is_some_and(|end| end <= high);
        let mut reads = [0u64; 4];
        let mut read_count = 0;
        let mut read_stack = |address: u64| -> Result<u64, ()> {
            if read_count < reads.len() {
                reads[read_count] = address;
            }
            read_count += 1;
            // SAFETY: inside this thread's live stack.
            readable(address)
                .then(|| unsafe { (address as *const u64).read() })
                .ok_or(())
        };
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        // The rule cache and the rule's evaluation are large: on a nearly
        // full stack they go on a spare one; without one, try again later.
        let Some(found) = spare_stack::with_room(ROOM_FOR_A_WALK, sp, low, || {
            let mut cache = new_rule_cache()?;
            Some(map.unwinder.unwind_frame(
                FrameAddress::InstructionPointer(ip),
                &mut regs,
                &mut cache,
                &mut read_stack,
            ))
        })
        .flatten() else {
            return 0;
        };
        let slot = regs.sp().wrapping_sub(8);
        // A return address into this library means the place was not in the
        // hook's own frame (a helper not inlined): never use it.
        let outside = |address: u64| !(map.own_range.0..map.own_range.1).contains(&address);
        let frame_pointer = bp != 0 && slot == bp.wrapping_add(8) && reads[..read_count.min(4)].contains(&slot);
        // SAFETY: checked readable, inside this thread's live stack.
        let in_slot = readable(slot).then(|| unsafe { (slot as *const u64).read() });
        let place = match found {
            Ok(Some(return_address)) if in_slot == Some(return_address) && outside(return_address) => {
                if frame_pointer {
                    BP_RELATIVE | (slot - bp + 1)
                } else {
                    slot - sp + 1
                }
            }
            _ => u64::MAX,
        };
        self.place.store(place, Ordering::Relaxed);
        if place == u64::MAX {
            0
        } else {
            found.ok().flatten().unwrap_or(0)
        }
    }
}

impl Default for ReturnSlot {
    fn default() -> ReturnSlot {
        ReturnSlot::new()
    }
}

/// framehop's rule cache, in a mapping of its own (not `malloc`'s: see
/// `thread_box`); `None` when it cannot be mapped.
#[cold]
#[inline(never)]
fn new_rule_cache() -> Option<MappedBox<RuleCache>> {
    MappedBox::new_with(RuleCache::new_in)
}
