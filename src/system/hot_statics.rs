//! The statics every event reads, kept together so that a hook can ask for
//! all of them at once.
//!
//! Between two events a training process pushes the library's data out of
//! the core's caches, and each static an event reads (the spool's state,
//! the stack mode, the tables' addresses, ...) would otherwise be a cache
//! miss of its own, wherever the linker put it. Each of them is placed in the
//! section `cudatrace_hot` (`#[unsafe(link_section = "cudatrace_hot")]`),
//! a few cache lines in all, which [`prefetch`] asks for on a hook's entry.
//! Only small statics that events read belong there; rarely written ones,
//! so that the lines stay shared between the cores that read them.

use crate::system::prefetch::prefetch_line;

unsafe extern "C" {
    // The linker's bounds of the section (it names them for any section
    // whose name is an identifier).
    static __start_cudatrace_hot: u8;
    static __stop_cudatrace_hot: u8;
}

// Hidden, so that the linker keeps the bounds out of the dynamic symbol
// table: the library exports its hooks and nothing else.
std::arch::global_asm!(".hidden __start_cudatrace_hot", ".hidden __stop_cudatrace_hot");

/// Lines asked for: the section's bytes from the line its start falls in.
/// More would mean statics that do not belong (a test checks they fit).
const LINES: usize = 6;

/// Asks for every line of the hot statics. A fixed count of prefetches, with
/// no comparison against the section's end: a prefetch past it is harmless
/// (it never faults), and cheaper than the bounds checks it saves.
#[inline(always)]
pub(crate) fn prefetch() {
    let start = (&raw const __start_cudatrace_hot) as usize & !63;
    for line in 0..LINES {
        prefetch_line((start + line * 64) as *const u8);
    }
}

/// The section's size in bytes (its tests' measure).
#[cfg(test)]
pub(crate) fn section_bytes() -> usize {
    (&raw const __stop_cudatrace_hot as usize).saturating_sub(&raw const __start_cudatrace_hot as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hot_statics_fit_the_lines_asked_for_and_hold_the_switch() {
        let bytes = section_bytes();
        // The section's start may fall anywhere in its first line.
        assert!(bytes + 63 <= LINES * 64, "{bytes} bytes of hot statics");
        let start = &raw const __start_cudatrace_hot as usize;
        let switch = crate::system::tracing_switch::switch_address();
        assert!(
            (start..start + bytes).contains(&switch),
            "the tracing switch at {switch:#x}, the section at {start:#x} + {bytes}"
        );
    }
}
