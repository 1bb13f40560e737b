//! Native stack capture in a hook: return addresses only, by `.eh_frame`
//! unwinding with framehop over the in-memory sections of the loaded
//! modules ([`crate::stacks::module_map`]), falling back to frame pointers where a
//! module has no unwind information.
//!
//! No lock is taken (libgcc's unwinder would take the loader lock on older
//! glibc), nothing is symbolized, and nothing is allocated after a thread's
//! first capture, which allocates its caches and asks for its stack bounds,
//! so that reads never leave the thread's stack.
//!
//! Each step framehop takes is also remembered, for every thread, keyed by the
//! return address it started from, as one of the few shapes an x86-64 frame
//! has: "the caller's stack pointer is this far above mine (and its frame
//! pointer is saved here)" or "follow the frame pointer". A step seen before
//! is then two or three loads, which matters at the depths real programs
//! call CUDA from.
//!
//! And each thread keeps its recent walks whole ([`WalkMemo`]): a walk from
//! a stack pointer the thread walked from before, whose steering words hold
//! what they held, is copied instead of walked. A training step's
//! allocations repeat their call paths exactly; on the GPU machine 99% of
//! ResNet-50's walks were copies.

use crate::stacks::walk_memo::{Start, WalkMemo, WalkRecorder};
use crate::stacks::{module_map, stack_cache};
use crate::sys::address_budget;
use crate::sys::lazy_mapping::{LazyMapping, ZeroIsEmpty};
use crate::sys::prefetch::prefetch_line;
use crate::sys::spare_stack;
use crate::sys::thread_box::{MappedBox, ThreadBox};
use crate::sys::tracing_switch::guarded;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, MustNotAllocateDuringUnwind, Unwinder};
use std::cell::UnsafeCell;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

type RuleCache = CacheX86_64<MustNotAllocateDuringUnwind>;

/// One unwinding step from a return address, as learnt from framehop.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    /// The caller's stack pointer is `cfa` bytes above this frame's; its
    /// return address lies just below that, and its frame pointer is saved
    /// `bp_at` bytes above this frame's stack pointer (or left as it is).
    Stack { cfa: u32, bp_at: Option<u32> },
    /// The frame pointer chain: the caller's frame pointer at `[bp]`, the
    /// return address at `[bp + 8]`.
    FramePointer,
}

/// A learnt step, as stored: confirmed, or seen once in a frame whose frame
/// pointer lay inside it (where the frame could be based on it, as libffi's
/// call frames are: then no fixed step describes it), with the frame
/// pointer's distance from the stack pointer then.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Learnt {
    Confirmed(Step),
    Tentative(Step, u64),
}

const FRAME_POINTER: u64 = 1 << 63;
const STACK: u64 = 1 << 62;
const TENTATIVE: u64 = 1 << 60;
const FIELD: u64 = (1 << 24) - 1;
const BP_DISTANCE_BITS: u64 = (1 << 12) - 1;

impl Learnt {
    /// Packed in a word (never 0): flags, then the distance seen (12 bits),
    /// the frame pointer's slot + 1 and the CFA's distance (24 bits each).
    /// `None` for a step too large to pack.
    fn pack(self) -> Option<u64> {
        let (step, tentative) = match self {
            Learnt::Confirmed(step) => (step, 0),
            // A distance too large to keep is kept as the largest, which
            // `apply_tentative` never takes for a match.
            Learnt::Tentative(step, distance) => (step, TENTATIVE | distance.min(BP_DISTANCE_BITS) << 48),
        };
        let word = match step {
            Step::FramePointer => FRAME_POINTER,
            Step::Stack { cfa, bp_at } => {
                let slot = u64::from(bp_at.map_or(0, |at| at + 1));
                if u64::from(cfa) > FIELD || slot > FIELD {
                    return None;
                }
                STACK | slot << 24 | u64::from(cfa)
            }
        };
        Some(word | tentative)
    }

    fn unpack(word: u64) -> Option<Learnt> {
        let step = if word & FRAME_POINTER != 0 {
            Step::FramePointer
        } else if word & STACK != 0 {
            Step::Stack {
                cfa: (word & FIELD) as u32,
                bp_at: (((word >> 24) & FIELD) as u32).checked_sub(1),
            }
        } else {
            return None;
        };
        Some(if word & TENTATIVE != 0 {
            Learnt::Tentative(step, (word >> 48) & BP_DISTANCE_BITS)
        } else {
            Learnt::Confirmed(step)
        })
    }
}

/// A remembered step: the key (return address, with the module map's
/// generation in its top bits) and the packed step. Written step first,
/// key last; a reader checks the key again after reading the step.
#[repr(C)]
struct LearntSlot {
    key: AtomicU64,
    step: AtomicU64,
}

// SAFETY: zeroed, a slot is empty (no key matches 0: return addresses are not 0).
unsafe impl ZeroIsEmpty for LearntSlot {}

/// Remembered steps, shared by every thread, in sets of `LEARNT_WAYS` slots
/// chosen by return address. A set is one cache line, so a look-up costs one
/// line wherever the step lies in it; and return addresses that share a set
/// (a large program has thousands in use) do not evict each other, which
/// would send both through framehop on every event.
const LEARNT_SLOTS: usize = 1 << 16;
const LEARNT_WAYS: usize = 4;
#[unsafe(link_section = "cudatrace_hot")]
static LEARNT: LazyMapping<LearntSlot> = LazyMapping::new(LEARNT_SLOTS);

fn learnt_key(address: u64, generation: u64) -> u64 {
    address ^ generation << 48
}

/// The index of the set a return address's step is kept in.
#[inline(always)]
fn learnt_set_index(address: u64) -> usize {
    let sets = LEARNT_SLOTS / LEARNT_WAYS;
    ((address ^ (address >> 17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & (sets - 1)
}

fn learnt_set(slots: &[LearntSlot], address: u64) -> &[LearntSlot] {
    let set = learnt_set_index(address);
    &slots[set * LEARNT_WAYS..(set + 1) * LEARNT_WAYS]
}

/// Sets a thread remembers from its last walk, to ask for at the start of
/// the next one.
const RECENT_SETS: usize = 64;

/// The stack a walk may need below its start: framehop's first reading of
/// a frame's rule takes about 8 KiB in an optimised build. With less room
/// left, the walk runs on a spare stack.
const ROOM_FOR_A_WALK: u64 = 32 << 10;

/// The step kept for `key`, the return address `address`'s.
#[cfg(test)]
fn recall(slots: &[LearntSlot], key: u64, address: u64) -> Option<Learnt> {
    recall_in(slots, key, learnt_set_index(address))
}

/// The step kept for `key` in learnt set `set` (a return address's, see
/// [`learnt_set_index`]); `None` where no slot holds it.
fn recall_in(slots: &[LearntSlot], key: u64, set: usize) -> Option<Learnt> {
    let slot = slots
        .get(set * LEARNT_WAYS..(set + 1) * LEARNT_WAYS)?
        .iter()
        .find(|slot| slot.key.load(Ordering::Acquire) == key)?;
    let learnt = Learnt::unpack(slot.step.load(Ordering::Acquire))?;
    (slot.key.load(Ordering::Acquire) == key).then_some(learnt)
}

/// A slot a writer holds while it writes the step.
const WRITING: u64 = u64::MAX;

fn remember(slots: &[LearntSlot], key: u64, address: u64, learnt: Learnt) {
    let Some(word) = learnt.pack() else { return };
    let set = learnt_set(slots, address);
    // The key's own slot, else an empty one, else one picked by the address
    // (so that two keys do not keep taking the same slot from each other).
    let slot = set
        .iter()
        .find(|slot| slot.key.load(Ordering::Acquire) == key)
        .or_else(|| set.iter().find(|slot| slot.key.load(Ordering::Acquire) == 0))
        .unwrap_or(&set[((address >> 2) ^ (address >> 9)) as usize % LEARNT_WAYS]);
    write_slot(slot, key, word);
}

/// Writes a packed step and its key into a slot, unless another writer
/// holds it.
fn write_slot(slot: &LearntSlot, key: u64, word: u64) {
    // One writer at a time: the one that takes the key word from what it
    // saw to WRITING writes the step, then its key; the others give up.
    let seen = slot.key.load(Ordering::Acquire);
    if seen == WRITING
        || slot
            .key
            .compare_exchange(seen, WRITING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    slot.step.store(word, Ordering::Release);
    slot.key.store(key, Ordering::Release);
}

struct ThreadUnwind {
    cache: ThreadBox<RuleCache>,
    /// The thread's stack, [low, high); (0, 0) until asked.
    stack: (u64, u64),
    /// The learnt sets the thread's last walk looked in, and how many.
    ///
    /// Each step of a walk waits for its set's cache line before it knows
    /// where the next frame is, so a deep walk after the program has used
    /// the cache pays one memory latency a frame, one after another. A
    /// thread's next stack shares most of its return addresses with its
    /// last (the same loop, the same operators), so the walk first asks
    /// for all of the last walk's lines at once, and they arrive together.
    recent_sets: [u16; RECENT_SETS],
    recent_count: usize,
    /// The thread's kept walks, made on its first walk (without them,
    /// walks are made in full).
    memo: ThreadBox<WalkMemo>,
}

thread_local! {
    static THREAD: UnsafeCell<ThreadUnwind> = const {
        UnsafeCell::new(ThreadUnwind {
            cache: ThreadBox::new(),
            stack: (0, 0),
            recent_sets: [0; RECENT_SETS],
            recent_count: 0,
            memo: ThreadBox::new(),
        })
    };
}

/// The thread that loaded the library (the main thread, for a preloaded
/// library) and its stack's bounds, read when it loaded.
static LOADING_THREAD: AtomicU64 = AtomicU64::new(0);
static LOADING_THREAD_STACK: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Reads the calling thread's stack bounds, as the library loads. For the
/// main thread the C library finds them by reading `/proc/self/maps` (with
/// `malloc` and `sscanf`): a hook must never do that, since it may run in a
/// signal handler that interrupted `malloc`, on a stack of a few KiB.
pub(crate) fn note_loading_thread() {
    let (low, high) = stack_bounds();
    LOADING_THREAD_STACK[0].store(low, Ordering::Relaxed);
    LOADING_THREAD_STACK[1].store(high, Ordering::Relaxed);
    // SAFETY: pthread_self has no preconditions.
    LOADING_THREAD.store(unsafe { libc::pthread_self() } as u64, Ordering::Release);
}

/// The calling thread's stack bounds: read when the library loaded for the
/// thread that loaded it, else asked of the C library (which reads them
/// from the thread's own descriptor for a thread it started). (0, 0) for
/// another thread in a process with a limit on its address space: the C
/// library allocates there, and a thread's first `malloc` reserves 64 MiB
/// of address space (see `address_budget`); its events take no native
/// frames.
fn thread_stack_bounds() -> (u64, u64) {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    if LOADING_THREAD.load(Ordering::Acquire) == me {
        return (
            LOADING_THREAD_STACK[0].load(Ordering::Relaxed),
            LOADING_THREAD_STACK[1].load(Ordering::Relaxed),
        );
    }
    if address_budget::lean() {
        return (0, 0);
    }
    stack_bounds()
}

/// The calling thread's stack bounds, from the C library.
fn stack_bounds() -> (u64, u64) {
    // SAFETY: attr is initialised by pthread_getattr_np before use and destroyed after.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return (0, 0);
        }
        let (mut base, mut size) = (std::ptr::null_mut(), 0usize);
        let ok = libc::pthread_attr_getstack(&attr, &mut base, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if ok {
            (base as u64, base as u64 + size as u64)
        } else {
            (0, 0)
        }
    }
}

#[inline(always)]
fn registers() -> (u64, u64, u64) {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags)
        );
    }
    (ip, sp, bp)
}

/// What a walk found: `count` frames in `out`, whether the stack went on
/// past them, and their hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NativeWalk {
    /// Frames stored.
    pub(crate) count: usize,
    /// Whether the stack went on past `out`'s end.
    pub(crate) cut: bool,
    /// [`stack_cache::hash_frames`] of the frames, each as (0, address, 0).
    pub(crate) hash: [u64; 2],
}

const NO_WALK: NativeWalk = NativeWalk {
    count: 0,
    cut: false,
    hash: [0, 0],
};

/// Fills `out` with the caller's return addresses, innermost first, leaving
/// out this library's own frames wherever they are.
///
/// A walk the thread made before from the same stack pointer is taken from
/// its [`WalkMemo`] where the words that steered it hold what they held;
/// any other is walked and kept.
#[inline(never)]
pub(crate) fn capture(out: &mut [u64]) -> NativeWalk {
    let Some(map) = module_map::current() else {
        return NO_WALK;
    };
    let (ip, sp, bp) = registers();
    THREAD
        .try_with(|thread| {
            // SAFETY: only this thread touches its state, and capture is not re-entered
            // on a thread (the caller guards against that).
            let thread = unsafe { &mut *thread.get() };
            if thread.stack == (0, 0) {
                thread.stack = thread_stack_bounds();
            }
            if !(thread.stack.0..thread.stack.1).contains(&sp) {
                return NO_WALK;
            }
            let start = Start {
                sp,
                bp,
                generation: std::ptr::from_ref(map) as u64,
                depth: out.len(),
            };
            let ThreadUnwind {
                cache,
                stack,
                recent_sets,
                recent_count,
                memo,
                ..
            } = thread;
            let mut recorder = match memo.get_or_make() {
                Some(memo) => {
                    // SAFETY: the thread's own memo, from its stack pointer now.
                    if let Some((count, cut, hash)) = unsafe { memo.recall(start, out) } {
                        #[cfg(test)]
                        tests::COPIED.with(|copied| copied.set(copied.get() + 1));
                        return NativeWalk { count, cut, hash };
                    }
                    Some(memo.record(start))
                }
                None => None,
            };
            let (low, high) = *stack;
            // Reading a frame's unwinding rule the first time takes several
            // KiB of stack: on a nearly full stack the walk runs on a spare
            // one (it reads this stack as before, from `sp` up).
            let walked = spare_stack::with_room(ROOM_FOR_A_WALK, sp, low, || {
                let walker = Walker {
                    map,
                    high,
                    sp,
                    recent_sets,
                    recent_count,
                    cache: cache.get_or_make_with(RuleCache::new_in)?,
                };
                Some(walker.walk(ip, bp, out, recorder.as_mut()))
            });
            let Some((count, cut)) = walked.flatten() else {
                return NO_WALK;
            };
            let hash = stack_cache::hash_frames(out[..count].iter().map(|&address| (0, address, 0)));
            if let Some(recorder) = recorder {
                recorder.finish(count, cut, hash);
            }
            NativeWalk { count, cut, hash }
        })
        .unwrap_or(NO_WALK)
}

/// One walk's view of its thread's state.
struct Walker<'a> {
    map: &'static module_map::ModuleMap,
    /// The top of the thread's stack.
    high: u64,
    /// The stack pointer the walk starts from: no word below it is read.
    sp: u64,
    recent_sets: &'a mut [u16; RECENT_SETS],
    recent_count: &'a mut usize,
    cache: &'a mut RuleCache,
}

impl Walker<'_> {
    /// Walks from the capture's own frame, telling `recorder` every word
    /// that steers the walk.
    fn walk(self, ip: u64, bp: u64, out: &mut [u64], mut recorder: Option<&mut WalkRecorder>) -> (usize, bool) {
        let Walker {
            map,
            high,
            sp,
            recent_sets,
            recent_count,
            cache,
        } = self;
        let (unwinder, own) = (&map.unwinder, map.own_range);
        let learnt = LEARNT.get().unwrap_or_default();
        let generation = map.dlopen_count & 0xffff;
        for &set in &recent_sets[..*recent_count] {
            prefetch_line(learnt.as_ptr().wrapping_add(usize::from(set) * LEARNT_WAYS));
        }
        *recent_count = 0;
        let read = |address: u64| -> Option<u64> {
            (address >= sp && address.checked_add(8).is_some_and(|end| end <= high) && address.is_multiple_of(8))
                // SAFETY: inside this thread's live stack, aligned.
                .then(|| unsafe { (address as *const u64).read() })
        };
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut frame = FrameAddress::InstructionPointer(ip);
        let mut count = 0;
        loop {
            let frame_sp = regs.sp();
            let next = match frame {
                FrameAddress::ReturnAddress(address) => {
                    let address = address.get();
                    let key = learnt_key(address, generation);
                    let set = learnt_set_index(address);
                    if *recent_count < RECENT_SETS && !learnt.is_empty() {
                        recent_sets[*recent_count] = set as u16;
                        *recent_count += 1;
                    }
                    let seen = recall_in(learnt, key, set);
                    let usable = match seen {
                        Some(Learnt::Confirmed(step)) => Some(step),
                        // A frame that may be based on its frame pointer,
                        // with the frame pointer where it was when learnt:
                        // either way of reading the frame gives this step.
                        Some(Learnt::Tentative(step, distance)) => {
                            if let Some(recorder) = recorder.as_deref_mut() {
                                recorder.frame_pointer_used();
                            }
                            (distance < BP_DISTANCE_BITS && regs.bp().wrapping_sub(regs.sp()) == distance)
                                .then_some(step)
                        }
                        None => None,
                    };
                    match usable {
                        Some(step) => apply(step, &mut regs, read, recorder.as_deref_mut()),
                        None => {
                            let (next, observed) =
                                step_with_framehop(unwinder, frame, &mut regs, cache, read, recorder.as_deref_mut());
                            if let Some(observed) = observed.filter(|_| !learnt.is_empty()) {
                                learn(learnt, key, address, seen, observed);
                            }
                            next
                        }
                    }
                }
                FrameAddress::InstructionPointer(_) => {
                    step_with_framehop(unwinder, frame, &mut regs, cache, read, recorder.as_deref_mut()).0
                }
            };
            // Each caller's frame lies above its callee's.
            let Some(return_address) = next.filter(|_| regs.sp() > frame_sp) else {
                return (count, false);
            };
            let Some(return_address) = NonZeroU64::new(return_address) else {
                return (count, false);
            };
            frame = FrameAddress::ReturnAddress(return_address);
            let address = return_address.get();
            // Our hooks sit between the program and CUDA, at the top and
            // again where the runtime calls the driver: never the program's.
            if (own.0..own.1).contains(&address) {
                continue;
            }
            if count == out.len() {
                return (count, true);
            }
            out[count] = address;
            count += 1;
            if let Some(recorder) = recorder.as_deref_mut() {
                recorder.last_return_address_is_a_frame();
            }
        }
    }
}

/// Remembers what framehop did from `address`, given what was remembered
/// before (`seen`): a step seen twice with the frame pointer at different
/// places does not depend on it, and is confirmed.
fn learn(slots: &[LearntSlot], key: u64, address: u64, seen: Option<Learnt>, observed: Learnt) {
    let learnt_now = match (seen, observed) {
        (Some(Learnt::Tentative(step, distance)), Learnt::Tentative(now, now_distance))
            if step == now && distance != now_distance =>
        {
            Some(Learnt::Confirmed(step))
        }
        (Some(Learnt::Tentative(..)), Learnt::Tentative(..)) => None,
        (_, observed) => Some(observed),
    };
    if let Some(learnt_now) = learnt_now {
        remember(slots, key, address, learnt_now);
    }
}

/// framehop's rule cache, in a mapping of its own (not `malloc`'s: see
/// `thread_box`); `None` when it cannot be mapped.
#[cold]
#[inline(never)]
fn new_rule_cache() -> Option<MappedBox<RuleCache>> {
    MappedBox::new_with(RuleCache::new_in)
}

/// Takes a remembered step; `None` where a read leaves the stack.
#[inline]
fn apply(
    step: Step,
    regs: &mut UnwindRegsX86_64,
    read: impl Fn(u64) -> Option<u64>,
    mut recorder: Option<&mut WalkRecorder>,
) -> Option<u64> {
    let (sp, bp) = (regs.sp(), regs.bp());
    if step == Step::FramePointer {
        // Whether this step's reads succeed, and so where the walk ends,
        // hangs on the frame pointer: it steers the walk even if they fail.
        if let Some(recorder) = recorder.as_deref_mut() {
            recorder.frame_pointer_used();
        }
    }
    let (new_sp, new_bp, return_address) = match step {
        Step::Stack { cfa, bp_at } => {
            let new_sp = sp.checked_add(u64::from(cfa))?;
            let new_bp = match bp_at {
                Some(at) => read(sp + u64::from(at))?,
                None => bp,
            };
            (new_sp, new_bp, read(new_sp - 8)?)
        }
        Step::FramePointer => (bp.checked_add(16)?, read(bp)?, read(bp.checked_add(8)?)?),
    };
    regs.set_sp(new_sp);
    regs.set_bp(new_bp);
    if let Some(recorder) = recorder {
        tell_step(recorder, step, sp, bp, new_bp, return_address);
    }
    Some(return_address)
}

/// Tells a recorder the words a step of a known shape read and used.
fn tell_step(recorder: &mut WalkRecorder, step: Step, sp: u64, bp: u64, new_bp: u64, return_address: u64) {
    match step {
        Step::Stack { cfa, bp_at } => {
            if let Some(at) = bp_at {
                recorder.frame_pointer_restored(sp + u64::from(at), new_bp);
            }
            recorder.return_address(sp + u64::from(cfa) - 8, return_address);
        }
        Step::FramePointer => {
            // (Again for a step framehop took; `apply` has said so already.)
            recorder.frame_pointer_used();
            recorder.frame_pointer_restored(bp, new_bp);
            recorder.return_address(bp + 8, return_address);
        }
    }
}

/// One step through framehop, and what it did as a [`Step`] when it is one
/// of those shapes (told apart by the stack slots it read): confirmed, or
/// tentative where the frame pointer lay inside the frame.
fn step_with_framehop(
    unwinder: &module_map::NativeUnwinder,
    frame: FrameAddress,
    regs: &mut UnwindRegsX86_64,
    cache: &mut RuleCache,
    read: impl Fn(u64) -> Option<u64>,
    recorder: Option<&mut WalkRecorder>,
) -> (Option<u64>, Option<Learnt>) {
    let (sp, bp) = (regs.sp(), regs.bp());
    // The words framehop read (those it could), with their values.
    let mut reads = [(0u64, 0u64); 4];
    let mut read_count = 0;
    let mut read_stack = |address: u64| {
        let value = read(address).ok_or(())?;
        if read_count < reads.len() {
            reads[read_count] = (address, value);
        }
        read_count += 1;
        Ok(value)
    };
    let result = unwinder.unwind_frame(frame, regs, cache, &mut read_stack);
    let kept = &reads[..read_count.min(reads.len())];
    let next = match result {
        Ok(Some(return_address)) => return_address,
        _ => {
            if let Some(recorder) = recorder {
                // Where the walk ends may have hung on any of it.
                recorder.frame_pointer_used();
                for &(address, value) in kept {
                    recorder.word_read(address, value);
                }
                if read_count > reads.len() {
                    recorder.fail();
                }
            }
            return (None, None);
        }
    };
    let (new_sp, new_bp) = (regs.sp(), regs.bp());
    let read_at = |address: u64| kept.iter().any(|&(at, _)| at == address);
    let step = if new_sp == bp.wrapping_add(16) && read_at(bp) && read_at(bp + 8) && read_count == 2 {
        Some(Step::FramePointer)
    } else if new_sp > sp && new_sp - sp <= u64::from(u32::MAX) && read_at(new_sp - 8) {
        let cfa = (new_sp - sp) as u32;
        match read_count {
            1 if new_bp == bp => Some(Step::Stack { cfa, bp_at: None }),
            2 => kept
                .iter()
                .find(|&&(address, _)| address != new_sp - 8)
                .and_then(|&(address, _)| u32::try_from(address.checked_sub(sp)?).ok())
                .map(|at| Step::Stack { cfa, bp_at: Some(at) }),
            _ => None,
        }
    } else {
        None
    };
    let learnt = step.map(|step| match step {
        // A frame pointer inside the frame may be its base (CFA = bp + k, as
        // in libffi's call frames): confirmed only once seen elsewhere too.
        Step::Stack { .. } if (sp..new_sp).contains(&bp) => Learnt::Tentative(step, bp - sp),
        _ => Learnt::Confirmed(step),
    });
    if let Some(recorder) = recorder {
        match learnt {
            Some(Learnt::Confirmed(step)) => tell_step(recorder, step, sp, bp, new_bp, next),
            _ => {
                // A step of no known shape: everything it read is checked,
                // and it may have used the frame pointer.
                recorder.frame_pointer_used();
                let mut return_address_read = false;
                for &(address, value) in kept {
                    if address == new_sp.wrapping_sub(8) && value == next && !return_address_read {
                        recorder.return_address(address, value);
                        return_address_read = true;
                    } else {
                        recorder.word_read(address, value);
                    }
                }
                if read_count > reads.len() || !return_address_read {
                    recorder.fail();
                }
            }
        }
    }
    (Some(next), learnt)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Walks this thread took from its kept walks.
        pub(super) static COPIED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Walks the stack from one call site, so from one stack pointer.
    #[inline(never)]
    fn walk_from_one_place(out: &mut [u64]) -> NativeWalk {
        let walk = capture(out);
        std::hint::black_box(walk)
    }

    #[test]
    fn a_walk_from_where_the_thread_walked_before_is_copied_and_finds_the_same() {
        module_map::rebuild();
        std::thread::spawn(|| {
            let mut frames = [[0u64; 32]; 2];
            let mut walks = Vec::new();
            // One call instruction, so one stack pointer and one return
            // address: through a pointer the compiler cannot see, in a loop
            // it cannot unroll.
            let walk: fn(&mut [u64]) -> NativeWalk = std::hint::black_box(walk_from_one_place);
            let mut round = 0;
            while round < std::hint::black_box(2) {
                let before = COPIED.with(|copied| copied.get());
                walks.push((walk(&mut frames[round]), COPIED.with(|copied| copied.get()) - before));
                round = std::hint::black_box(round + 1);
            }
            assert!(walks[0].0.count > 0, "the thread's frames outside the test binary");
            assert_eq!(walks[0].1, 0, "the first walk is walked");
            assert_eq!(walks[1].1, 1, "the second is copied");
            assert_eq!(walks[0].0, walks[1].0);
            assert_eq!(frames[0], frames[1]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn learnt_steps_pack_and_unpack() {
        for learnt in [
            Learnt::Confirmed(Step::FramePointer),
            Learnt::Confirmed(Step::Stack { cfa: 48, bp_at: None }),
            Learnt::Confirmed(Step::Stack {
                cfa: 4096,
                bp_at: Some(16),
            }),
            Learnt::Tentative(
                Step::Stack {
                    cfa: 64,
                    bp_at: Some(0),
                },
                40,
            ),
        ] {
            assert_eq!(Learnt::unpack(learnt.pack().unwrap()), Some(learnt));
        }
        assert_eq!(
            Learnt::Confirmed(Step::Stack {
                cfa: 1 << 24,
                bp_at: None
            })
            .pack(),
            None
        );
        assert_eq!(Learnt::unpack(0), None);
        // A distance too large to keep comes back as the largest.
        let step = Step::Stack { cfa: 64, bp_at: None };
        assert_eq!(
            Learnt::unpack(Learnt::Tentative(step, 5000).pack().unwrap()),
            Some(Learnt::Tentative(step, BP_DISTANCE_BITS))
        );
    }

    #[test]
    fn a_set_holds_as_many_steps_as_it_has_slots_and_then_takes_one_back() {
        let slots: Vec<LearntSlot> = (0..LEARNT_SLOTS)
            .map(|_| LearntSlot {
                key: AtomicU64::new(0),
                step: AtomicU64::new(0),
            })
            .collect();
        let a = 0x7f00_0000_0040u64;
        let same_set: Vec<u64> = (0..1u64 << 22)
            .map(|i| a + i * 16)
            .filter(|&b| std::ptr::eq(learnt_set(&slots, a).as_ptr(), learnt_set(&slots, b).as_ptr()))
            .take(LEARNT_WAYS + 1)
            .collect();
        let step = |i: usize| {
            Learnt::Confirmed(Step::Stack {
                cfa: 8 * (i as u32 + 1),
                bp_at: None,
            })
        };
        for (i, &address) in same_set[..LEARNT_WAYS].iter().enumerate() {
            remember(&slots, address, address, step(i));
        }
        for (i, &address) in same_set[..LEARNT_WAYS].iter().enumerate() {
            assert_eq!(recall(&slots, address, address), Some(step(i)));
        }
        // Learning one again updates its own slot.
        remember(&slots, same_set[0], same_set[0], step(9));
        assert_eq!(recall(&slots, same_set[0], same_set[0]), Some(step(9)));
        // One more takes exactly one slot from the others.
        let extra = same_set[LEARNT_WAYS];
        remember(&slots, extra, extra, step(7));
        assert_eq!(recall(&slots, extra, extra), Some(step(7)));
        let kept = same_set[..LEARNT_WAYS]
            .iter()
            .filter(|&&address| recall(&slots, address, address).is_some())
            .count();
        assert_eq!(kept, LEARNT_WAYS - 1);
    }

    #[test]
    fn a_writer_leaves_a_slot_another_writer_holds_alone() {
        let slots: Vec<LearntSlot> = (0..LEARNT_SLOTS)
            .map(|_| LearntSlot {
                key: AtomicU64::new(0),
                step: AtomicU64::new(0),
            })
            .collect();
        let address = 0x5555_0000_2000u64;
        let first = Learnt::Confirmed(Step::Stack { cfa: 8, bp_at: None });
        remember(&slots, address, address, first);
        assert_eq!(recall(&slots, address, address), Some(first));
        // Another writer holds the slot, between its step and its key.
        let slot = learnt_set(&slots, address)
            .iter()
            .find(|slot| slot.key.load(Ordering::Acquire) == address)
            .unwrap();
        slot.key.store(WRITING, Ordering::Release);
        write_slot(slot, address, Learnt::Confirmed(Step::FramePointer).pack().unwrap());
        assert_eq!(
            slot.step.load(Ordering::Acquire),
            first.pack().unwrap(),
            "the step is not written twice"
        );
        assert_eq!(
            recall(&slots, address, address),
            None,
            "nobody reads a slot being written"
        );
    }

    #[test]
    fn one_writer_at_a_time_and_readers_never_see_a_step_under_another_key() {
        let slots: Vec<LearntSlot> = (0..LEARNT_SLOTS)
            .map(|_| LearntSlot {
                key: AtomicU64::new(0),
                step: AtomicU64::new(0),
            })
            .collect();
        // More return addresses than a set has slots, all in one set, each
        // with its own step: they take slots from each other.
        let a = 0x5555_0000_1000u64;
        let mut addresses = vec![a];
        addresses.extend(
            (1..1 << 22)
                .map(|i| a + i * 16)
                .filter(|&b| std::ptr::eq(learnt_set(&slots, a).as_ptr(), learnt_set(&slots, b).as_ptr()))
                .take(LEARNT_WAYS + 1),
        );
        let step_of = |address: u64| {
            Learnt::Confirmed(Step::Stack {
                cfa: 8 * (1 + addresses.iter().position(|&x| x == address).unwrap() as u32),
                bp_at: None,
            })
        };
        assert_eq!(addresses.len(), LEARNT_WAYS + 2);
        std::thread::scope(|scope| {
            for writer in 0..4 {
                let (slots, addresses, step_of) = (&slots, &addresses, &step_of);
                scope.spawn(move || {
                    for round in 0..20_000 {
                        let address = addresses[(writer + round) % addresses.len()];
                        remember(slots, address, address, step_of(address));
                        for &reader in addresses {
                            if let Some(seen) = recall(slots, reader, reader) {
                                assert_eq!(seen, step_of(reader));
                            }
                        }
                    }
                });
            }
        });
    }
}
