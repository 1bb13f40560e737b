//! Whole native walks a thread made lately, kept by where they began, so
//! that a walk made before costs one check of the stack words that steered
//! it instead of a step per frame.
//!
//! Why: each step of a walk must wait for the one before it (where the
//! caller's frame lies depends on the step learnt for the callee's return
//! address), so a walk of 40 frames is 40 dependent loads and look-ups, a
//! microsecond on the GPU machine. Checking a kept walk is a row of loads
//! whose addresses are all known at the start, which the core issues side by
//! side. A training step repeats its allocations' call paths exactly, each
//! from the same stack pointer, step after step.
//!
//! Why a match is exact: a walk is a function of the registers it starts
//! from and of the stack words it reads (a step is fixed by its return
//! address under one generation of the module map; framehop and a learnt
//! step agree). If it starts from the same stack pointer, and every word that
//! steered it holds the value it held, it would read the same words, take
//! the same steps and find the same frames. The words that steer a walk are
//! its return addresses and the saved frame pointers that a later step used
//! (a frame-pointer step, a tentative step's check, a step framehop could
//! not be read as one of the known shapes). A frame pointer restored from
//! the stack and restored over again before any step used it steered
//! nothing: most of libtorch uses that register for data, and its saved
//! values differ from call to call. The frame pointer the walk began with
//! is compared only where a step used it before any was restored.

use crate::system::lazy_mapping::ZeroIsEmpty;
#[cfg(test)]
use crate::system::thread_box::zeroed_box;

/// The most frames a kept walk returns.
pub(crate) const WALK_FRAMES: usize = 64;
/// The most words a kept walk checks; a walk that read more is not kept.
const WALK_CHECKS: usize = 2 * WALK_FRAMES + 8;
/// Walks of a set (chosen by the stack pointer they began at).
const WAYS: usize = 4;
const SETS: usize = 32;

/// A check's address is 8-byte aligned; its lowest bit marks a word that is
/// also one of the walk's frames (a return address outside this library).
const IS_FRAME: u64 = 1;

#[derive(Clone, Copy)]
#[repr(C)]
struct Check {
    address: u64,
    value: u64,
}

/// Where a walk began, and what it was for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Start {
    /// The stack pointer at the first frame.
    pub(crate) sp: u64,
    /// The frame pointer register at the first frame.
    pub(crate) bp: u64,
    /// The module map's generation (a library loaded or unloaded since may
    /// change what a return address's step is).
    pub(crate) generation: u64,
    /// How many frames the caller wanted.
    pub(crate) depth: usize,
    /// The walk stops at the frame that runs the outermost of this many
    /// Python eval-loop calls (0: it runs to the end).
    pub(crate) python_calls: u32,
}

/// One kept walk.
#[repr(C)]
struct Walk {
    start: Start,
    /// 0 for an empty slot or one being written.
    check_count: u32,
    /// Whether `start.bp` steered the walk.
    uses_bp: bool,
    /// Whether the stack went on past `start.depth` frames.
    cut: bool,
    /// The frames' hash ([`crate::stacks::stack_cache::hash_frames`]).
    hash: [u64; 2],
    /// Where the walk stopped at Python: the stack pointer above its last
    /// frame; 0 where it ran to the end or was cut.
    stopped_sp: u64,
    checks: [Check; WALK_CHECKS],
}

/// A thread's kept walks: 282 KiB, made zeroed on the heap by a thread's
/// first walk (`system::thread_box`).
pub(crate) struct WalkMemo {
    sets: [[Walk; WAYS]; SETS],
    /// The way of each set that the next new walk takes.
    next_way: [u8; SETS],
}

// SAFETY: zeroed, every walk is empty (check_count 0) and the next ways 0.
unsafe impl ZeroIsEmpty for WalkMemo {}

fn set_of(sp: u64) -> usize {
    // Frames are 16-byte aligned; stack pointers of nearby call paths differ
    // in the low bits.
    ((sp >> 4) ^ (sp >> 9)) as usize % SETS
}

impl WalkMemo {
    /// The frames of a kept walk from `start` whose words hold what they
    /// held, written into `out`: how many, whether the stack went on, the
    /// frames' hash, and where it stopped at Python (0: it did not).
    ///
    /// # Safety
    /// Every word a kept walk from `start.sp` checks must be readable: it is,
    /// where the memo is the calling thread's own and `start.sp` is its
    /// stack pointer now (the walk read each word above that stack pointer
    /// in the same live stack).
    #[inline]
    pub(crate) unsafe fn recall(&self, start: Start, out: &mut [u64]) -> Option<(usize, bool, [u64; 2], u64)> {
        for walk in &self.sets[set_of(start.sp)] {
            let count = walk.check_count as usize;
            if count == 0
                || walk.start.sp != start.sp
                || walk.start.depth != start.depth
                || walk.start.generation != start.generation
                || walk.start.python_calls != start.python_calls
                || (walk.uses_bp && walk.start.bp != start.bp)
            {
                continue;
            }
            // Every load is issued before any is compared: their addresses
            // do not depend on each other.
            let mut differ = 0u64;
            let mut frames = 0;
            for check in &walk.checks[..count] {
                // SAFETY: the caller's promise.
                let now = unsafe { ((check.address & !7) as *const u64).read() };
                differ |= now ^ check.value;
                if check.address & IS_FRAME != 0 && frames < out.len() {
                    out[frames] = check.value;
                    frames += 1;
                }
            }
            if differ == 0 {
                return Some((frames, walk.cut, walk.hash, walk.stopped_sp));
            }
        }
        None
    }

    /// Starts keeping a walk from `start` in its set's next way, which is
    /// emptied first: until [`WalkRecorder::finish`] it matches nothing.
    pub(crate) fn record(&mut self, start: Start) -> WalkRecorder<'_> {
        let set = set_of(start.sp);
        let way = usize::from(self.next_way[set]) % WAYS;
        self.next_way[set] = ((way + 1) % WAYS) as u8;
        let walk = &mut self.sets[set][way];
        walk.check_count = 0;
        walk.start = start;
        walk.uses_bp = false;
        walk.cut = false;
        WalkRecorder {
            walk,
            count: 0,
            last_return_address: None,
            bp: BpSource::Initial,
            failed: false,
        }
    }
}

/// Where the frame pointer a walk holds came from.
#[derive(Clone, Copy)]
enum BpSource {
    /// The register the walk began with.
    Initial,
    /// Restored from this stack word, and not used yet.
    Restored(Check),
    /// Already steered by checked words.
    Checked,
}

/// A walk being kept: the walk tells it each word it reads, and how.
pub(crate) struct WalkRecorder<'a> {
    walk: &'a mut Walk,
    count: usize,
    /// The check of the last return address read.
    last_return_address: Option<usize>,
    bp: BpSource,
    failed: bool,
}

impl WalkRecorder<'_> {
    /// Adds a check; its index, or `None` when the walk cannot be kept.
    fn check(&mut self, address: u64, value: u64) -> Option<usize> {
        if self.count == WALK_CHECKS || address & 7 != 0 {
            self.failed = true;
            return None;
        }
        self.walk.checks[self.count] = Check { address, value };
        self.count += 1;
        Some(self.count - 1)
    }

    /// A return address read from `address`.
    pub(crate) fn return_address(&mut self, address: u64, value: u64) {
        self.last_return_address = self.check(address, value);
    }

    /// The last return address read is one of the walk's frames (the next
    /// in `out`; not this library's own).
    pub(crate) fn last_return_address_is_a_frame(&mut self) {
        match self.last_return_address.take() {
            Some(index) => self.walk.checks[index].address |= IS_FRAME,
            None => self.failed = true,
        }
    }

    /// The frame pointer restored from a stack word.
    pub(crate) fn frame_pointer_restored(&mut self, address: u64, value: u64) {
        self.bp = BpSource::Restored(Check { address, value });
    }

    /// A step used the frame pointer the walk holds: what it came from
    /// steers the walk.
    pub(crate) fn frame_pointer_used(&mut self) {
        match self.bp {
            BpSource::Initial => self.walk.uses_bp = true,
            BpSource::Restored(word) => {
                self.check(word.address, word.value);
            }
            BpSource::Checked => {}
        }
        self.bp = BpSource::Checked;
    }

    /// A word a step read whose use is not known: it is checked. (Such a
    /// step also uses the frame pointer, and the one it leaves comes from
    /// checked words: [`Self::frame_pointer_used`] first.)
    pub(crate) fn word_read(&mut self, address: u64, value: u64) {
        self.check(address, value);
    }

    /// The walk cannot be kept (a step that read more words than it could
    /// tell, or more frames than a kept walk holds).
    pub(crate) fn fail(&mut self) {
        self.failed = true;
    }

    /// The walk ended with `frames` frames of this hash (stopped at Python
    /// with the stack pointer `stopped_sp`, else 0): it is kept, unless it
    /// could not be told whole.
    pub(crate) fn finish(self, frames: usize, cut: bool, hash: [u64; 2], stopped_sp: u64) {
        if self.failed || frames > WALK_FRAMES || self.count == 0 {
            return;
        }
        self.walk.cut = cut;
        self.walk.hash = hash;
        self.walk.stopped_sp = stopped_sp;
        self.walk.check_count = self.count as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake stack: words at 8-byte steps from a base.
    struct Stack {
        words: Vec<u64>,
    }

    impl Stack {
        fn address(&self, index: usize) -> u64 {
            std::ptr::from_ref(&self.words[index]) as u64
        }
    }

    fn recall(memo: &WalkMemo, start: Start, out: &mut [u64]) -> Option<(usize, bool, [u64; 2], u64)> {
        // SAFETY: every test's walks check words of its own fake stack,
        // which lives through the test.
        unsafe { memo.recall(start, out) }
    }

    fn start(stack: &Stack, bp: u64) -> Start {
        Start {
            sp: stack.address(0),
            bp,
            generation: 3,
            depth: 8,
            python_calls: 0,
        }
    }

    /// Keeps a walk over `stack`: return addresses in words 1 and 3 (the
    /// first this library's own), a frame pointer restored from word 2 and
    /// restored over from word 4 unused, then one restored from word 5 that
    /// a step uses, and the return address in word 6.
    fn keep(memo: &mut WalkMemo, stack: &Stack, bp: u64) {
        let mut recorder = memo.record(start(stack, bp));
        recorder.return_address(stack.address(1), stack.words[1]);
        recorder.frame_pointer_restored(stack.address(2), stack.words[2]);
        recorder.return_address(stack.address(3), stack.words[3]);
        recorder.last_return_address_is_a_frame();
        recorder.frame_pointer_restored(stack.address(4), stack.words[4]);
        recorder.frame_pointer_restored(stack.address(5), stack.words[5]);
        recorder.frame_pointer_used();
        recorder.return_address(stack.address(6), stack.words[6]);
        recorder.last_return_address_is_a_frame();
        recorder.finish(2, false, [5, 6], 0);
    }

    #[test]
    fn a_kept_walk_is_recalled_while_the_words_that_steered_it_hold() {
        let mut memo = zeroed_box::<WalkMemo>().unwrap();
        let mut stack = Stack {
            words: vec![0, 0x1111, 0xb0, 0x2222, 0xb1, 0xb2, 0x3333, 0],
        };
        let mut out = [0u64; 8];
        assert_eq!(recall(&memo, start(&stack, 9), &mut out), None);
        keep(&mut memo, &stack, 9);
        assert_eq!(recall(&memo, start(&stack, 9), &mut out), Some((2, false, [5, 6], 0)));
        assert_eq!(out[..2], [0x2222, 0x3333]);
        // The frame pointer the walk began with never steered it, nor did
        // the words restored over unused.
        stack.words[2] = 0xdead;
        stack.words[4] = 0xbeef;
        assert_eq!(recall(&memo, start(&stack, 77), &mut out), Some((2, false, [5, 6], 0)));
        // A used frame pointer's word, or any return address, differing
        // sends the walk round again.
        for index in [1, 3, 5, 6] {
            let kept = stack.words[index];
            stack.words[index] ^= 0x40;
            assert_eq!(recall(&memo, start(&stack, 9), &mut out), None, "word {index}");
            stack.words[index] = kept;
        }
        // So does another start.
        for other in [
            Start {
                generation: 4,
                ..start(&stack, 9)
            },
            Start {
                depth: 16,
                ..start(&stack, 9)
            },
            Start {
                python_calls: 2,
                ..start(&stack, 9)
            },
            Start {
                sp: stack.address(1),
                ..start(&stack, 9)
            },
        ] {
            assert_eq!(recall(&memo, other, &mut out), None, "{other:?}");
        }
    }

    #[test]
    fn the_first_frame_pointer_counts_where_a_step_used_it_before_any_was_restored() {
        let mut memo = zeroed_box::<WalkMemo>().unwrap();
        let stack = Stack {
            words: vec![0, 0x1111, 0, 0],
        };
        let mut recorder = memo.record(start(&stack, 0x500));
        recorder.frame_pointer_used();
        recorder.return_address(stack.address(1), stack.words[1]);
        recorder.last_return_address_is_a_frame();
        recorder.finish(1, true, [7, 8], 0);
        let mut out = [0u64; 8];
        assert_eq!(
            recall(&memo, start(&stack, 0x500), &mut out),
            Some((1, true, [7, 8], 0))
        );
        assert_eq!(recall(&memo, start(&stack, 0x508), &mut out), None);
    }

    #[test]
    fn a_walk_that_could_not_be_told_whole_is_not_kept() {
        let mut memo = zeroed_box::<WalkMemo>().unwrap();
        let stack = Stack {
            words: vec![0; WALK_CHECKS + 8],
        };
        let mut out = [0u64; 8];
        let mut recorder = memo.record(start(&stack, 0));
        recorder.return_address(stack.address(1), 0);
        recorder.fail();
        recorder.finish(1, false, [0, 0], 0);
        assert_eq!(recall(&memo, start(&stack, 0), &mut out), None);
        let mut recorder = memo.record(start(&stack, 0));
        for index in 0..=WALK_CHECKS {
            recorder.word_read(stack.address(index), 0);
        }
        recorder.finish(0, false, [0, 0], 0);
        assert_eq!(recall(&memo, start(&stack, 0), &mut out), None);
    }

    #[test]
    fn a_memo_takes_the_memory_its_documents_say() {
        // 128 walks of 136 checks: 282 KiB (280 before each walk kept where
        // it stopped at Python; docs/history/performance-2026-11.md).
        assert_eq!(std::mem::size_of::<WalkMemo>().div_ceil(1024), 282);
    }

    #[test]
    fn a_set_keeps_its_latest_walks_from_one_stack_pointer() {
        let mut memo = zeroed_box::<WalkMemo>().unwrap();
        let mut stack = Stack { words: vec![0, 0, 0] };
        let mut out = [0u64; 8];
        // Five walks from one stack pointer, told apart by word 1.
        for value in 1..=5u64 {
            let mut recorder = memo.record(start(&stack, 0));
            recorder.return_address(stack.address(1), value);
            recorder.last_return_address_is_a_frame();
            recorder.finish(1, false, [value, 0], 0);
        }
        for value in 1..=5u64 {
            stack.words[1] = value;
            let found = recall(&memo, start(&stack, 0), &mut out);
            if value == 1 {
                assert_eq!(found, None, "the oldest made way");
            } else {
                assert_eq!((found, out[0]), (Some((1, false, [value, 0], 0)), value));
            }
        }
    }
}
