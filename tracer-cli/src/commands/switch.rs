//! `cudatrace pause` and `cudatrace resume`: switch a running job's
//! recording, as PyTorch users switch `_record_memory_history` on and off
//! around the steps they care about.

use crate::collector::monotonic_ns;
use crate::collector::spool_dir;
use crate::commands::arguments::{PauseArgs, ResumeArgs};
use crate::system::failure::Failure;
use crate::system::switch_file::SwitchFile;
use crate::system::terminal::say;
use crate::system::traced_jobs::{self, Named};
use crate::wording::switch_lines;
use cudatrace_events::recording_switch::{StackSetting, SwitchState};
use cudatrace_events::{naming, settings};
use std::path::{Path, PathBuf};

/// `cudatrace pause`.
pub fn pause(args: PauseArgs) -> Result<u8, Failure> {
    let chosen = job_folder(args.job.as_deref())?;
    // Pausing keeps a stack setting a resume chose, for the next resume.
    switch(chosen, |before| SwitchState {
        paused: true,
        stacks: before.stacks,
    })
}

/// `cudatrace resume`.
pub fn resume(args: ResumeArgs) -> Result<u8, Failure> {
    let chosen = job_folder(args.job.as_deref())?;
    let stacks = args.stacks.and_then(|s| StackSetting::from_name(s.name()));
    switch(chosen, |before| SwitchState {
        paused: false,
        stacks: stacks.or(before.stacks),
    })
}

fn switch(chosen: Chosen, next: impl FnOnce(SwitchState) -> SwitchState) -> Result<u8, Failure> {
    let dir = chosen.dir;
    if !dir.is_dir() {
        return Err(switch_lines::no_spool_folder(&dir).into());
    }
    spool_dir::check_owned(&dir)?;
    if !is_spool_folder(&dir) {
        return Err(switch_lines::not_a_spool_folder(&dir).into());
    }
    let failed = |error: std::io::Error| Failure::from(switch_lines::cannot_switch(&dir, error));
    // A job that has made no CUDA call yet has no switch: it is made here,
    // recording, and switched like any other.
    let file = SwitchFile::open_or_make(&dir, SwitchState::RECORDING, monotonic_ns()).map_err(failed)?;
    let (before, state) = file.set(next, monotonic_ns).map_err(failed)?;
    say(&switch_lines::switched(state, before, &dir, chosen.from_this_terminal));
    Ok(0)
}

/// Whether `dir` holds what cudatrace keeps in a job's spool folder: a
/// switch, a spool, `run`'s notice file, or a collector's files.
fn is_spool_folder(dir: &Path) -> bool {
    spool_dir::KEPT_BESIDE_SPOOLS.iter().any(|name| dir.join(name).exists())
        || naming::spool_files_in(dir).is_ok_and(|s| !s.is_empty())
}

/// The job a switch acts on: its spool folder, and, for a job found by the
/// terminal it was started from, its pid to name it by.
struct Chosen {
    dir: PathBuf,
    from_this_terminal: Option<u32>,
}

/// The spool folder of the job named (a pid or a folder), else of the job
/// this command runs in, else of the only traced job of this user started
/// from this terminal ([`traced_jobs::started_here`]).
fn job_folder(named: Option<&str>) -> Result<Chosen, Failure> {
    let named_dir = |dir: PathBuf| Chosen {
        dir,
        from_this_terminal: None,
    };
    match named {
        Some(text) => match text.parse::<u32>() {
            Ok(pid) => match traced_jobs::job_of(pid) {
                Named::Job(dir) => Ok(named_dir(dir)),
                Named::Gone => Err(switch_lines::no_such_process(pid).into()),
                Named::NotTraced => Err(switch_lines::not_traced(pid).into()),
            },
            Err(_) => Ok(named_dir(PathBuf::from(text))),
        },
        None => {
            // Inside a traced job, cudatrace's own variables stand beside
            // the folder; a `CUDATRACE_DIR` exported by hand is not a job.
            let in_a_job = traced_jobs::SET_BY_CUDATRACE
                .iter()
                .any(|key| std::env::var_os(key).is_some());
            if let Some(own) = settings::DIR.non_empty().filter(|_| in_a_job) {
                return Ok(named_dir(
                    std::path::absolute(&own).unwrap_or_else(|_| PathBuf::from(own)),
                ));
            }
            let jobs = traced_jobs::running_jobs();
            if jobs.is_empty() {
                return Err(switch_lines::NO_JOB_RUNNING.into());
            }
            let here = traced_jobs::started_here(&jobs);
            if let [dir] = here.as_slice() {
                return Ok(Chosen {
                    from_this_terminal: jobs[dir].first().copied(),
                    dir: dir.clone(),
                });
            }
            let listed: Vec<switch_lines::ListedJob> = jobs
                .iter()
                .map(|(dir, pids)| switch_lines::ListedJob {
                    dir: dir.display().to_string(),
                    pid: pids.first().copied().unwrap_or(0),
                    from_this_terminal: here.contains(dir),
                })
                .collect();
            Err(switch_lines::none_chosen(here.len(), &listed).into())
        }
    }
}
