//! The top of the library: what happens when it loads, when the process
//! forks and when it exits, for every layer. No other module registers
//! handlers; each layer only offers what these need.

use crate::hooks::{dlopen_door, exec, fork, launch, streams, torch_allocator};
use crate::record::{capture_state, device_readings, devices, live_table, memory_limit};
use crate::spool::{notice, recording_switch, replaced_image, tree_root, writer as spool_writer};
use crate::stacks::{call_stack, module_map, python_frames, thread_stack};
use crate::system::{address_budget, clock, environment, process_mark, spare_stack, thread_block, tracing_switch};

extern "C" fn before_fork() {
    module_map::before_fork();
}

extern "C" fn after_fork_in_parent() {
    module_map::after_fork_in_parent();
}

/// The child side of `fork`: it has one thread, a copy of the parent's
/// memory, and the parent's spool mapped shared. It must write its own spool
/// and must not inherit locks held by parent threads that no longer exist.
extern "C" fn after_fork_in_child() {
    // Another library's fork handler, run before ours, may have called CUDA
    // already: that hook found the mark clear and started over itself.
    if process_mark::started_over_already() {
        return;
    }
    start_as_child();
    process_mark::mark();
}

/// The work of a new process that inherited the parent's state: run by the
/// fork handler, or at the first event of a child made without one
/// (`_Fork`, `clone`), which the process mark notices.
fn start_as_child() {
    thread_block::forget_parent();
    spare_stack::after_fork_in_child();
    clock::forget_parent();
    spool_writer::forget_parent_spool();
    live_table::forget_parent_table();
    call_stack::forget_parent_stacks();
    module_map::after_fork_in_child();
    device_readings::forget_parent();
    memory_limit::forget_parent();
    devices::forget_parent();
    capture_state::forget_parent();
    launch::forget_parent();
    streams::forget_parent();
    torch_allocator::forget_parent();
}

/// Right after this process's spool is created: the modules already loaded
/// go into it, so that its stacks can be symbolized.
fn spool_opened() {
    module_map::write_all_to_spool();
}

/// Just before the exit is recorded: libraries loaded since the last
/// rebuild point still get symbolized, and the device is read once more.
fn process_exiting() {
    let _ = std::panic::catch_unwind(dlopen_door::catch_up);
    let _ = std::panic::catch_unwind(device_readings::sample_at_exit);
}

/// Library constructor. It does no CUDA work; it reads the settings and,
/// in the root of a traced tree, adds the tree's spool folder to it.
extern "C" fn on_load() {
    // First: every table mapped from here on is sized by it.
    address_budget::configure();
    // Every setting, read once, here. Before the tree is settled below:
    // whether this process records decides whether it settles one, and the
    // clock's offset is in the name of the folder a tree root picks.
    // Settling changes the tree's own variables (its root, folder, trace
    // and collector), none of which is among these (they are read where
    // they are used), and, in a tree that cannot record, sets
    // `CUDATRACE_DISABLE` for the processes it starts, after this one has
    // turned its own recording off.
    let settings = environment::load();
    if settings.disabled {
        tracing_switch::turn_tracing_off();
    }
    if !settings.launch_hooks {
        launch::disable();
    }
    if !settings.samples {
        device_readings::disable_samples();
    }
    clock::configure(settings.clock_offset_ns);
    process_mark::set_up(start_as_child);
    thread_stack::note_loading_thread();
    spool_writer::set_callbacks(spool_opened, process_exiting);
    spool_writer::configure_test_signal();
    call_stack::configure_test_whole_walks();
    exec::resolve();
    fork::resolve();
    if tracing_switch::tracing_on() {
        tree_root::adopt_tree_if_root();
        tree_root::settle_spool_dir();
        replaced_image::mark_the_image_replaced();
        notice::settle(settings.notice);
        recording_switch::configure(settings.start_paused);
        call_stack::configure(settings.stacks, settings.max_depth);
        torch_allocator::configure(settings.tensors);
        memory_limit::configure(settings.limit, settings.quiet);
        let _ = std::panic::catch_unwind(|| {
            python_frames::resolve();
            module_map::rebuild();
            torch_allocator::resolve_if_loaded();
        });
    }
    // SAFETY: registering plain function pointers; the library is never unloaded.
    unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child)) };
}

#[used]
#[unsafe(link_section = ".init_array")]
static RUN_ON_LOAD: extern "C" fn() = on_load;
