//! The summary's replay with the processes shared out among the cores: a
//! process's figures depend on its own events alone, so groups of
//! processes are replayed at once, each by a thread of its own, and each
//! process's part is taken from its group's replay.

use super::device_stats::OomsKept;
use super::engine::{Both, NoConsumer, PerProcess, Replay, Replayed};
use super::step_finding::{Boundaries, StepCounts};
use super::trace_index::TraceIndex;
use super::trace_summary::{Summary, SummaryBuilder};
use crate::system::cores::each_on_a_thread;
use crate::system::progress::Progress;

impl Summary {
    /// [`Summary::build_counted`] for a summary that no other consumer
    /// reads along with: each process's memory depends on its events
    /// alone, so the processes are shared out among the cores and
    /// replayed at once, each group in a replay of its own.
    /// Each device keeps `kept` out-of-memory failures in detail.
    pub fn build_counted_alone(index: &TraceIndex, counts: StepCounts, progress: &Progress, kept: OomsKept) -> Summary {
        let (boundaries, _) = counts.found(index);
        let cores = crate::system::cores::helpers() + 1;
        replay_per_process(index, progress, boundaries, cores, kept, &|_| NoConsumer).0
    }

    /// [`Summary::build_found`] with a consumer kept per process: the
    /// processes are replayed in parallel as in
    /// [`Summary::build_counted_alone`], each group with a consumer from
    /// `make`, and the consumers' parts are joined into one.
    pub fn build_found_per_process<C: PerProcess>(
        index: &TraceIndex,
        boundaries: Vec<Option<Boundaries>>,
        progress: &Progress,
        make: &(dyn Fn(Option<&[bool]>) -> C + Sync),
    ) -> (Summary, C) {
        let cores = crate::system::cores::helpers() + 1;
        replay_per_process(index, progress, boundaries, cores, OomsKept::default(), make)
    }
}

/// [`Summary::replay`] with a consumer kept per process, the processes
/// replayed in parallel on up to `cores` threads (see
/// [`Summary::build_counted_alone`]). The summary and the consumer are
/// the same as one replay's: each process's part is taken from the
/// replay of its group.
pub(super) fn replay_per_process<C: PerProcess>(
    index: &TraceIndex,
    progress: &Progress,
    boundaries: Vec<Option<Boundaries>>,
    cores: usize,
    kept: OomsKept,
    make: &(dyn Fn(Option<&[bool]>) -> C + Sync),
) -> (Summary, C) {
    let groups = process_groups(index, cores);
    if groups.len() < 2 {
        let mut whole = make(None);
        let mut building = SummaryBuilder::new(index, boundaries).keeping_ooms(kept);
        let Ok(replayed) = Replay::new(index, progress).run(&mut Both(&mut building, &mut whole));
        return (building.finish(replayed), whole);
    }
    let count = groups.len();
    let inputs: Vec<_> = groups
        .iter()
        .map(|group| (group, progress.share(), boundaries.clone()))
        .collect();
    let parts: Vec<(SummaryBuilder, C, Replayed)> = each_on_a_thread(inputs, |(group, share, boundaries)| {
        let mut selected = vec![false; index.processes.len()];
        group.iter().for_each(|&process| selected[process] = true);
        let mut builder = SummaryBuilder::new_for(index, boundaries, Some(&selected)).keeping_ooms(kept);
        let mut alongside = make(Some(&selected));
        let Ok(replayed) = Replay::new(index, &share)
            .only(group)
            .alongside(count)
            .run(&mut Both(&mut builder, &mut alongside));
        (builder, alongside, replayed)
    });
    let mut group_of = vec![0; index.processes.len()];
    for (number, group) in groups.iter().enumerate() {
        for &process in group {
            group_of[process] = number;
        }
    }
    // Filled in process by process from the groups' consumers.
    let mut whole = make(Some(&vec![false; index.processes.len()]));
    let mut stream_errors = Vec::new();
    let mut consumers = Vec::new();
    let mut pieces: Vec<_> = parts
        .into_iter()
        .map(|(builder, alongside, replayed)| {
            stream_errors.extend(replayed.stream_errors);
            consumers.push(alongside);
            (
                builder.processes.into_iter(),
                builder.trackers.into_iter(),
                replayed.memories.into_iter(),
            )
        })
        .collect();
    let mut summary = SummaryBuilder {
        index,
        processes: Vec::new(),
        trackers: Vec::new(),
        steps_only: false,
    };
    let mut memories = Vec::new();
    for (process, &group) in group_of.iter().enumerate() {
        for (number, (processes, trackers, memory)) in pieces.iter_mut().enumerate() {
            let (Some(part), Some(tracker), Some(memory)) = (processes.next(), trackers.next(), memory.next()) else {
                unreachable!("every replay keeps every process");
            };
            if number == group {
                summary.processes.push(part);
                summary.trackers.push(tracker);
                memories.push(memory);
            }
        }
        whole.take_process(&mut consumers[group], process);
    }
    let summary = summary.finish(Replayed {
        memories,
        stream_errors,
    });
    (summary, whole)
}

/// The processes shared out into at most `cores` groups of about equal
/// blocks of events, largest first, each to the group with the fewest so
/// far; one group (every process) when fewer than two have events.
pub fn process_groups(index: &TraceIndex, cores: usize) -> Vec<Vec<usize>> {
    let blocks = |process: usize| index.processes[process].blocks.len();
    let busy = (0..index.processes.len()).filter(|&p| blocks(p) > 0).count();
    let count = cores.min(busy);
    if count < 2 {
        return vec![(0..index.processes.len()).collect()];
    }
    let mut order: Vec<usize> = (0..index.processes.len()).collect();
    order.sort_by_key(|&process| (std::cmp::Reverse(blocks(process)), process));
    let mut groups: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); count];
    for process in order {
        let lightest = (0..count)
            .min_by_key(|&g| (groups[g].0, g))
            .expect("at least two groups");
        groups[lightest].0 += blocks(process);
        groups[lightest].1.push(process);
    }
    groups
        .into_iter()
        .map(|(_, mut group)| {
            group.sort_unstable();
            group
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::engine::Step;
    use crate::analysis::keys::DeviceKey;
    use crate::analysis::trace_summary::largest_call_sites;

    /// What a summary says of each process, in a fixed order: its devices'
    /// figures and call sites live at exit and at the peak, its host
    /// figures, the allocations still live, and its footprint.
    fn figures(summary: &Summary) -> Vec<String> {
        summary
            .processes
            .iter()
            .zip(&summary.footprints)
            .map(|(process, footprint)| {
                let devices: Vec<String> = process
                    .devices
                    .iter()
                    .map(|(key, d)| {
                        format!(
                            "{key:?} {} {} {} {} {} {} {} {:?} {:?}",
                            d.allocations,
                            d.frees,
                            d.bytes_allocated,
                            d.current,
                            d.peak,
                            d.peak_time_ns,
                            d.ooms.len(),
                            largest_call_sites(&d.live_by_stack),
                            largest_call_sites(&d.peak_by_stack)
                        )
                    })
                    .collect();
                let live: Vec<(DeviceKey, Vec<(u64, u64)>)> = process
                    .live_at_exit()
                    .into_iter()
                    .map(|(key, mut live)| {
                        live.sort_by_key(|a| a.address);
                        (key, live.iter().map(|a| (a.address, a.size)).collect())
                    })
                    .collect();
                format!("{devices:?} {:?} {live:?} {footprint:?}", process.host)
            })
            .collect()
    }

    #[test]
    fn processes_replayed_in_parallel_sum_up_as_one_replay() {
        let path = std::env::temp_dir().join(format!("cudatrace-parallel-summary-{}.trace", std::process::id()));
        let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        cudatrace_trace::synthetic::write_synthetic(file, 200_000, 5, 3).unwrap();
        let index = TraceIndex::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let boundaries = || super::super::step_finding::find_boundaries(&index, &Progress::hidden());
        let one = Summary::replay(&index, &Progress::hidden(), boundaries(), &mut |_: &Step| {});
        assert_eq!(one.processes.len(), 5);
        assert!(one
            .processes
            .iter()
            .all(|p| p.devices.values().any(|d| d.allocations > 1000)));
        for cores in [2, 3, 8] {
            let groups = process_groups(&index, cores);
            assert_eq!(groups.len(), cores.min(5), "{groups:?}");
            let mut all: Vec<usize> = groups.concat();
            all.sort_unstable();
            assert_eq!(all, vec![0, 1, 2, 3, 4]);
            let (parallel, _) = replay_per_process(
                &index,
                &Progress::hidden(),
                boundaries(),
                cores,
                OomsKept::default(),
                &|_| NoConsumer,
            );
            assert_eq!(figures(&parallel), figures(&one), "{cores} cores");
        }
        assert_eq!(process_groups(&index, 1), vec![vec![0, 1, 2, 3, 4]]);
    }
}
