//! The process's module map: every loaded ELF object with its path, build id
//! and load address, and an unwinder over their `.eh_frame` sections.
//!
//! The map is built by walking the loader's list of objects, as debuggers
//! do, outside allocation hooks: when the library loads, at the next
//! `dlsym`, `cuInit` or `cuGetProcAddress` after a `dlopen`, and at exit.
//! Hooks read the current map through one atomic pointer. Old maps are
//! never freed: a hook on another thread may still be unwinding with one,
//! and a process loads libraries a handful of times.

use crate::spool::writer as spool_writer;
use crate::stacks::stack_table;
use crate::system::loader;
use crate::system::thread::current_tid;
use cudatrace_events::naming;
use cudatrace_events::stacks::{blob_kind, ModuleInfo};
use framehop::x86_64::UnwinderX86_64;
use framehop::{ExplicitModuleSectionInfo, Module, MustNotAllocateDuringUnwind, Unwinder};
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

/// The unwinder hooks use: section data borrowed from the loaded images, and
/// no allocation while unwinding.
pub(crate) type NativeUnwinder = UnwinderX86_64<&'static [u8], MustNotAllocateDuringUnwind>;

/// One snapshot of the loaded modules.
pub(crate) struct ModuleMap {
    /// The modules, as recorded in the spool.
    pub(crate) modules: Vec<ModuleInfo>,
    /// An unwinder knowing every module with unwind information.
    pub(crate) unwinder: NativeUnwinder,
    /// Address range of this library's own code, whose frames stacks leave out.
    pub(crate) own_range: (u64, u64),
    /// Address ranges of the CUDA libraries (the driver, the runtime), sorted.
    pub(crate) cuda_ranges: Vec<(u64, u64)>,
    /// The `dlopen` count this snapshot was built after.
    pub(crate) dlopen_count: u64,
}

#[unsafe(link_section = "cudatrace_hot")]
static CURRENT: AtomicPtr<ModuleMap> = AtomicPtr::new(std::ptr::null_mut());
/// The kernel thread id of the thread rebuilding the map (or holding
/// rebuilds off for a `fork`), or 0.
static REBUILDING: AtomicU32 = AtomicU32::new(0);
/// Whether `before_fork` took `REBUILDING` (and the parent gives it back).
static HELD_FOR_FORK: AtomicBool = AtomicBool::new(false);

/// The current map, if one was built.
#[inline]
pub(crate) fn current() -> Option<&'static ModuleMap> {
    // SAFETY: maps are leaked once published, so the reference never dangles.
    unsafe { CURRENT.load(Ordering::Acquire).as_ref() }
}

/// Rebuilds the map if a `dlopen` happened since the last build; returns
/// whether it did. Call only where taking the loader lock is allowed (never
/// in an allocation hook).
pub(crate) fn refresh_if_stale() -> bool {
    let stale = current().is_none_or(|map| map.dlopen_count != loader::dlopen_count());
    if stale {
        rebuild();
    }
    stale
}

/// Builds a new map now and writes the modules the previous one lacked to
/// the spool. Not for allocation hooks: it reads every module's headers.
pub(crate) fn rebuild() {
    if REBUILDING
        .compare_exchange(0, current_tid(), Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let dlopen_count = loader::dlopen_count();
    let previous = current();
    let map = Box::leak(Box::new(build(dlopen_count)));
    CURRENT.store(map, Ordering::SeqCst);
    if spool_writer::is_open() {
        for module in &map.modules {
            let known = previous.is_some_and(|old| old.modules.iter().any(|m| same_module(m, module)));
            if !known {
                write_module(module);
            }
        }
    }
    REBUILDING.store(0, Ordering::Release);
}

/// Writes every module of the current map to a spool that was just created.
pub(crate) fn write_all_to_spool() {
    if let Some(map) = current() {
        map.modules.iter().for_each(write_module);
    }
}

/// Before `fork`: waits for a rebuild in progress and holds off new ones,
/// so that the child does not inherit the guard held. A `fork` from a
/// signal handler that interrupted this very thread's rebuild never waits
/// for itself (the child starts with the guard free anyway).
pub(crate) fn before_fork() {
    let me = current_tid();
    loop {
        match REBUILDING.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => {
                HELD_FOR_FORK.store(true, Ordering::Relaxed);
                return;
            }
            Err(holder) if holder == me => return,
            Err(_) => std::thread::yield_now(),
        }
    }
}

/// After `fork`, in the parent: rebuilds may run again.
pub(crate) fn after_fork_in_parent() {
    if HELD_FOR_FORK.swap(false, Ordering::Relaxed) {
        REBUILDING.store(0, Ordering::Release);
    }
}

/// After `fork`, in the child: the parent's map is the child's, until the
/// child's own next `dlopen`. The `dlopen` count is left as it is: a
/// count that went back could meet a value a search was memoised at.
pub(crate) fn after_fork_in_child() {
    HELD_FOR_FORK.store(false, Ordering::Relaxed);
    REBUILDING.store(0, Ordering::Release);
}

fn same_module(a: &ModuleInfo, b: &ModuleInfo) -> bool {
    a.start == b.start && a.path == b.path && a.build_id == b.build_id
}

fn write_module(module: &ModuleInfo) {
    stack_table::write_blob(blob_kind::MODULE, module.start, &module.encode());
}

struct Collected {
    modules: Vec<ModuleInfo>,
    unwinder: NativeUnwinder,
    own_range: (u64, u64),
}

fn build(dlopen_count: u64) -> ModuleMap {
    let mut collected = Collected {
        modules: Vec::new(),
        unwinder: NativeUnwinder::new(),
        own_range: (0, 0),
    };
    // SAFETY: the loader's list of loaded objects, read as debuggers do.
    unsafe { walk_link_maps(&mut collected) };
    let mut cuda_ranges: Vec<(u64, u64)> = collected
        .modules
        .iter()
        .filter(|m| naming::is_cuda_library(naming::file_name_of(&m.path)))
        .map(|m| (m.start, m.end))
        .collect();
    cuda_ranges.sort_unstable();
    ModuleMap {
        cuda_ranges,
        modules: collected.modules,
        unwinder: collected.unwinder,
        own_range: collected.own_range,
        dlopen_count,
    }
}

fn executable_path() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// glibc's public `struct r_debug` (`<link.h>`).
#[repr(C)]
struct RDebug {
    version: libc::c_int,
    map: *const LinkMap,
}

/// glibc's public `struct link_map`.
#[repr(C)]
struct LinkMap {
    addr: u64,
    name: *const libc::c_char,
    dynamic: *const libc::c_void,
    next: *const LinkMap,
    previous: *const LinkMap,
}

unsafe extern "C" {
    /// The dynamic loader's rendezvous structure for debuggers.
    static _r_debug: RDebug;
}

/// Visits every loaded object through the loader's link map, the way a
/// debugger does. `dl_iterate_phdr` would take a loader lock, which a child
/// forked while another thread held it would wait on forever; the list is
/// only ever appended to at its end, after the new object is in place.
///
/// # Safety
/// Must run in a process with glibc's dynamic loader.
unsafe fn walk_link_maps(collected: &mut Collected) {
    // SAFETY: the loader keeps _r_debug and its list valid for the process's life.
    let mut map = unsafe { std::ptr::read_volatile(&raw const _r_debug.map) };
    let mut first = true;
    while !map.is_null() {
        // SAFETY: a node of the loader's list.
        let node = unsafe { &*map };
        let name = if node.name.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated name owned by the loader.
            unsafe { CStr::from_ptr(node.name) }.to_string_lossy().into_owned()
        };
        // SAFETY: headers of a loaded object, found per its kind.
        let headers = unsafe { program_headers(node.addr, first) };
        if let Some(headers) = headers {
            let path = if first && name.is_empty() {
                executable_path()
            } else {
                name
            };
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: the object is loaded with these headers.
                unsafe { add_object(node.addr, path, headers, collected) }
            }));
        }
        first = false;
        map = node.next;
    }
}

/// The program headers of a loaded object: for the executable, from the
/// auxiliary vector; for a shared object, from its ELF header at its base.
///
/// # Safety
/// `bias` must be the load bias of a loaded object.
unsafe fn program_headers(bias: u64, executable: bool) -> Option<&'static [libc::Elf64_Phdr]> {
    // SAFETY: the auxiliary vector, then headers mapped by the loader.
    unsafe {
        if executable {
            let address = libc::getauxval(libc::AT_PHDR);
            let count = libc::getauxval(libc::AT_PHNUM);
            return (address != 0)
                .then(|| std::slice::from_raw_parts(address as *const libc::Elf64_Phdr, count as usize));
        }
        if bias == 0 {
            return None;
        }
        let header = &*(bias as *const libc::Elf64_Ehdr);
        if header.e_ident[..4] != *b"\x7fELF" {
            return None;
        }
        Some(std::slice::from_raw_parts(
            (bias + header.e_phoff) as *const libc::Elf64_Phdr,
            usize::from(header.e_phnum),
        ))
    }
}

/// Reads one loaded object's program headers.
///
/// # Safety
/// `info` must describe an object that is loaded.
unsafe fn add_object(bias: u64, path: String, headers: &[libc::Elf64_Phdr], collected: &mut Collected) {
    let loads = || headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
    let Some(start) = loads().map(|h| h.p_vaddr).min() else {
        return;
    };
    let end = loads().map(|h| h.p_vaddr + h.p_memsz).max().unwrap_or(start);
    let exec = loads().find(|h| h.p_flags & libc::PF_X != 0);
    // SAFETY: note segments of a loaded object are mapped.
    let build_id = headers
        .iter()
        .filter(|h| h.p_type == libc::PT_NOTE)
        .find_map(|h| unsafe { build_id_in_notes(bias + h.p_vaddr, h.p_memsz) })
        .unwrap_or_default();
    let module = ModuleInfo {
        start: bias + start,
        end: bias + end,
        bias,
        exec_file_offset: exec.map_or(0, |h| h.p_offset),
        exec_vaddr: exec.map_or(0, |h| h.p_vaddr),
        build_id,
        path,
    };
    if (module.start..module.end).contains(&(add_object as *const () as u64)) {
        collected.own_range = (module.start, module.end);
    }
    if let Some(exec) = exec {
        let eh_frame_hdr = headers.iter().find(|h| h.p_type == libc::PT_GNU_EH_FRAME);
        // SAFETY: the segments named by the headers are mapped.
        if let Some(unwind_module) = unsafe { unwind_module(&module, bias, exec, eh_frame_hdr, headers) } {
            collected.unwinder.add_module(unwind_module);
        }
    }
    collected.modules.push(module);
}

/// The GNU build id in a note segment.
///
/// # Safety
/// `[address, address + size)` must be mapped.
unsafe fn build_id_in_notes(address: u64, size: u64) -> Option<Vec<u8>> {
    // SAFETY: per the caller.
    let notes = unsafe { std::slice::from_raw_parts(address as *const u8, size as usize) };
    let mut at = 0usize;
    let align4 = |n: usize| (n + 3) & !3;
    while at + 12 <= notes.len() {
        let word =
            |i: usize| u32::from_ne_bytes(notes[at + i * 4..at + i * 4 + 4].try_into().unwrap_or([0; 4])) as usize;
        let (name_size, desc_size, note_type) = (word(0), word(1), word(2));
        let name_at = at + 12;
        let desc_at = name_at + align4(name_size);
        let desc_end = desc_at.checked_add(desc_size)?;
        if desc_end > notes.len() {
            return None;
        }
        if note_type == 3 && notes.get(name_at..name_at + name_size) == Some(b"GNU\0") {
            return Some(notes[desc_at..desc_end].to_vec());
        }
        at = desc_at + align4(desc_size);
    }
    None
}

/// A framehop module over the object's in-memory `.eh_frame_hdr` and `.eh_frame`.
///
/// # Safety
/// The object must be loaded, with the headers given.
unsafe fn unwind_module(
    module: &ModuleInfo,
    bias: u64,
    exec: &libc::Elf64_Phdr,
    eh_frame_hdr: Option<&libc::Elf64_Phdr>,
    headers: &[libc::Elf64_Phdr],
) -> Option<Module<&'static [u8]>> {
    let text_svma = exec.p_vaddr..exec.p_vaddr + exec.p_memsz;
    let (mut hdr_svma, mut hdr_data, mut frame_svma, mut frame_data) = (None, None, None, None);
    if let Some(hdr) = eh_frame_hdr {
        let hdr_address = bias + hdr.p_vaddr;
        // SAFETY: the PT_GNU_EH_FRAME segment is mapped.
        let hdr_bytes: &'static [u8] =
            unsafe { std::slice::from_raw_parts(hdr_address as *const u8, hdr.p_memsz as usize) };
        if let Some(eh_frame_svma) = eh_frame_address(hdr_bytes, hdr.p_vaddr) {
            // .eh_frame runs at most to the end of the segment holding it.
            let segment = headers
                .iter()
                .find(|h| h.p_type == libc::PT_LOAD && (h.p_vaddr..h.p_vaddr + h.p_memsz).contains(&eh_frame_svma))?;
            let length = segment.p_vaddr + segment.p_filesz - eh_frame_svma;
            // SAFETY: inside a loaded segment.
            frame_data =
                Some(unsafe { std::slice::from_raw_parts((bias + eh_frame_svma) as *const u8, length as usize) });
            frame_svma = Some(eh_frame_svma..eh_frame_svma + length);
        }
        hdr_svma = Some(hdr.p_vaddr..hdr.p_vaddr + hdr.p_memsz);
        hdr_data = Some(hdr_bytes);
    }
    let sections = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: Some(text_svma),
        eh_frame_svma: frame_svma,
        eh_frame: frame_data,
        eh_frame_hdr_svma: hdr_svma,
        eh_frame_hdr: hdr_data,
        ..Default::default()
    };
    Some(Module::new(
        module.path.clone(),
        bias + exec.p_vaddr..bias + exec.p_vaddr + exec.p_memsz,
        bias,
        sections,
    ))
}

/// The file address of `.eh_frame`, from the pointer at the start of
/// `.eh_frame_hdr` (which sits at file address `hdr_svma`).
fn eh_frame_address(hdr: &[u8], hdr_svma: u64) -> Option<u64> {
    const PCREL_SDATA4: u8 = 0x1b;
    const UDATA4: u8 = 0x03;
    const SDATA4: u8 = 0x0b;
    let (&version, &encoding) = (hdr.first()?, hdr.get(1)?);
    if version != 1 {
        return None;
    }
    let value = i32::from_le_bytes(hdr.get(4..8)?.try_into().ok()?);
    match encoding {
        PCREL_SDATA4 => Some(hdr_svma.wrapping_add(4).wrapping_add(value as i64 as u64)),
        UDATA4 => Some(value as u32 as u64),
        SDATA4 => Some(value as i64 as u64),
        _ => None,
    }
}

impl ModuleMap {
    /// Whether `address` lies in a CUDA library: a few comparisons, never a
    /// walk over every module.
    #[inline]
    pub(crate) fn in_cuda_library(&self, address: u64) -> bool {
        self.cuda_ranges
            .iter()
            .any(|&(start, end)| (start..end).contains(&address))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `fork` from a signal handler that interrupted this thread's own
    /// rebuild: the fork's preparation must not wait for itself (it waited
    /// for good). One from another thread waits for the rebuild to end.
    #[test]
    fn a_fork_never_waits_for_a_rebuild_of_its_own_thread_and_waits_for_another_s() {
        let me = current_tid();
        REBUILDING.store(me, Ordering::Release);
        before_fork();
        after_fork_in_parent();
        assert_eq!(
            REBUILDING.load(Ordering::Acquire),
            me,
            "the interrupted rebuild still holds it"
        );
        REBUILDING.store(0, Ordering::Release);

        let (taken, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                REBUILDING.store(current_tid(), Ordering::Release);
                taken.wait();
                release.wait();
                std::thread::sleep(std::time::Duration::from_millis(50));
                REBUILDING.store(0, Ordering::Release);
            });
            taken.wait();
            release.wait();
            before_fork();
            assert_eq!(
                REBUILDING.load(Ordering::Acquire),
                me,
                "taken once the other thread let go"
            );
            after_fork_in_parent();
        });
        assert_eq!(REBUILDING.load(Ordering::Acquire), 0);
    }

    #[test]
    fn the_map_holds_this_test_binary_libc_and_their_build_ids() {
        let map = build(0);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let main = &map.modules[0];
        assert_eq!(main.path, exe.to_string_lossy());
        assert_eq!(main.build_id.len(), 20, "rustc links with a GNU build id");
        let libc_module = map
            .modules
            .iter()
            .find(|m| m.path.contains("libc.so"))
            .expect("libc is loaded");
        let here = libc::getpid as *const () as u64;
        assert!((libc_module.start..libc_module.end).contains(&here));
        assert!((map.own_range.0..map.own_range.1).contains(&(build as *const () as u64)));
    }

    #[test]
    fn eh_frame_pointer_encodings() {
        // version 1, pcrel|sdata4, then -0x100 relative to the field at +4.
        let hdr = [1, 0x1b, 0x03, 0x3b, 0x00, 0xff, 0xff, 0xff];
        assert_eq!(eh_frame_address(&hdr, 0x2000), Some(0x2004 - 0x100));
        assert_eq!(eh_frame_address(&[2, 0x1b, 0, 0, 0, 0, 0, 0], 0x2000), None);
    }
}
