//! What `cudatrace run` says on stderr, why it fails, and the end of its `--help`.

use super::numbers::{count, shell_quoted, thousands};
use std::fmt::Display;
use std::path::Path;

/// No library given and none beside the command.
pub const PRELOAD_NOT_LOCATED: &str = "cannot locate libcudatrace.so; pass --preload PATH";

/// The library named is not there.
pub fn preload_not_found(path: &Path) -> String {
    format!(
        "{} not found; pass --preload PATH or set CUDATRACE_PRELOAD",
        path.display()
    )
}

/// The command could not be started.
pub fn cannot_run(program: &Path, error: impl Display) -> String {
    format!("cannot run {}: {error}", program.display())
}

/// The command's end could not be waited for.
pub fn cannot_wait(error: impl Display) -> String {
    format!("cannot wait for the command: {error}")
}

/// No spool folder: the command runs untraced.
pub fn nothing_recorded(reason: &str) -> String {
    format!("cudatrace: nothing is recorded: {reason}")
}

/// The collector could not start: the spools wait for `collect`.
pub fn spools_wait_for_collect(run_dir: &Path, code: u8) -> String {
    format!(
        "cudatrace: the spools are kept in {}; run `cudatrace collect {} -o TRACE` (the command exited with status {code})",
        run_dir.display(),
        shell_quoted(run_dir)
    )
}

/// What is being recorded, and where; under a memory limit, the limit as
/// it was read (`24GB` is fewer bytes than `24GiB`), in bytes and in
/// binary units, so that a unit misread shows before the job runs.
pub fn recording(command: &str, trace: &Path, limit: Option<u64>) -> String {
    let limited = limit.map_or_else(String::new, |limit| {
        format!(
            ", every GPU limited to {} bytes ({})",
            thousands(limit),
            super::numbers::bytes(limit)
        )
    });
    format!(
        "cudatrace: recording `{command}` and every process it starts into {}{limited}",
        trace.display()
    )
}

/// The command ended, its descendants did not.
pub fn descendants_still_running(run_dir: &Path) -> String {
    format!(
        "cudatrace: descendants of the command are still running; the spool folder {} is kept for them: `cudatrace collect {}` once they are done adds what they record",
        run_dir.display(),
        shell_quoted(run_dir)
    )
}

/// The trace could not be finished (a full disk): the spools stay.
pub fn spools_wait_for_room(run_dir: &Path, trace: &Path, code: u8) -> String {
    format!(
        "cudatrace: the spools are kept in {}; once there is room, `cudatrace collect {}` finishes {} (the command exited with status {code})",
        run_dir.display(),
        shell_quoted(run_dir),
        trace.display()
    )
}

/// Nothing was recorded; `kept_empty` names the empty trace written, if one was.
pub fn nothing_to_record(disabled: bool, kept_empty: Option<&Path>) -> String {
    let why = if disabled {
        "CUDATRACE_DISABLE is set; nothing was recorded"
    } else {
        "no process loaded libcuda; nothing to record"
    };
    match kept_empty {
        Some(trace) => format!("cudatrace: {why} (wrote an empty trace {})", trace.display()),
        None => format!("cudatrace: {why}; no trace written"),
    }
}

/// What to do with the trace.
pub fn open_it(trace: &Path) -> String {
    format!(
        "cudatrace: open it with `cudatrace report {}` (text), or turn it into a page, an SVG, pickles for pytorch.org/memory_viz or a trace for ui.perfetto.dev with `cudatrace html`, `flamegraph`, `snapshot` or `perfetto`",
        shell_quoted(trace)
    )
}

/// Spools of another user were left alone.
pub fn refused_spools(refused: u64, run_dir: &Path) -> String {
    format!(
        "cudatrace: refused {refused} spool files not owned by this user; kept {}",
        run_dir.display()
    )
}

/// Traced processes outlived the collection.
pub fn still_running_after_run(still_running: u64, run_dir: &Path) -> String {
    format!(
        "cudatrace: {} still running; their spools are kept in {}: `cudatrace collect {}` once they are done adds what they did after",
        count(still_running, "traced process was", "traced processes were"),
        run_dir.display(),
        shell_quoted(run_dir)
    )
}

/// `--keep-spools` kept them.
pub fn kept_spools(run_dir: &Path) -> String {
    format!(
        "cudatrace: kept the spools in {} (--keep-spools); `cudatrace dump --dir {}` shows them",
        run_dir.display(),
        shell_quoted(run_dir)
    )
}

/// Spools that could not be read stay for a look.
pub fn kept_unreadable_spools(run_dir: &Path) -> String {
    format!(
        "cudatrace: kept the spools that could not be read in {}",
        run_dir.display()
    )
}

/// The end of `cudatrace run --help`: every environment variable of the
/// settings table, with what it means, its default and who sets it. `run`
/// sets the variables its options stand for in the traced command's
/// environment, so there the option wins; a plain `LD_PRELOAD` run reads
/// the variables alone.
pub fn environment_help() -> String {
    use cudatrace_events::settings::{SetBy, ALL};
    let mut help = String::from(
        "Environment variables (read by libcudatrace.so; `run` sets those its options stand for, in the command's environment):\n",
    );
    for variable in ALL {
        let who = match variable.set_by {
            SetBy::User => "",
            SetBy::Cudatrace => " (set by cudatrace for the processes it traces)",
            SetBy::Tests => " (for tests that make one machine stand for another host)",
            SetBy::Others => " (set by launchers; read only)",
        };
        help.push_str(&format!(
            "  {}{who}\n          {} [default: {}]\n",
            variable.name, variable.meaning, variable.default
        ));
    }
    help
}
