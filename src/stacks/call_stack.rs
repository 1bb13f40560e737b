//! The call stack of one event: native frames, Python frames, or both
//! interleaved, interned to one node id.
//!
//! The combined stack is innermost first. Native frames run up to an
//! interpreter eval frame, which is replaced by the Python frames it was
//! running, then the native frames below it, and so on: the order of
//! PyTorch's combined tracebacks, so C++ called from Python called from C++
//! reads right.

use crate::spool::recording_switch;
use crate::stacks::native_unwind::{NativeWalk, PythonStop, NO_WALK};
use crate::stacks::python_frames::{self, PyCapture, PyFrame};
use crate::stacks::stack_cache::{self, StackCache};
use crate::stacks::{module_map, native_unwind, stack_table};
use crate::system::lazy_mapping::ZeroIsEmpty;
use crate::system::thread_block::{self, ThreadBlock};
use crate::system::thread_box::ThreadBox;
use cudatrace_events::recording_switch::StackSetting;
use cudatrace_events::stacks::frame_kind;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// Which frames events carry (`CUDATRACE_STACKS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum StackMode {
    /// No stacks.
    None = 0,
    /// Native frames only.
    Native = 1,
    /// Python frames only.
    Python = 2,
    /// Both, interleaved.
    All = 3,
}

/// Deepest stack a buffer holds; `CUDATRACE_MAX_DEPTH` is capped to it.
pub(crate) const MAX_FRAMES: usize = 256;
/// Default of `CUDATRACE_MAX_DEPTH`.
pub(crate) const DEFAULT_DEPTH: u32 = 64;

#[unsafe(link_section = "cudatrace_hot")]
static MODE: AtomicU8 = AtomicU8::new(StackMode::All as u8);
#[unsafe(link_section = "cudatrace_hot")]
static DEPTH: AtomicU32 = AtomicU32::new(DEFAULT_DEPTH);

/// Keeps `CUDATRACE_STACKS` and `CUDATRACE_MAX_DEPTH` (from the library
/// constructor); `None`, unset or a value not understood, keeps the default.
pub(crate) fn configure(stacks: Option<StackSetting>, max_depth: Option<u32>) {
    if let Some(setting) = stacks {
        // The setting's codes are the modes'.
        MODE.store(setting as u8, Ordering::Relaxed);
    }
    if let Some(depth) = max_depth {
        DEPTH.store(depth.min(MAX_FRAMES as u32), Ordering::Relaxed);
    }
}

/// The stack setting in force: the job's recording switch may replace
/// the one the process started with (`cudatrace resume --stacks`).
fn mode() -> StackMode {
    let code = recording_switch::stack_setting().unwrap_or_else(|| MODE.load(Ordering::Relaxed));
    match code {
        0 => StackMode::None,
        1 => StackMode::Native,
        2 => StackMode::Python,
        _ => StackMode::All,
    }
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Frame {
    kind: u8,
    value: u64,
    offset: u32,
}

/// The last stack this thread interned, outermost first, with its node ids:
/// consecutive events from one call site share most of their frames, which
/// then need no table lookups.
struct LastStack {
    frames: [Frame; MAX_FRAMES + 2],
    ids: [u32; MAX_FRAMES + 2],
    len: usize,
    /// The node the last stack's outermost frame hangs from: 0, or the
    /// thread's way into Python.
    base: u32,
    /// The thread's ways into Python (see [`thread_base`]), newest first.
    bases: [ThreadBase; BASES_KEPT],
}

/// Ways into Python a thread keeps: a thread may run Python from more than
/// one native caller (a callback from C++ beside its own code).
const BASES_KEPT: usize = 4;

/// The native frames below a thread's outermost Python call, walked once
/// and interned: `id` is their innermost node (0: an empty slot). They are
/// known again by the stack pointer above the frame that runs that call,
/// and the frame's return address.
#[derive(Clone, Copy, Default)]
struct ThreadBase {
    sp: u64,
    address: u64,
    id: u32,
}

/// The buffers one capture works in, kept per thread so that no capture
/// clears kilobytes of stack first.
struct Scratch {
    native: [u64; MAX_FRAMES],
    python: [PyFrame; MAX_FRAMES],
    frames: [Frame; MAX_FRAMES + 2],
}

// SAFETY: plain arrays of integers and of structs of integers and a
// bool, all of which are valid as zero bytes. (On the heap, made by the
// thread's first capture: `system::thread_box`.)
unsafe impl ZeroIsEmpty for Scratch {}

// SAFETY: arrays of integers and a length: zero bytes are an empty stack.
unsafe impl ZeroIsEmpty for LastStack {}

thread_local! {
    static SCRATCH: UnsafeCell<ThreadBox<Scratch>> = const { UnsafeCell::new(ThreadBox::new()) };
    static STACK_CACHE: UnsafeCell<ThreadBox<StackCache>> = const { UnsafeCell::new(ThreadBox::new()) };
    // In a mapping too (5 KiB): thread-local storage is carved out of every
    // thread's stack.
    static LAST: UnsafeCell<ThreadBox<LastStack>> = const { UnsafeCell::new(ThreadBox::new()) };
}

/// Captures, interns and publishes the caller's stack; returns its
/// innermost node id, or 0 when stacks are off or none could be taken.
/// `known_caller`, when not 0, is the return address of the outermost hook
/// the call passed through (the program's call into the runtime): with
/// `--stacks none` it is the owner, and no unwinding is needed.
#[inline(never)]
pub(crate) fn capture(known_caller: u64) -> u32 {
    let mode = mode();
    // A hook that runs inside another hook on this thread (a signal handler
    // allocating) records no stack rather than sharing the buffers.
    // (The thread block's `capturing_stack` is this module's.)
    let block = thread_block::current();
    if block.capturing_stack.replace(true) {
        return 0;
    }
    let id = if mode == StackMode::None {
        immediate_caller(known_caller, block)
    } else {
        SCRATCH
            .try_with(|scratch| {
                // SAFETY: this thread's own buffers; `capturing_stack` keeps a capture
                // from running inside another on the same thread.
                let scratch = unsafe { &mut *scratch.get() }.get_or_make()?;
                Some(capture_unguarded(mode, scratch))
            })
            .ok()
            .flatten()
            .unwrap_or(0)
    };
    block.capturing_stack.set(false);
    id
}

/// Whether stacks are off (`--stacks none`): then only the caller of the
/// outermost hook is wanted, which the runtime hooks find cheaply.
#[inline]
pub(crate) fn only_callers() -> bool {
    mode() == StackMode::None
}

/// Without stacks, events still name the code that called CUDA, so that
/// each allocation has an owner: one node, the innermost return address
/// outside this library, the driver and the runtime.
///
/// The thread block's `last_owners` remember the last two owners found from
/// a known caller, so that a loop of allocations and frees asks neither the
/// module map nor the stack table again. An entry is good only under the
/// module map it was made in (a library loaded since may change whose code
/// an address is); a forked child, whose stack table starts empty, forgets
/// them (`thread_block::forget_parent`).
fn immediate_caller(known_caller: u64, block: &ThreadBlock) -> u32 {
    let Some(map) = module_map::current() else {
        return 0;
    };
    let map_key = std::ptr::from_ref(map) as usize;
    if known_caller != 0 {
        for memo in &block.last_owners {
            let (id, memo_map, address) = memo.get();
            if address == known_caller && memo_map == map_key && id != 0 {
                return id;
            }
        }
    }
    let own = map.own_range;
    let owner = if known_caller != 0 && !map.in_cuda_library(known_caller) && !(own.0..own.1).contains(&known_caller) {
        Some(known_caller)
    } else {
        let mut native = [0u64; 8];
        let count = native_unwind::capture(&mut native, None).count;
        native[..count]
            .iter()
            .copied()
            .find(|&address| !map.in_cuda_library(address))
    };
    let Some(address) = owner else {
        return 0;
    };
    let (id, _) = intern_nodes(
        &[Frame {
            kind: frame_kind::NATIVE,
            value: address,
            offset: 0,
        }],
        0,
    );
    if known_caller == address && id != 0 {
        // The older entry makes way.
        block.last_owners[1].set(block.last_owners[0].get());
        block.last_owners[0].set((id, map_key, address));
    }
    id
}

fn capture_unguarded(mode: StackMode, scratch: &mut Scratch) -> u32 {
    let depth = DEPTH.load(Ordering::Relaxed) as usize;
    let Scratch { native, python, frames } = scratch;
    let python_capture = if mode == StackMode::Native {
        PyCapture::NotPython
    } else {
        python_frames::capture(&mut python[..depth])
    };
    let eval = python_frames::eval_range();
    let mut walk = if mode == StackMode::Python {
        NO_WALK
    } else {
        let stop = python_stop(mode, &python_capture, &python[..], eval);
        native_unwind::capture(&mut native[..depth], stop)
    };
    // A walk stopped at the outermost Python call hangs from the frames
    // below it: the thread's way into Python, walked once.
    let base = if walk.stopped_sp == 0 {
        0
    } else {
        match thread_base(walk.stopped_sp, native[walk.count - 1]) {
            Some(id) => id,
            None => walk_base(native, frames, &mut walk, depth),
        }
    };
    let key = stack_key(mode, depth, eval, &walk, base, &python_capture, &python[..]);
    if let Some(id) = with_stack_cache(|cache| cache.get(key)).flatten() {
        return id;
    }
    let mut count = combine(
        &native[..walk.count],
        &python_capture,
        &python[..],
        eval,
        mode,
        &mut frames[..depth],
    );
    let cut = walk.cut || count == depth || matches!(python_capture, PyCapture::Frames { cut: true, .. });
    if cut {
        frames[count] = Frame {
            kind: frame_kind::TRUNCATED,
            ..Frame::default()
        };
        count += 1;
    }
    if python_capture == PyCapture::Unavailable {
        frames[count] = Frame {
            kind: frame_kind::NO_PYTHON,
            ..Frame::default()
        };
        count += 1;
    }
    let (id, whole) = intern_nodes(&frames[..count], base);
    if whole && id != 0 {
        with_stack_cache(|cache| cache.put(key, id));
    }
    id
}

/// `CUDATRACE_TEST_WHOLE_WALKS`: walks run to the stack's end (tests only;
/// a release build has no such knob, nor its name).
#[cfg(feature = "testing")]
static WHOLE_WALKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Reads `CUDATRACE_TEST_WHOLE_WALKS` (tests only). Called once, when the
/// library loads; nothing without the `testing` feature.
pub(crate) fn configure_test_whole_walks() {
    #[cfg(feature = "testing")]
    {
        // SAFETY: read at once, in the library constructor.
        let value = unsafe { crate::system::environment::value(&cudatrace_events::settings::TEST_WHOLE_WALKS) };
        WHOLE_WALKS.store(value == Some(b"1".as_slice()), Ordering::Relaxed);
    }
}

/// Where the native walk may stop: with all stacks, at the frame that runs
/// the outermost Python call, when every Python frame was read (so that
/// the walk and [`combine`] count the same calls).
fn python_stop(mode: StackMode, capture: &PyCapture, python: &[PyFrame], eval: (u64, u64)) -> Option<PythonStop> {
    #[cfg(feature = "testing")]
    if WHOLE_WALKS.load(Ordering::Relaxed) {
        return None;
    }
    let PyCapture::Frames { count, cut: false } = *capture else {
        return None;
    };
    if mode != StackMode::All || count == 0 || eval.0 >= eval.1 {
        return None;
    }
    // As `combine` reads them: a call's frames end at one that ends a
    // segment, and the last call ends with the last frame.
    let ended = python[..count - 1].iter().filter(|frame| frame.ends_segment).count();
    Some(PythonStop {
        eval,
        calls: ended as u32 + 1,
    })
}

/// The thread's way into Python below the frame that runs its outermost
/// Python call (known by the stack pointer above it and its return
/// address), if walked before.
fn thread_base(sp: u64, address: u64) -> Option<u32> {
    LAST.try_with(|last| {
        // SAFETY: this thread's own cache; `capture` is not re-entered on a thread.
        let last = unsafe { &mut *last.get() }.made()?;
        last.bases
            .iter()
            .find(|base| base.id != 0 && base.sp == sp && base.address == address)
            .map(|base| base.id)
    })
    .ok()
    .flatten()
}

/// The first walk of a way into Python: walks the whole stack (as deep as a
/// buffer holds), interns the frames below the outermost Python call and
/// keeps them for the thread; returns their innermost node. Where that
/// cannot be done, `walk` becomes the whole walk, as without stopping.
/// (`below` is the thread's buffer of combined frames, free until the
/// stack is combined: a hook may run on a small signal stack, and an array
/// here would be part of every capture's frame.)
#[cold]
#[inline(never)]
fn walk_base(native: &mut [u64; MAX_FRAMES], below: &mut [Frame], walk: &mut NativeWalk, depth: usize) -> u32 {
    let (sp, address, stopped_count) = (walk.stopped_sp, native[walk.count - 1], walk.count);
    let whole = native_unwind::capture(&mut native[..], None);
    let same_start = whole.count >= stopped_count && native[stopped_count - 1] == address;
    let mut count = 0;
    if same_start {
        for &value in &native[stopped_count..whole.count] {
            below[count] = Frame {
                kind: frame_kind::NATIVE,
                value,
                offset: 0,
            };
            count += 1;
        }
        if whole.cut {
            below[count] = Frame {
                kind: frame_kind::TRUNCATED,
                ..Frame::default()
            };
            count += 1;
        }
    }
    let (id, interned) = if same_start && count > 0 {
        intern_each(&below[..count], 0)
    } else {
        (0, false)
    };
    if !interned || id == 0 {
        // As a walk that never stopped: the frames the depth allows.
        let kept = whole.count.min(depth);
        *walk = NativeWalk {
            count: kept,
            cut: whole.cut || whole.count > depth,
            hash: stack_cache::hash_frames(native[..kept].iter().map(|&address| (0, address, 0))),
            stopped_sp: 0,
        };
        return 0;
    }
    let _ = LAST.try_with(|last| {
        // SAFETY: as in `thread_base`.
        if let Some(last) = unsafe { &mut *last.get() }.get_or_make() {
            last.bases.copy_within(..BASES_KEPT - 1, 1);
            last.bases[0] = ThreadBase { sp, address, id };
        }
    });
    id
}

/// A 128-bit key of the stack [`combine`] makes from these parts (and of
/// its markers), without making it: the native frames by their walk's hash
/// (kept with a kept walk), the Python frames one by one (a handful), and
/// everything else that shapes the combination.
fn stack_key(
    mode: StackMode,
    depth: usize,
    eval: (u64, u64),
    walk: &NativeWalk,
    base: u32,
    python_capture: &PyCapture,
    python: &[PyFrame],
) -> [u64; 2] {
    let (python_state, python) = match *python_capture {
        PyCapture::NotPython => (0, &python[..0]),
        PyCapture::Unavailable => (1, &python[..0]),
        PyCapture::Frames { count, cut } => (2 + u32::from(cut), &python[..count]),
    };
    let shape = [
        (0xf0, walk.hash[0], walk.count as u32),
        (
            0xf1,
            walk.hash[1],
            u32::from(walk.cut) | (mode as u32) << 1 | python_state << 3,
        ),
        (0xf2, eval.0, depth as u32),
        (0xf3, eval.1, python.len() as u32),
        (0xf4, u64::from(base), 0),
    ];
    let frames = python.iter().map(|frame| {
        (
            frame_kind::PYTHON | u8::from(frame.ends_segment) << 7,
            frame.code,
            frame.offset,
        )
    });
    stack_cache::hash_frames(shape.into_iter().chain(frames))
}

/// Runs `f` on the thread's stack cache, made on first use; `None` where
/// its memory could not be had, or the thread is exiting.
fn with_stack_cache<R>(f: impl FnOnce(&mut StackCache) -> R) -> Option<R> {
    STACK_CACHE
        .try_with(|cache| {
            // SAFETY: this thread's own cache; `capture` is not re-entered on a thread.
            unsafe { &mut *cache.get() }.get_or_make().map(f)
        })
        .ok()
        .flatten()
}

/// Frames being combined into a fixed buffer.
struct Combined<'a> {
    out: &'a mut [Frame],
    count: usize,
    python: &'a [PyFrame],
    next_python: usize,
}

impl Combined<'_> {
    fn push(&mut self, frame: Frame) {
        if self.count < self.out.len() {
            self.out[self.count] = frame;
            self.count += 1;
        }
    }

    /// The Python frames one eval-loop call was running.
    fn push_python_segment(&mut self) {
        while let Some(&frame) = self.python.get(self.next_python) {
            self.next_python += 1;
            self.push(Frame {
                kind: frame_kind::PYTHON,
                value: frame.code,
                offset: frame.offset,
            });
            if frame.ends_segment {
                break;
            }
        }
    }

    fn python_left(&self) -> bool {
        self.next_python < self.python.len()
    }
}

/// Interleaves native and Python frames into `out`; returns how many.
fn combine(
    native: &[u64],
    python_capture: &PyCapture,
    python: &[PyFrame],
    eval: (u64, u64),
    mode: StackMode,
    out: &mut [Frame],
) -> usize {
    let python = match *python_capture {
        PyCapture::Frames { count, .. } => &python[..count],
        _ => &python[..0],
    };
    let mut combined = Combined {
        out,
        count: 0,
        python,
        next_python: 0,
    };
    if mode != StackMode::Python {
        for &address in native {
            // A return address points just past the call; the eval function
            // contains address - 1.
            let lookup = address.wrapping_sub(1);
            if eval.0 < eval.1 && (eval.0..eval.1).contains(&lookup) && combined.python_left() {
                combined.push_python_segment();
            } else {
                combined.push(Frame {
                    kind: frame_kind::NATIVE,
                    value: address,
                    offset: 0,
                });
            }
        }
    }
    // Python frames the native walk did not reach (an unwind cut short, or
    // Python frames only).
    while combined.python_left() {
        combined.push_python_segment();
    }
    combined.count
}

/// Interns `frames` node by node from the outermost in, hanging from the
/// node `base` (0: none), reusing the ids of the thread's previous stack
/// where the outer frames agree. Returns the innermost node, and whether
/// every frame got one (a full table stops it).
fn intern_nodes(frames: &[Frame], base: u32) -> (u32, bool) {
    LAST.try_with(|last| {
        // SAFETY: this thread's own cache; `capture` is not re-entered on a thread.
        let Some(last) = (unsafe { &mut *last.get() }).get_or_make() else {
            // No table for this thread: every frame is interned afresh.
            return intern_each(frames, base);
        };
        if last.base != base {
            last.len = 0;
            last.base = base;
        }
        let mut parent = base;
        let mut same_so_far = true;
        for (depth, frame) in frames.iter().rev().enumerate() {
            if same_so_far && depth < last.len && last.frames[depth] == *frame {
                parent = last.ids[depth];
                continue;
            }
            same_so_far = false;
            let Some(id) = intern_frame(frame, parent) else {
                last.len = depth;
                return (parent, false);
            };
            last.frames[depth] = *frame;
            last.ids[depth] = id;
            parent = id;
        }
        last.len = frames.len();
        (parent, true)
    })
    .unwrap_or((0, false))
}

/// Interns `frames` from the outermost in, hanging from `base`, without the
/// previous stack.
fn intern_each(frames: &[Frame], base: u32) -> (u32, bool) {
    let mut parent = base;
    for frame in frames.iter().rev() {
        let Some(id) = intern_frame(frame, parent) else {
            return (parent, false);
        };
        parent = id;
    }
    (parent, true)
}

fn intern_frame(frame: &Frame, parent: u32) -> Option<u32> {
    if frame.kind == frame_kind::PYTHON {
        python_frames::describe_code_once(frame.value);
    }
    let (id, added) = stack_table::intern(frame.kind, frame.value, parent, frame.offset)?;
    if added {
        stack_table::write_node(id, frame.kind, frame.value, parent, frame.offset);
    }
    Some(id)
}

/// In a forked child: the parent's ids mean nothing in the child's spool.
pub(crate) fn forget_parent_stacks() {
    let _ = LAST.try_with(|last| {
        // SAFETY: the child has only this thread.
        if let Some(last) = unsafe { &mut *last.get() }.made() {
            last.len = 0;
            last.base = 0;
            last.bases = [ThreadBase::default(); BASES_KEPT];
        }
    });
    let _ = STACK_CACHE.try_with(|cache| {
        // SAFETY: as above.
        if let Some(cache) = unsafe { &mut *cache.get() }.made() {
            cache.clear();
        }
    });
    stack_table::forget_parent_table();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(code: u64, ends_segment: bool) -> PyFrame {
        PyFrame {
            code,
            offset: 2,
            ends_segment,
        }
    }

    #[test]
    fn python_frames_replace_the_eval_frames_that_ran_them() {
        // native: c_inner, eval(#1), c_middle, eval(#2), main
        let eval = (0x5000, 0x6000);
        let native = [0x1001, 0x5100, 0x2001, 0x5200, 0x3001];
        let python = [py(0xa, false), py(0xb, true), py(0xc, true)];
        let capture = PyCapture::Frames { count: 3, cut: false };
        let mut out = [Frame::default(); 16];
        let n = combine(&native, &capture, &python, eval, StackMode::All, &mut out);
        let got: Vec<(u8, u64)> = out[..n].iter().map(|f| (f.kind, f.value)).collect();
        use frame_kind::{NATIVE as N, PYTHON as P};
        assert_eq!(
            got,
            vec![(N, 0x1001), (P, 0xa), (P, 0xb), (N, 0x2001), (P, 0xc), (N, 0x3001)]
        );
    }

    #[test]
    fn python_frames_the_unwinder_did_not_reach_go_outermost_and_python_mode_drops_native_frames() {
        let python = [py(0xa, true), py(0xb, true)];
        let capture = PyCapture::Frames { count: 2, cut: false };
        let mut out = [Frame::default(); 16];
        let n = combine(&[0x1001], &capture, &python, (0x5000, 0x6000), StackMode::All, &mut out);
        assert_eq!(
            out[..n].iter().map(|f| f.value).collect::<Vec<_>>(),
            vec![0x1001, 0xa, 0xb]
        );
        let n = combine(
            &[0x1001],
            &capture,
            &python,
            (0x5000, 0x6000),
            StackMode::Python,
            &mut out,
        );
        assert_eq!(out[..n].iter().map(|f| f.value).collect::<Vec<_>>(), vec![0xa, 0xb]);
    }

    /// Everything [`stack_key`] takes, to vary one part at a time.
    #[derive(Clone, Copy)]
    struct KeyParts {
        mode: StackMode,
        depth: usize,
        eval: (u64, u64),
        walk: NativeWalk,
        base: u32,
        capture: PyCapture,
        python: [PyFrame; 3],
    }

    impl KeyParts {
        fn key(&self) -> [u64; 2] {
            stack_key(
                self.mode,
                self.depth,
                self.eval,
                &self.walk,
                self.base,
                &self.capture,
                &self.python,
            )
        }
    }

    #[test]
    fn the_stack_key_tells_apart_everything_that_shapes_the_combined_stack() {
        let base = KeyParts {
            mode: StackMode::All,
            depth: 64,
            eval: (0x5000, 0x6000),
            walk: NativeWalk {
                count: 3,
                cut: false,
                hash: [11, 12],
                stopped_sp: 0,
            },
            base: 0,
            capture: PyCapture::Frames { count: 2, cut: false },
            python: [py(0xa, false), py(0xb, true), py(0xc, true)],
        };
        assert_eq!(base.key(), base.key());
        let variations: [fn(&mut KeyParts); 13] = [
            |parts| parts.mode = StackMode::Native,
            |parts| parts.depth = 32,
            |parts| parts.eval.1 = 0x7000,
            |parts| parts.walk.cut = true,
            |parts| parts.walk.count = 2,
            |parts| parts.walk.hash[1] = 13,
            |parts| parts.capture = PyCapture::Frames { count: 2, cut: true },
            |parts| parts.capture = PyCapture::Frames { count: 1, cut: false },
            |parts| parts.capture = PyCapture::Unavailable,
            |parts| parts.capture = PyCapture::NotPython,
            |parts| parts.python[0].ends_segment = true,
            |parts| parts.python[1].offset = 4,
            |parts| parts.base = 7,
        ];
        for (i, vary) in variations.iter().enumerate() {
            let mut other = base;
            vary(&mut other);
            assert_ne!(other.key(), base.key(), "variation {i}");
        }
        // Frames past the capture's count do not count.
        let mut past_the_count = base;
        past_the_count.python[2] = py(0xd, false);
        assert_eq!(past_the_count.key(), base.key());
    }

    #[test]
    fn stacks_sharing_outer_frames_share_their_nodes() {
        let frame = |value| Frame {
            kind: frame_kind::NATIVE,
            value,
            offset: 0,
        };
        let a = intern_nodes(&[frame(0x11), frame(0x22), frame(0x33)], 0).0;
        let b = intern_nodes(&[frame(0x44), frame(0x22), frame(0x33)], 0).0;
        let again = intern_nodes(&[frame(0x11), frame(0x22), frame(0x33)], 0).0;
        assert_ne!(a, b);
        assert_eq!(a, again);
        // From another thread (no cache), the same frames give the same id.
        let elsewhere = std::thread::spawn(move || intern_nodes(&[frame(0x11), frame(0x22), frame(0x33)], 0).0)
            .join()
            .unwrap();
        assert_eq!(elsewhere, a);
    }

    #[test]
    fn a_stack_hanging_from_a_base_is_the_whole_stack() {
        let frame = |value| Frame {
            kind: frame_kind::NATIVE,
            value,
            offset: 0,
        };
        let whole = intern_nodes(&[frame(0x71), frame(0x72), frame(0x73), frame(0x74)], 0).0;
        // The two outer frames interned once as a base, the inner two on it:
        // the same node, whatever the thread's previous stack was.
        let base = intern_each(&[frame(0x73), frame(0x74)], 0).0;
        assert_eq!(intern_nodes(&[frame(0x71), frame(0x72)], base).0, whole);
        assert_eq!(
            intern_nodes(&[frame(0x71), frame(0x72)], 0).0,
            intern_each(&[frame(0x71), frame(0x72)], 0).0
        );
        assert_eq!(intern_nodes(&[frame(0x71), frame(0x72)], base).0, whole);
    }

    #[test]
    fn the_walk_stops_after_as_many_python_calls_as_combine_reads() {
        let eval = (0x5000, 0x6000);
        let frames = PyCapture::Frames { count: 3, cut: false };
        let python = [py(0xa, false), py(0xb, true), py(0xc, false)];
        // Two calls: [a, b] then [c] (the last call ends with the last frame).
        let stop = python_stop(StackMode::All, &frames, &python, eval);
        assert_eq!(stop, Some(PythonStop { eval, calls: 2 }));
        let native = [0x100, 0x5010, 0x200, 0x5020];
        let mut out = [Frame::default(); 8];
        let count = combine(&native, &frames, &python, eval, StackMode::All, &mut out);
        let kinds: Vec<u8> = out[..count].iter().map(|f| f.kind).collect();
        let p = frame_kind::PYTHON;
        let n = frame_kind::NATIVE;
        assert_eq!(kinds, vec![n, p, p, n, p]);
        // No stop where not every Python frame was read, nor without both kinds.
        let cut = PyCapture::Frames { count: 3, cut: true };
        assert_eq!(python_stop(StackMode::All, &cut, &python, eval), None);
        assert_eq!(python_stop(StackMode::Native, &frames, &python, eval), None);
        assert_eq!(
            python_stop(StackMode::All, &PyCapture::Unavailable, &python, eval),
            None
        );
        assert_eq!(python_stop(StackMode::All, &frames, &python, (0, 0)), None);
    }
}
