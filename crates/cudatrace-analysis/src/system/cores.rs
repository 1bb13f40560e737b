//! How many threads a pass over a trace may use besides its own, and
//! running work on them.

/// Helper threads at most, whatever the machine: decoding does not gain
/// past a few, and a shared machine's other jobs need theirs.
const MOST_HELPERS: usize = 8;

/// Threads worth starting besides the caller's: one fewer than the cores
/// this process may run on (`taskset` and cgroups included), none on one.
pub fn helpers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_sub(1).min(MOST_HELPERS)
}

/// Runs `work` on each of `inputs`, each on a thread of its own, and gives
/// the results back in the inputs' order. A thread that panics panics the
/// caller with its payload, as one thread would.
pub fn each_on_a_thread<I: Send, T: Send>(inputs: Vec<I>, work: impl Fn(I) -> T + Sync) -> Vec<T> {
    let work = &work;
    std::thread::scope(|scope| {
        let threads: Vec<_> = inputs
            .into_iter()
            .map(|input| scope.spawn(move || work(input)))
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_the_inputs_order_and_a_panic_goes_on() {
        assert_eq!(each_on_a_thread(vec![3u64, 1, 2], |n| n * 10), vec![30, 10, 20]);
        let caught = std::panic::catch_unwind(|| each_on_a_thread(vec![1, 2], |n| assert_ne!(n, 2, "two")));
        let payload = caught.expect_err("the second thread panicked");
        let text = payload.downcast_ref::<String>().map(String::as_str).unwrap_or("");
        assert!(text.contains("two"), "{text}");
    }
}
