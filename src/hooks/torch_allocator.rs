//! The door into PyTorch's caching allocator: a trace tracker attached from
//! inside the process, with no Python and no change to the program, so
//! that each tensor becomes a record.
//!
//! PyTorch's `DeviceCachingAllocator` calls every attached
//! `AllocatorTraceTracker` (a `std::function<void(const TraceEntry&)>`) for
//! each action, under the device's lock, whether or not its own history is
//! recording. Attaching one takes four steps, each checked:
//!
//! 1. **Resolve** (at a cold point where the loader lock may be taken: a
//!    `dlsym`, `cuGetProcAddress` or `cuInit` after a library was loaded):
//!    find `libc10_cuda.so`, read the PyTorch version from the package's
//!    `version.py`, and only for a version whose layout is known read the
//!    allocator object, the native allocator's vtable and its methods from
//!    the file's symbol tables (the methods are local symbols).
//! 2. **Attach** (at the first allocation hook after that): the allocator
//!    object's vtable must be the native caching allocator's, whose slot
//!    holds the attach method where the known layout puts it (the
//!    `cudaMallocAsync` backend's attach throws a C++ exception, which must
//!    never cross our frames), and it must be initialised. Then the tracker
//!    is passed as a C++ caller passes a by-value object with a destructor:
//!    a pointer to our temporary, destroyed by us after the call.
//! 3. **Confirm**: PyTorch's first segment action must be the driver call
//!    this thread's hook just recorded (address and size). A tracker
//!    cannot be detached, so on a mismatch it turns itself off for good and
//!    the trace says why; the run carries on at segment level.
//! 4. **Record**: each action after that is one record, written without an
//!    allocation, a lock or a driver call.
//!
//! ## Lock order
//! Attaching takes every device allocator's (recursive) lock, and the
//! allocation hook that attaches usually runs under one of them: PyTorch
//! calls `cudaMalloc` holding its device's lock. That is safe because:
//! - the attaching thread holds no lock of ours and not the loader lock
//!   (symbols were resolved earlier, at a cold point);
//! - the lock it may already hold is recursive, so taking it again is fine;
//! - the tracker, which runs under an allocator lock, never waits on
//!   anything of ours: it writes one record into the lock-free spool;
//! - the one thread that attaches is chosen by a compare-and-swap; the
//!   others go on at once without waiting for it.
//!
//! A thread holding device 1's lock while another attaches and waits for
//! that lock simply finishes its own allocation first; it never waits on
//! the attaching thread.

use crate::hooks::support::prepare_event;
use crate::record::tensors::{self, TensorAction};
use crate::stacks::module_map;
use crate::system::cxx_function::{AnyData, StdFunction};
use crate::system::elf_symbols::{symbol_values, SymbolName};
use crate::system::tracing_switch::{guarded, tracing_on};
use cudatrace_events::tensors::{pool_word, reason, status, version_word, Action};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Where tracking stands in this process.
mod state {
    /// `libc10_cuda.so` not seen yet: look again at the next cold point.
    pub(crate) const NOT_FOUND: u8 = 0;
    /// Resolved: attach at the next allocation.
    pub(crate) const READY: u8 = 1;
    /// One thread is attaching.
    pub(crate) const ATTACHING: u8 = 2;
    /// Attached; waiting for the first segment action to confirm the layout.
    pub(crate) const ATTACHED: u8 = 3;
    /// Confirmed: every action is recorded.
    pub(crate) const CONFIRMED: u8 = 4;
    /// Off, with a reason still to write into the trace.
    pub(crate) const OFF_UNREPORTED: u8 = 5;
    /// Off for good.
    pub(crate) const OFF: u8 = 6;
    /// One thread is resolving; others leave it be.
    pub(crate) const RESOLVING: u8 = 7;
}

#[unsafe(link_section = "cudatrace_hot")]
static STATE: AtomicU8 = AtomicU8::new(state::NOT_FOUND);
/// Why tracking is off (a `cudatrace_events::tensors::reason`).
static OFF_REASON: AtomicU64 = AtomicU64::new(0);
/// PyTorch's version, as a `version_word`.
static VERSION: AtomicU64 = AtomicU64::new(0);
/// Actions seen before the layout was confirmed.
static NOT_RECORDED: AtomicU64 = AtomicU64::new(0);
/// A forked child of a confirmed parent: its spool has yet to say so.
#[unsafe(link_section = "cudatrace_hot")]
static CONFIRMED_UNREPORTED: AtomicBool = AtomicBool::new(false);

/// Addresses resolved from `libc10_cuda.so`, absolute.
static ALLOCATOR_SLOT: AtomicUsize = AtomicUsize::new(0);
static NATIVE_VTABLE: AtomicUsize = AtomicUsize::new(0);
static ATTACH_METHOD: AtomicUsize = AtomicUsize::new(0);
static INITIALIZED_METHOD: AtomicUsize = AtomicUsize::new(0);

/// A layout of `TraceEntry` and of the allocator's vtable, for the PyTorch
/// versions it was read from.
struct Layout {
    /// (major, minor) versions with this layout.
    versions: &'static [(u8, u8)],
    /// Index of `attachAllocatorTraceTracker` past the vtable's address point.
    attach_slot: usize,
    /// Offsets in `TraceEntry` of: action (`int`), device (`int8_t`),
    /// address, stream, size, the pool's two words.
    action: usize,
    device: usize,
    address: usize,
    stream: usize,
    size: usize,
    pool: usize,
}

/// PyTorch 2.11's layout, read from the installed wheel's headers and
/// library (`tests/gpu/probes/torch_allocator.sh`): `TraceEntry` is 136
/// bytes, `action_` at 0, `device_` at 4, `addr_` at 8, `context_` at 16,
/// `stream_` at 32, `size_` at 40, `mempool_` at 48, `time_` at 64, two
/// strings at 72 and 104.
const LAYOUT_2_11: Layout = Layout {
    versions: &[(2, 11)],
    attach_slot: 44,
    action: 0,
    device: 4,
    address: 8,
    stream: 32,
    size: 40,
    pool: 48,
};

const LAYOUTS: &[&Layout] = &[&LAYOUT_2_11];

/// The layout in use once resolved (an index into [`LAYOUTS`]).
#[unsafe(link_section = "cudatrace_hot")]
static LAYOUT: AtomicUsize = AtomicUsize::new(0);

const ALLOCATOR_OBJECT: &str = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";
const NATIVE_VTABLE_SYMBOL: &str = "_ZTVN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE";
const ATTACH_PREFIX: &str =
    "_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator27attachAllocatorTraceTrackerE";
const INITIALIZED_SYMBOL: &str = "_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator11initializedEv";

/// `CUDATRACE_TENSORS=off`: the allocator is left alone, and a process
/// that uses it says so in the trace.
static TURNED_OFF: AtomicBool = AtomicBool::new(false);

/// Keeps `CUDATRACE_TENSORS` (from the library constructor): `off` turns
/// tracking off.
pub(crate) fn configure(tensors: bool) {
    if !tensors {
        TURNED_OFF.store(true, Ordering::Relaxed);
    }
}

/// Forgets why tracking is off once that has gone into the trace: a forked
/// child writes its own spool, which must say it too.
pub(crate) fn forget_parent() {
    match STATE.load(Ordering::Relaxed) {
        state::OFF if OFF_REASON.load(Ordering::Relaxed) != 0 => STATE.store(state::OFF_UNREPORTED, Ordering::Relaxed),
        // The tracker PyTorch keeps is the child's too.
        state::CONFIRMED => CONFIRMED_UNREPORTED.store(true, Ordering::Relaxed),
        // The parent's resolving thread is gone: resolve again.
        state::RESOLVING => STATE.store(state::NOT_FOUND, Ordering::Relaxed),
        _ => {}
    }
}

fn turn_off(why: u64) {
    OFF_REASON.store(why, Ordering::Relaxed);
    STATE.store(state::OFF_UNREPORTED, Ordering::Release);
}

/// Step 1, at a cold point, after the module map was refreshed: finds
/// `libc10_cuda.so` if it has been loaded, and resolves what attaching
/// needs. Reads a file and allocates.
pub(crate) fn resolve_if_loaded() {
    // One resolver at a time: a second one finishing late would set a
    // state the first one's attach has moved past.
    if !tracing_on()
        || STATE
            .compare_exchange(state::NOT_FOUND, state::RESOLVING, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let Some((base, path)) = loaded_object("libc10_cuda.so") else {
        STATE.store(state::NOT_FOUND, Ordering::Release);
        return;
    };
    let Some((major, minor, patch)) = installed_version(&path) else {
        turn_off(reason::UNKNOWN_VERSION);
        return;
    };
    VERSION.store(version_word(major, minor, patch), Ordering::Relaxed);
    if TURNED_OFF.load(Ordering::Relaxed) {
        turn_off(reason::TURNED_OFF);
        return;
    }
    let Some(layout) = LAYOUTS.iter().position(|l| l.versions.contains(&(major, minor))) else {
        turn_off(reason::UNKNOWN_VERSION);
        return;
    };
    let wanted = [
        SymbolName::Exact(ALLOCATOR_OBJECT),
        SymbolName::Exact(NATIVE_VTABLE_SYMBOL),
        SymbolName::Prefix(ATTACH_PREFIX),
        SymbolName::Exact(INITIALIZED_SYMBOL),
    ];
    let values = match symbol_values(&path, &wanted) {
        Ok(values) => values,
        Err(_) => {
            turn_off(reason::SYMBOLS_MISSING);
            return;
        }
    };
    let [Some(object), Some(vtable), Some(attach), Some(initialized)] = values[..] else {
        turn_off(reason::SYMBOLS_MISSING);
        return;
    };
    let absolute = |value: u64| base.wrapping_add(value as usize);
    ALLOCATOR_SLOT.store(absolute(object), Ordering::Relaxed);
    // The vptr holds the address point: past the offset-to-top and RTTI words.
    NATIVE_VTABLE.store(absolute(vtable) + 16, Ordering::Relaxed);
    ATTACH_METHOD.store(absolute(attach), Ordering::Relaxed);
    INITIALIZED_METHOD.store(absolute(initialized), Ordering::Relaxed);
    LAYOUT.store(layout, Ordering::Relaxed);
    STATE.store(state::READY, Ordering::Release);
}

/// The load bias and path of the loaded object whose file name is `name`,
/// from the module map: it reads the loader's list as debuggers do, without
/// the loader lock, which a forked child may have inherited held.
fn loaded_object(name: &str) -> Option<(usize, PathBuf)> {
    let map = module_map::current()?;
    map.modules
        .iter()
        .find(|m| m.path.rsplit('/').next() == Some(name))
        .map(|m| (m.bias as usize, PathBuf::from(&m.path)))
}

/// The version of the PyTorch package `libc10_cuda.so` at `library` belongs
/// to, from `torch/version.py` (`torch/lib/..`).
fn installed_version(library: &Path) -> Option<(u8, u8, u8)> {
    let package = library.parent()?.parent()?;
    let text = std::fs::read_to_string(package.join("version.py")).ok()?;
    parse_version_py(&text)
}

/// `__version__ = '2.11.0+cu130'` → (2, 11, 0).
fn parse_version_py(text: &str) -> Option<(u8, u8, u8)> {
    let line = text.lines().find(|l| l.trim_start().starts_with("__version__"))?;
    let value = line.split_once('=')?.1.trim().trim_matches(|c| c == '\'' || c == '"');
    let numbers = value.split(|c: char| !c.is_ascii_digit()).take(3);
    let mut parts = [0u8; 3];
    let mut count = 0;
    for (slot, text) in parts.iter_mut().zip(numbers) {
        *slot = text.parse().ok()?;
        count += 1;
    }
    (count == 3).then_some((parts[0], parts[1], parts[2]))
}

/// Step 2, from every allocation hook after its bookkeeping, outside any
/// lock of ours: one load unless an attach or a report is due.
#[inline]
pub(crate) fn after_allocation() {
    let now = STATE.load(Ordering::Relaxed);
    if now == state::READY || now == state::OFF_UNREPORTED {
        attach_or_report(now);
    }
}

#[cold]
fn attach_or_report(seen: u8) {
    if seen == state::OFF_UNREPORTED {
        if STATE
            .compare_exchange(state::OFF_UNREPORTED, state::OFF, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            let why = OFF_REASON.load(Ordering::Relaxed);
            tensors::write_status(status::UNAVAILABLE, why, VERSION.load(Ordering::Relaxed));
        }
        return;
    }
    if STATE
        .compare_exchange(state::READY, state::ATTACHING, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return; // another thread attaches; never wait for it
    }
    match attach() {
        Attach::Done => {
            STATE.store(state::ATTACHED, Ordering::Release);
            tensors::write_status(status::ATTACHED, 0, VERSION.load(Ordering::Relaxed));
        }
        Attach::NotYet => STATE.store(state::READY, Ordering::Release),
        Attach::Refused(why) => {
            OFF_REASON.store(why, Ordering::Relaxed);
            STATE.store(state::OFF, Ordering::Release);
            tensors::write_status(status::UNAVAILABLE, why, VERSION.load(Ordering::Relaxed));
        }
    }
}

enum Attach {
    Done,
    /// The allocator does not exist or is not initialised yet.
    NotYet,
    Refused(u64),
}

fn attach() -> Attach {
    let slot = ALLOCATOR_SLOT.load(Ordering::Relaxed);
    // SAFETY: the resolved address of `std::atomic<CUDAAllocator*>`, in a
    // loaded library; read as the atomic it is.
    let object = unsafe { AtomicUsize::from_ptr(slot as *mut usize) }.load(Ordering::Acquire);
    if object == 0 {
        return Attach::NotYet;
    }
    // SAFETY: a live C++ object's first word is its vptr.
    let vptr = unsafe { *(object as *const usize) };
    if vptr != NATIVE_VTABLE.load(Ordering::Relaxed) {
        return Attach::Refused(reason::NOT_NATIVE_ALLOCATOR);
    }
    let layout = LAYOUTS[LAYOUT.load(Ordering::Relaxed)];
    // SAFETY: the vptr is the native allocator's vtable, whose slots reach
    // past `attach_slot` in the known layout.
    let attach_method = unsafe { *(vptr as *const usize).add(layout.attach_slot) };
    if attach_method != ATTACH_METHOD.load(Ordering::Relaxed) {
        return Attach::Refused(reason::VTABLE_MISMATCH);
    }
    // SAFETY: `bool NativeCachingAllocator::initialized()`, called on an
    // object of that class; it only reads whether its device allocators exist.
    let initialized: extern "C" fn(usize) -> bool =
        unsafe { std::mem::transmute(INITIALIZED_METHOD.load(Ordering::Relaxed)) };
    if !initialized(object) {
        return Attach::NotYet;
    }
    // `void attachAllocatorTraceTracker(AllocatorTraceTracker)`: the
    // by-value std::function is passed as the address of the caller's
    // temporary, which the caller destroys after the call. A C++ exception
    // (only `bad_alloc` is possible on this path) aborts at our frame
    // rather than unwinding through it.
    // SAFETY: the method's address, checked against the vtable above.
    let attach: extern "C" fn(usize, *mut StdFunction) = unsafe { std::mem::transmute(attach_method) };
    let mut tracker = StdFunction::stateless::<u8>(on_trace_entry);
    attach(object, &raw mut tracker);
    tracker.destroy();
    Attach::Done
}

/// The tracker's invoker: called by PyTorch under the device's lock, for
/// each action, with the `TraceEntry`.
unsafe extern "C" fn on_trace_entry(_functor: *const AnyData, entry: *const u8) {
    if !tracing_on() || entry.is_null() {
        return;
    }
    // An allocation's stack walk comes first: the record's lines arrive meanwhile.
    prepare_event(None, 0);
    guarded(|| {
        let now = STATE.load(Ordering::Acquire);
        if now != state::ATTACHED && now != state::CONFIRMED {
            return;
        }
        let layout = LAYOUTS[LAYOUT.load(Ordering::Relaxed)];
        // SAFETY: PyTorch passes a live TraceEntry of the layout resolved.
        let action = match unsafe { read_entry(entry, layout) } {
            Entry::Action(action) => Some(action),
            Entry::Ignored => return,
            Entry::Bad => None,
        };
        let Some(action) = action else {
            if STATE.swap(state::OFF, Ordering::AcqRel) != state::OFF {
                OFF_REASON.store(reason::BAD_ENTRY, Ordering::Relaxed);
                tensors::write_status(status::UNAVAILABLE, reason::BAD_ENTRY, VERSION.load(Ordering::Relaxed));
            }
            return;
        };
        if now == state::ATTACHED {
            confirm(action);
        } else {
            // Loaded first: a swap on every action would claim the line.
            if CONFIRMED_UNREPORTED.load(Ordering::Relaxed) && CONFIRMED_UNREPORTED.swap(false, Ordering::Relaxed) {
                tensors::write_status(status::CONFIRMED, 0, VERSION.load(Ordering::Relaxed));
            }
            tensors::write_action(action);
        }
    });
}

/// Step 3: the first segment action decides.
fn confirm(action: TensorAction) {
    let version = VERSION.load(Ordering::Relaxed);
    let segment = matches!(action.action, Action::SegmentAlloc | Action::SegmentMap);
    if segment && tensors::matches_driver_memory(action.action, action.address, action.size) {
        if STATE
            .compare_exchange(state::ATTACHED, state::CONFIRMED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            tensors::write_status(status::CONFIRMED, 0, version);
            let missed = NOT_RECORDED.swap(0, Ordering::Relaxed);
            if missed > 0 {
                tensors::write_status(status::NOT_RECORDED, missed, version);
            }
        }
        tensors::write_action(action);
        return;
    }
    if STATE.load(Ordering::Acquire) == state::CONFIRMED {
        // Another thread (another device's lock) confirmed meanwhile.
        tensors::write_action(action);
    } else if !segment {
        NOT_RECORDED.fetch_add(1, Ordering::Relaxed);
    } else if STATE
        .compare_exchange(state::ATTACHED, state::OFF, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        OFF_REASON.store(reason::SEGMENT_MISMATCH, Ordering::Relaxed);
        tensors::write_status(status::UNAVAILABLE, reason::SEGMENT_MISMATCH, version);
    }
}

/// What an entry holds.
enum Entry {
    Action(TensorAction),
    /// `USER_DEFINED` (9): an annotation some versions send through the
    /// same trackers; no memory changed.
    Ignored,
    /// What no entry of this layout can hold.
    Bad,
}

/// Code of PyTorch's `USER_DEFINED` annotations.
const USER_DEFINED: i32 = 9;

/// Reads one entry.
///
/// # Safety
/// `entry` points at a `TraceEntry` of `layout`.
unsafe fn read_entry(entry: *const u8, layout: &Layout) -> Entry {
    // SAFETY: per the caller's contract.
    match unsafe { read_action(entry, layout) } {
        Some(action) => Entry::Action(action),
        // SAFETY: as above.
        None if unsafe { entry.add(layout.action).cast::<i32>().read_unaligned() } == USER_DEFINED => Entry::Ignored,
        None => Entry::Bad,
    }
}

/// Reads one entry's action; `None` if it is not one.
///
/// # Safety
/// `entry` points at a `TraceEntry` of `layout`.
unsafe fn read_action(entry: *const u8, layout: &Layout) -> Option<TensorAction> {
    // SAFETY: offsets inside the entry, per the caller's contract.
    let word = |offset: usize| unsafe { entry.add(offset).cast::<u64>().read_unaligned() };
    // SAFETY: as above.
    let code = unsafe { entry.add(layout.action).cast::<i32>().read_unaligned() };
    // SAFETY: as above.
    let device = unsafe { entry.add(layout.device).cast::<i8>().read() };
    let action = Action::from_code(u64::try_from(code).ok()?)?;
    if device < 0 {
        return None;
    }
    Some(TensorAction {
        action,
        device,
        address: word(layout.address),
        size: word(layout.size),
        stream: word(layout.stream),
        pool: pool_word(word(layout.pool), word(layout.pool + 8)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_package_version_file() {
        assert_eq!(
            parse_version_py("__version__ = '2.11.0+cu130'\ngit_version = 'x'\n"),
            Some((2, 11, 0))
        );
        assert_eq!(parse_version_py("x = 1\n__version__ = \"2.9.1\"\n"), Some((2, 9, 1)));
        assert_eq!(
            parse_version_py("__version__ = '2.12.0.dev20261101+cu130'\n"),
            Some((2, 12, 0))
        );
        assert_eq!(parse_version_py("__version__ = 'nightly'\n"), None);
        assert_eq!(parse_version_py("version = '2.11.0'\n"), None);
    }

    #[test]
    fn entries_are_read_at_the_layouts_offsets_and_bad_codes_refused() {
        let mut entry = [0u8; 136];
        entry[0..4].copy_from_slice(&3i32.to_ne_bytes());
        entry[4] = 1;
        entry[8..16].copy_from_slice(&0x7f00_0000_0000u64.to_ne_bytes());
        entry[32..40].copy_from_slice(&0x55u64.to_ne_bytes());
        entry[40..48].copy_from_slice(&(2u64 << 20).to_ne_bytes());
        entry[48..56].copy_from_slice(&4u64.to_ne_bytes());
        entry[56..64].copy_from_slice(&0u64.to_ne_bytes());
        // SAFETY: a 136-byte buffer of the layout.
        let action = unsafe { read_action(entry.as_ptr(), &LAYOUT_2_11) }.unwrap();
        assert_eq!(
            (
                action.action,
                action.device,
                action.address,
                action.stream,
                action.size,
                action.pool
            ),
            (Action::SegmentAlloc, 1, 0x7f00_0000_0000, 0x55, 2 << 20, 4)
        );
        entry[0..4].copy_from_slice(&10i32.to_ne_bytes());
        // SAFETY: as above.
        assert!(unsafe { read_action(entry.as_ptr(), &LAYOUT_2_11) }.is_none());
        // SAFETY: as above.
        let bad = unsafe { read_entry(entry.as_ptr(), &LAYOUT_2_11) };
        assert!(matches!(bad, Entry::Bad));
        entry[0..4].copy_from_slice(&9i32.to_ne_bytes());
        // SAFETY: as above: an annotation is ignored, not bad.
        let annotation = unsafe { read_entry(entry.as_ptr(), &LAYOUT_2_11) };
        assert!(matches!(annotation, Entry::Ignored));
        entry[0..4].copy_from_slice(&0i32.to_ne_bytes());
        entry[4] = 0xff;
        // SAFETY: as above.
        assert!(unsafe { read_action(entry.as_ptr(), &LAYOUT_2_11) }.is_none());
    }
}
