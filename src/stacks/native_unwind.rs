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
//! return address it started from ([`crate::stacks::learnt_steps`]): a step seen before is
//! then two or three loads, which matters at the depths real programs call
//! CUDA from.
//!
//! And each thread keeps its recent walks whole ([`WalkMemo`]): a walk from
//! a stack pointer the thread walked from before, whose steering words hold
//! what they held, is copied instead of walked. A training step's
//! allocations repeat their call paths exactly; on the GPU machine 99% of
//! ResNet-50's walks were copies.

use crate::stacks::learnt_steps::{
    learn, learnt_key, learnt_set_index, recall_in, Learnt, Step, BP_DISTANCE_BITS, LEARNT, LEARNT_WAYS,
};
use crate::stacks::thread_stack::{registers, thread_stack_bounds};
use crate::stacks::walk_memo::{Start, WalkMemo, WalkRecorder};
use crate::stacks::{module_map, stack_cache};
use crate::system::prefetch::prefetch_line;
use crate::system::spare_stack;
use crate::system::thread_box::ThreadBox;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, MustNotAllocateDuringUnwind, Unwinder};
use std::cell::UnsafeCell;
use std::num::NonZeroU64;

/// framehop's cache of unwinding rules, which never allocates while it
/// unwinds.
pub(crate) type RuleCache = CacheX86_64<MustNotAllocateDuringUnwind>;

/// Sets a thread remembers from its last walk, to ask for at the start of
/// the next one.
const RECENT_SETS: usize = 64;

/// The stack a walk may need below its start: framehop's first reading of
/// a frame's rule takes about 8 KiB in an optimised build. With less room
/// left, the walk runs on a spare stack.
pub(crate) const ROOM_FOR_A_WALK: u64 = 32 << 10;

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
    /// Where the walk stopped at Python ([`PythonStop`]): the stack pointer
    /// above its last frame, which runs the outermost Python call; 0 where
    /// it ran to the end of the stack or was cut.
    pub(crate) stopped_sp: u64,
}

pub(crate) const NO_WALK: NativeWalk = NativeWalk {
    count: 0,
    cut: false,
    hash: [0, 0],
    stopped_sp: 0,
};

/// Where a walk may stop: at the frame that runs the outermost of `calls`
/// calls of the Python eval loop (return addresses inside `eval`). The
/// frames below it are the thread's way into Python, the same for every
/// event of the thread that runs this Python code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PythonStop {
    /// The eval loop's address range.
    pub(crate) eval: (u64, u64),
    /// The Python eval-loop calls on the thread's stack.
    pub(crate) calls: u32,
}

/// Fills `out` with the caller's return addresses, innermost first, leaving
/// out this library's own frames wherever they are.
///
/// A walk the thread made before from the same stack pointer is taken from
/// its [`WalkMemo`] where the words that steered it hold what they held;
/// any other is walked and kept. With `stop`, the walk ends at the frame
/// that runs the outermost Python call, if it gets there.
#[inline(never)]
pub(crate) fn capture(out: &mut [u64], stop: Option<PythonStop>) -> NativeWalk {
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
                python_calls: stop.map_or(0, |stop| stop.calls),
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
                    if let Some((count, cut, hash, stopped_sp)) = unsafe { memo.recall(start, out) } {
                        #[cfg(test)]
                        tests::COPIED.with(|copied| copied.set(copied.get() + 1));
                        return NativeWalk {
                            count,
                            cut,
                            hash,
                            stopped_sp,
                        };
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
                    stop,
                };
                Some(walker.walk(ip, bp, out, recorder.as_mut()))
            });
            let Some((count, cut, stopped_sp)) = walked.flatten() else {
                return NO_WALK;
            };
            let hash = stack_cache::hash_frames(out[..count].iter().map(|&address| (0, address, 0)));
            if let Some(recorder) = recorder {
                recorder.finish(count, cut, hash, stopped_sp);
            }
            NativeWalk {
                count,
                cut,
                hash,
                stopped_sp,
            }
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
    /// Where to stop, if the walk gets there.
    stop: Option<PythonStop>,
}

impl Walker<'_> {
    /// Walks from the capture's own frame, telling `recorder` every word
    /// that steers the walk: the frames found, whether the stack went on
    /// past `out`, and the stack pointer where it stopped at Python (0 if
    /// it did not).
    fn walk(self, ip: u64, bp: u64, out: &mut [u64], mut recorder: Option<&mut WalkRecorder>) -> (usize, bool, u64) {
        let Walker {
            map,
            high,
            sp,
            recent_sets,
            recent_count,
            cache,
            stop,
        } = self;
        let mut python_calls_left = stop.map_or(0, |stop| stop.calls);
        let eval = stop.map_or((0, 0), |stop| stop.eval);
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
                return (count, false, 0);
            };
            let Some(return_address) = NonZeroU64::new(return_address) else {
                return (count, false, 0);
            };
            frame = FrameAddress::ReturnAddress(return_address);
            let address = return_address.get();
            // Our hooks sit between the program and CUDA, at the top and
            // again where the runtime calls the driver: never the program's.
            if (own.0..own.1).contains(&address) {
                continue;
            }
            if count == out.len() {
                return (count, true, 0);
            }
            out[count] = address;
            count += 1;
            if let Some(recorder) = recorder.as_deref_mut() {
                recorder.last_return_address_is_a_frame();
            }
            // A return address points just past its call: the eval loop
            // holds address - 1. At the outermost Python call, the rest is
            // the thread's way into Python.
            if python_calls_left > 0 && (eval.0..eval.1).contains(&address.wrapping_sub(1)) {
                python_calls_left -= 1;
                if python_calls_left == 0 {
                    return (count, false, regs.sp());
                }
            }
        }
    }
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
        let walk = capture(out, None);
        std::hint::black_box(walk)
    }

    /// Walks from one call site, stopping where `stop` says.
    #[inline(never)]
    fn walk_stopping(out: &mut [u64], stop: Option<PythonStop>) -> NativeWalk {
        let walk = capture(out, stop);
        std::hint::black_box(walk)
    }

    /// The tests that rebuild the module map and walk twice run one at a
    /// time: a rebuild between two walks makes the second a new walk.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_walk_stops_at_the_frame_that_runs_the_outermost_python_call() {
        let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        module_map::rebuild();
        std::thread::spawn(|| {
            let walk: fn(&mut [u64], Option<PythonStop>) -> NativeWalk = std::hint::black_box(walk_stopping);
            let mut frames = [[0u64; 32]; 3];
            let mut walks = Vec::new();
            let mut round = 0;
            while round < std::hint::black_box(3) {
                // The first frame outside the test binary (which is the
                // library) stands for the eval loop: walked whole, then
                // stopping there, twice (the second a copy of the first).
                let stop = (round > 0).then(|| PythonStop {
                    eval: (frames[0][0] - 1, frames[0][0]),
                    calls: 1,
                });
                walks.push(walk(&mut frames[round], stop));
                round = std::hint::black_box(round + 1);
            }
            // The thread's start and its caller, at least.
            assert!(walks[0].count >= 2, "{:?}", walks[0]);
            assert_eq!(walks[0].stopped_sp, 0);
            for stopped in &walks[1..] {
                assert_eq!(stopped.count, 1);
                assert!(!stopped.cut);
                assert!(stopped.stopped_sp > 0);
            }
            assert_eq!(walks[1], walks[2]);
            assert_eq!(frames[1][0], frames[0][0]);
            assert_eq!(frames[2][0], frames[0][0]);
            assert_eq!(frames[1][1..], [0; 31]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_walk_from_where_the_thread_walked_before_is_copied_and_finds_the_same() {
        let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
}
