//! The reader threads: each takes a spool from the channel, reads what is
//! new in it, and passes it back, until the spool is finished; then says
//! how its process image ended.

use super::host::monotonic_ns;
use super::shared_state::Shared;
use super::sink::Message;
use crate::collector::spool_tail::{damaged_spool, SpoolTail};
use crate::system::terminal::say;
use crate::wording::collector_lines;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use cudatrace_events::{naming, Pass};
use cudatrace_trace::ProcessEnd;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a reader waits after a pass over a spool that found nothing new.
const IDLE_SPOOL_PAUSE: Duration = Duration::from_millis(5);

/// One reader: follows spools until the scanner is done and none is left.
pub(super) fn read_spools(
    shared: &Shared,
    to_writer: &Sender<Message>,
    inbox: &Receiver<SpoolTail>,
    requeue: &Sender<SpoolTail>,
) {
    loop {
        let mut tail = match inbox.recv_timeout(Duration::from_millis(20)) {
            Ok(tail) => tail,
            Err(RecvTimeoutError::Timeout) => {
                if shared.scanner_done.load(Ordering::Acquire) && shared.active_spools.load(Ordering::Acquire) == 0 {
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if follow(shared, to_writer, &mut tail) {
            shared.active_spools.fetch_sub(1, Ordering::AcqRel);
        } else {
            let _ = requeue.send(tail);
        }
    }
}

/// Reads what is new in one spool; true once the spool is finished.
fn follow(shared: &Shared, to_writer: &Sender<Message>, tail: &mut SpoolTail) -> bool {
    let draining = shared.draining.load(Ordering::Acquire);
    let held = !draining && shared.held.lock().unwrap().contains(&tail.pid);
    let superseded = shared
        .latest_image
        .lock()
        .unwrap()
        .get(&tail.pid)
        .is_some_and(|&latest| latest > tail.image);
    let dead = tail.liveness.is_dead();
    let final_pass = !held && (draining || dead || superseded);
    // Slots read are never written again: live reads stop at the first one
    // not yet whole, and a final read of a dead image has no writer left.
    let settled = !final_pass || dead || superseded;
    let pass = if final_pass { Pass::Final } else { Pass::Live };
    let mut progressed = false;
    let mut failure = None;
    loop {
        let (events, at_end) = match tail.read_batch(pass) {
            Ok(read) => read,
            Err(error) => {
                failure = Some(error);
                break;
            }
        };
        if !events.is_empty() {
            progressed = true;
            let _ = to_writer.send(Message::Events(tail.process, events));
        }
        if settled && !shared.keep_spools {
            if let Some(release) = tail.chunks_to_release() {
                let _ = to_writer.send(Message::Release(release));
            }
        }
        if at_end || !final_pass {
            break;
        }
    }
    let header = tail.header();
    for process in tail.new_child_failures(&header, &shared.dir, final_pass) {
        let _ = to_writer.send(Message::Unrecorded(process));
    }
    if header.dropped_records > 0 && !shared.drop_reported.swap(true, Ordering::Relaxed) {
        say(&collector_lines::losing_events(
            tail.pid,
            &shared.dir,
            header.drop_errno,
        ));
    }
    if failure.is_none() && !final_pass {
        if !progressed {
            std::thread::sleep(IDLE_SPOOL_PAUSE);
        }
        return false;
    }
    let gone = dead || superseded;
    let collected = (gone && failure.is_none() && tail.cursor.damaged == 0).then(|| tail.path.clone());
    if let Some(reason) = failure {
        let error = cudatrace_events::SpoolError::Io(std::io::Error::other(reason));
        let _ = to_writer.send(Message::Damaged(damaged_spool(
            &tail.path, tail.pid, tail.image, &error,
        )));
    }
    tail.finish(&header);
    // The places made ready ahead of a writer that is gone were never used:
    // the file goes back to the chunks it wrote, once no preparation runs.
    let trim = || {
        if gone {
            tail.trim_unused_places(&header);
        }
    };
    let gate = shared.gates.lock().unwrap().remove(&tail.process);
    match gate {
        Some(gate) => gate.close_and(trim),
        None => trim(),
    }
    let end = end_of(shared, tail, &header, gone, superseded);
    let _ = to_writer.send(Message::End(end, collected));
    true
}

/// Whether a later image of `tail`'s process has a spool: one the scanner
/// took already, or one it has yet to find (its file is there before the
/// process ends, and removed only once collected, after the scanner took
/// it).
fn later_image_recorded(shared: &Shared, tail: &SpoolTail) -> bool {
    let taken = shared
        .latest_image
        .lock()
        .unwrap()
        .get(&tail.pid)
        .is_some_and(|&latest| latest > tail.image);
    taken
        || (tail.image + 1..=tail.image + 4)
            .any(|image| shared.dir.join(naming::spool_file_name(tail.pid, image)).exists())
}

/// How a process image ended: the status its parent saw if cudatrace is
/// that parent, else what it recorded when it called `exit`.
fn end_of(
    shared: &Shared,
    tail: &SpoolTail,
    header: &cudatrace_events::SpoolHeaderInfo,
    gone: bool,
    superseded: bool,
) -> ProcessEnd {
    // An image that was calling exec and never exited was replaced: the
    // status its pid ended with belongs to a later image.
    let replaced = header.process.exec_started && header.process.exit.is_none();
    let observed = shared
        .exits
        .lock()
        .unwrap()
        .get(&tail.pid)
        .copied()
        .filter(|_| !superseded && !replaced);
    let (exit_status, exit_time_ns) = match (observed, header.process.exit) {
        (Some((status, time)), _) => (Some(status), Some(time)),
        (None, Some((status, time))) => (Some(status), Some(time)),
        (None, None) if gone => (None, Some(monotonic_ns())),
        (None, None) => (None, None),
    };
    let mut end = tail.end_record(header, exit_status, exit_time_ns, !gone);
    if replaced {
        end.exec_into.clone_from(&header.process.exec_into);
        // The last traced image of its process (no later image recorded):
        // the status the process ended with, where run saw it, is told
        // with it, as the process's and not the image's.
        if !superseded && !later_image_recorded(shared, tail) {
            end.process_exit_status = shared.exits.lock().unwrap().get(&tail.pid).map(|&(status, _)| status);
        }
    }
    end
}
