//! Python frames of the calling thread, read straight from CPython's own
//! frame structures, as out-of-process profilers do.
//!
//! The public frame API is not usable from a hook: from 3.11 on it
//! allocates frame objects, which can run the garbage collector and
//! arbitrary `__del__` code, and line numbers come from scanning line
//! tables. Instead the hook records (code object, instruction offset) pairs
//! and copies each code object's names and line table once; the collector
//! works out lines.
//!
//! Which threads get Python frames: a thread whose own Python thread state
//! is known (`PyGILState_GetThisThreadState`), while the interpreter is
//! initialized. That includes a thread that released the GIL around the
//! call into CUDA, as PyTorch does in every operator: its frames stay
//! exactly as they were, and only that thread pushes or pops them, so
//! reading them needs no lock. Threads without a thread state of their own
//! (autograd workers, C++ pools) get a marker instead. The GIL is never
//! taken.
//!
//! Everything version-specific is in [`Layout`], per CPython minor version
//! 3.9 to 3.13 (x86-64, release builds), checked against each version's
//! headers.

use crate::stacks::stack_table::{self, CODE_OBJECT_KEY};
use cudatrace_events::stacks::{blob_kind, text_encoding, CODE_INFO_HEADER, MAX_BLOB_BYTES};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// One Python frame, innermost first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PyFrame {
    /// The code object.
    pub(crate) code: u64,
    /// Byte offset of the instruction it was executing.
    pub(crate) offset: u32,
    /// The last frame run by one native call of the eval loop: the frame
    /// after it belongs to an outer one.
    pub(crate) ends_segment: bool,
}

/// What a capture found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PyCapture {
    /// Not a Python process, or its Python is not initialized.
    NotPython,
    /// A Python process, but this thread has no thread state of its own.
    Unavailable,
    /// Frames, and whether there were more than the buffer held.
    Frames {
        /// Frames stored.
        count: usize,
        /// The stack went on.
        cut: bool,
    },
}

/// Field offsets of one CPython version.
#[derive(Debug)]
struct Layout {
    major: u8,
    minor: u8,
    thread_id: usize,
    /// Where the thread state points at the innermost frame: directly
    /// (`frame` / `current_frame`) or through `cframe`.
    frame_pointer: usize,
    /// Offset of `current_frame` inside `_PyCFrame`, when there is one.
    cframe_current: Option<usize>,
    previous: usize,
    code: usize,
    /// `f_lasti` (3.9, 3.10) or `prev_instr`/`instr_ptr` (3.11+).
    instruction: usize,
    /// `is_entry` (3.11) or `owner` (3.12+).
    entry_flag: Option<usize>,
    owner: Option<usize>,
    code_adaptive: Option<usize>,
    co_filename: usize,
    co_name: usize,
    co_firstlineno: usize,
    co_linetable: usize,
    ascii_size: usize,
    compact_size: usize,
}

const FRAME_OWNED_BY_CSTACK: u8 = 3;
/// `dladdr1`'s flag asking for the symbol table entry (`<dlfcn.h>`).
const RTLD_DL_SYMENT: c_int = 1;

const LAYOUTS: [Layout; 5] = [
    Layout {
        major: 3,
        minor: 9,
        thread_id: 176,
        frame_pointer: 24,
        cframe_current: None,
        previous: 24,
        code: 32,
        instruction: 104,
        entry_flag: None,
        owner: None,
        code_adaptive: None,
        co_filename: 104,
        co_name: 112,
        co_firstlineno: 40,
        co_linetable: 120,
        ascii_size: 48,
        compact_size: 72,
    },
    Layout {
        major: 3,
        minor: 10,
        thread_id: 176,
        frame_pointer: 24,
        cframe_current: None,
        previous: 24,
        code: 32,
        instruction: 96,
        entry_flag: None,
        owner: None,
        code_adaptive: None,
        co_filename: 104,
        co_name: 112,
        co_firstlineno: 40,
        co_linetable: 120,
        ascii_size: 48,
        compact_size: 72,
    },
    Layout {
        major: 3,
        minor: 11,
        thread_id: 152,
        frame_pointer: 56,
        cframe_current: Some(8),
        previous: 48,
        code: 32,
        instruction: 56,
        entry_flag: Some(68),
        owner: Some(69),
        code_adaptive: Some(184),
        co_filename: 112,
        co_name: 128, // co_qualname
        co_firstlineno: 72,
        co_linetable: 136,
        ascii_size: 48,
        compact_size: 72,
    },
    Layout {
        major: 3,
        minor: 12,
        thread_id: 136,
        frame_pointer: 56,
        cframe_current: Some(0),
        previous: 8,
        code: 0,
        instruction: 56,
        entry_flag: None,
        owner: Some(70),
        code_adaptive: Some(192),
        co_filename: 112,
        co_name: 128, // co_qualname
        co_firstlineno: 68,
        co_linetable: 136,
        ascii_size: 40,
        compact_size: 56,
    },
    Layout {
        major: 3,
        minor: 13,
        thread_id: 152,
        frame_pointer: 72,
        cframe_current: None,
        previous: 8,
        code: 0,
        instruction: 56,
        entry_flag: None,
        owner: Some(70),
        code_adaptive: Some(200),
        co_filename: 112,
        co_name: 128, // co_qualname
        co_firstlineno: 68,
        co_linetable: 136,
        ascii_size: 40,
        compact_size: 56,
    },
];

/// The interpreter found in the process.
struct Runtime {
    layout: &'static Layout,
    is_initialized: unsafe extern "C" fn() -> c_int,
    this_thread_state: unsafe extern "C" fn() -> *mut c_void,
    code_type: u64,
    eval: (u64, u64),
}

#[unsafe(link_section = "cudatrace_hot")]
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
static RESOLVE_TRIES: AtomicU32 = AtomicU32::new(0);

fn runtime() -> Option<&'static Runtime> {
    // SAFETY: published once and never freed.
    unsafe { RUNTIME.load(Ordering::Acquire).as_ref() }
}

/// Looks for a CPython interpreter in the process: at load, and after each
/// `dlopen` until one is found. Never called from an allocation hook.
pub(crate) fn resolve() {
    if runtime().is_some() || RESOLVE_TRIES.fetch_add(1, Ordering::Relaxed) > 10_000 {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        if let Some(found) = find_runtime() {
            let found = Box::leak(Box::new(found));
            if RUNTIME
                .compare_exchange(std::ptr::null_mut(), found, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // Another thread published first; ours stays leaked, a few bytes.
            }
        }
    });
}

fn lookup(name: &CStr) -> usize {
    // SAFETY: a lookup in the global scope.
    unsafe { crate::system::symbols::real_dlsym(libc::RTLD_DEFAULT, name) }
}

fn find_runtime() -> Option<Runtime> {
    let get_version = lookup(c"Py_GetVersion");
    let is_initialized = lookup(c"Py_IsInitialized");
    let this_thread_state = lookup(c"PyGILState_GetThisThreadState");
    let code_type = lookup(c"PyCode_Type");
    let eval = lookup(c"_PyEval_EvalFrameDefault");
    if [get_version, is_initialized, this_thread_state, code_type].contains(&0) {
        return None;
    }
    // SAFETY: Py_GetVersion returns a static string and may be called at any time.
    let version = unsafe {
        let get_version: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(get_version);
        CStr::from_ptr(get_version()).to_bytes().to_vec()
    };
    let (major, minor) = parse_version(&version)?;
    let layout = LAYOUTS.iter().find(|l| l.major == major && l.minor == minor)?;
    // SAFETY: addresses of the exported functions of those names.
    let (is_initialized, this_thread_state) = unsafe {
        (
            std::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(is_initialized),
            std::mem::transmute::<usize, unsafe extern "C" fn() -> *mut c_void>(this_thread_state),
        )
    };
    Some(Runtime {
        layout,
        is_initialized,
        this_thread_state,
        code_type: code_type as u64,
        eval: function_range(eval),
    })
}

fn parse_version(text: &[u8]) -> Option<(u8, u8)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The address range of the function at `address`, from its symbol's size.
fn function_range(address: usize) -> (u64, u64) {
    if address == 0 {
        return (0, 0);
    }
    // SAFETY: Dl_info is plain data, for which all zeros is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut symbol: *const libc::Elf64_Sym = std::ptr::null();
    // SAFETY: valid out-pointers; RTLD_DL_SYMENT stores a pointer to the symbol entry.
    let found = unsafe {
        libc::dladdr1(
            address as *const c_void,
            &mut info,
            (&raw mut symbol).cast(),
            RTLD_DL_SYMENT,
        )
    };
    if found == 0 || symbol.is_null() {
        return (address as u64, address as u64 + 1);
    }
    // SAFETY: dladdr1 gave a pointer into the object's symbol table.
    let size = unsafe { (*symbol).st_size }.max(1);
    (address as u64, address as u64 + size)
}

/// The eval loop's address range, for interleaving; (0, 0) without Python.
pub(crate) fn eval_range() -> (u64, u64) {
    runtime().map_or((0, 0), |r| r.eval)
}

#[inline]
unsafe fn read<T: Copy>(address: u64) -> T {
    // SAFETY: per the caller.
    unsafe { (address as *const T).read_unaligned() }
}

/// Fills `out` with the calling thread's Python frames, innermost first.
pub(crate) fn capture(out: &mut [PyFrame]) -> PyCapture {
    let Some(runtime) = runtime() else {
        return PyCapture::NotPython;
    };
    // SAFETY: both functions only read interpreter globals and this
    // thread's TSS slot; neither allocates nor takes a lock.
    let tstate = unsafe {
        if (runtime.is_initialized)() == 0 {
            return PyCapture::NotPython;
        }
        (runtime.this_thread_state)() as u64
    };
    if tstate == 0 {
        return PyCapture::Unavailable;
    }
    let layout = runtime.layout;
    // SAFETY: a live thread state of this thread (it cannot go away while
    // the thread is inside a call), and frames that only this thread pushes
    // and pops, each holding a strong reference to its code object.
    unsafe {
        if read::<u64>(tstate + layout.thread_id as u64) != libc::pthread_self() as u64 {
            return PyCapture::Unavailable;
        }
        let mut frame: u64 = read(tstate + layout.frame_pointer as u64);
        if let Some(current) = layout.cframe_current {
            if frame == 0 {
                return PyCapture::Frames { count: 0, cut: false };
            }
            frame = read(frame + current as u64);
        }
        let mut count = 0;
        while frame != 0 {
            if count == out.len() {
                return PyCapture::Frames { count, cut: true };
            }
            let previous: u64 = read(frame + layout.previous as u64);
            if layout
                .owner
                .is_some_and(|owner| read::<u8>(frame + owner as u64) == FRAME_OWNED_BY_CSTACK)
                && layout.entry_flag.is_none()
            {
                // 3.12+: a shim frame marks where the eval loop was entered from C.
                if count > 0 {
                    out[count - 1].ends_segment = true;
                }
                frame = previous;
                continue;
            }
            let code: u64 = read(frame + layout.code as u64);
            if code != 0 && read::<u64>(code + 8) == runtime.code_type {
                let offset = match layout.code_adaptive {
                    Some(start) => {
                        let instruction: u64 = read(frame + layout.instruction as u64);
                        instruction.saturating_sub(code + start as u64) as u32
                    }
                    None => {
                        let lasti = read::<i32>(frame + layout.instruction as u64).max(0) as u32;
                        if layout.minor == 10 {
                            lasti * 2
                        } else {
                            lasti
                        }
                    }
                };
                let ends_segment = match layout.entry_flag {
                    Some(flag) => read::<u8>(frame + flag as u64) != 0,
                    None => layout.owner.is_none(),
                };
                out[count] = PyFrame {
                    code,
                    offset,
                    ends_segment,
                };
                count += 1;
            }
            frame = previous;
        }
        PyCapture::Frames { count, cut: false }
    }
}

/// The first time a code object shows up in a stack: keeps it alive (so its
/// address is never reused under another name) and publishes its names and
/// line table.
pub(crate) fn describe_code_once(code: u64) {
    let Some(runtime) = runtime() else { return };
    let Some((_, added)) = stack_table::intern(CODE_OBJECT_KEY, code, 0, 0) else {
        return;
    };
    if !added {
        return;
    }
    // SAFETY: a code object referenced by a live frame of this thread.
    unsafe {
        hold_reference(code, runtime.layout);
        let mut blob = [0u8; MAX_BLOB_BYTES];
        let length = describe(code, runtime.layout, &mut blob);
        stack_table::write_blob(blob_kind::CODE, code, &blob[..length]);
    }
}

/// Adds a reference to an object. Atomic, because the thread may not hold
/// the GIL: the worst a racing non-atomic update by the GIL holder can do
/// is lose this increment, which leaves the program's own count right.
unsafe fn hold_reference(object: u64, layout: &Layout) {
    // SAFETY: ob_refcnt is the object's first word.
    unsafe {
        if (layout.major, layout.minor) >= (3, 12) {
            // The low 32 bits; all ones marks an immortal object, left alone.
            let count = AtomicU32::from_ptr(object as *mut u32);
            let _ = count.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_add(1));
        } else {
            AtomicU64::from_ptr(object as *mut u64).fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The text of a compact `str`, and how it is encoded.
unsafe fn text(object: u64, layout: &Layout) -> Option<(u8, &'static [u8])> {
    if object == 0 {
        return None;
    }
    // SAFETY: a str object (code object names are), read per the layout.
    unsafe {
        let length: u64 = read(object + 16);
        let state: u32 = read(object + 32);
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1 == 1, (state >> 6) & 1 == 1);
        if !compact || length > 4096 {
            return None;
        }
        let (data, encoding, width) = match (ascii, kind) {
            (true, _) => (object + layout.ascii_size as u64, text_encoding::LATIN1, 1),
            (false, 1) => (object + layout.compact_size as u64, text_encoding::LATIN1, 1),
            (false, 2) => (object + layout.compact_size as u64, text_encoding::UCS2, 2),
            (false, 4) => (object + layout.compact_size as u64, text_encoding::UCS4, 4),
            _ => return None,
        };
        Some((
            encoding,
            std::slice::from_raw_parts(data as *const u8, (length * width) as usize),
        ))
    }
}

/// Writes a code object's description (see `CodeInfo` in the events crate)
/// into `out`; returns its length.
unsafe fn describe(code: u64, layout: &Layout, out: &mut [u8; MAX_BLOB_BYTES]) -> usize {
    // SAFETY: fields of a live code object, per the layout.
    unsafe {
        let (file_encoding, file) = text(read(code + layout.co_filename as u64), layout).unwrap_or((1, b""));
        let (name_encoding, name) = text(read(code + layout.co_name as u64), layout).unwrap_or((1, b""));
        let table_object: u64 = read(code + layout.co_linetable as u64);
        let table: &[u8] = if table_object == 0 {
            b""
        } else {
            let size: u64 = read(table_object + 16);
            std::slice::from_raw_parts(
                (table_object + 32) as *const u8,
                size.min(MAX_BLOB_BYTES as u64) as usize,
            )
        };
        let first_line: i32 = read(code + layout.co_firstlineno as u64);
        let room = MAX_BLOB_BYTES - CODE_INFO_HEADER;
        let file = &file[..file.len().min(room / 4)];
        let name = &name[..name.len().min(room / 4)];
        let table = &table[..table.len().min(room - file.len() - name.len())];
        out[0] = layout.major;
        out[1] = layout.minor;
        out[2] = file_encoding;
        out[3] = name_encoding;
        out[4..8].copy_from_slice(&first_line.to_le_bytes());
        out[8..12].copy_from_slice(&(file.len() as u32).to_le_bytes());
        out[12..16].copy_from_slice(&(name.len() as u32).to_le_bytes());
        out[16..20].copy_from_slice(&(table.len() as u32).to_le_bytes());
        let mut at = CODE_INFO_HEADER;
        for part in [file, name, table] {
            out[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_from_the_banner() {
        assert_eq!(
            parse_version(b"3.12.1 (main, Jan  1 2024, 00:00:00) [GCC 12.2.0]"),
            Some((3, 12))
        );
        assert_eq!(parse_version(b"3.9.18+"), Some((3, 9)));
        assert_eq!(parse_version(b"garbage"), None);
    }
}
