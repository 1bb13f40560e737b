//! The part of a run an output covers: `--from` and `--to`, in seconds
//! since the run started.

/// A span of the run, in `CLOCK_MONOTONIC` nanoseconds; either end open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// First instant covered.
    pub from_ns: Option<u64>,
    /// Last instant covered.
    pub to_ns: Option<u64>,
}

impl Window {
    /// The window from `from` to `to` seconds after `start_ns`.
    pub fn seconds(start_ns: u64, from: Option<f64>, to: Option<f64>) -> Window {
        let at = |seconds: f64| start_ns.saturating_add((seconds.max(0.0) * 1e9) as u64);
        Window {
            from_ns: from.map(at),
            to_ns: to.map(at),
        }
    }

    /// Whether `time_ns` is before the window.
    pub fn is_before(&self, time_ns: u64) -> bool {
        self.from_ns.is_some_and(|from| time_ns < from)
    }

    /// Whether `time_ns` is after the window.
    pub fn is_after(&self, time_ns: u64) -> bool {
        self.to_ns.is_some_and(|to| time_ns > to)
    }

    /// Whether `time_ns` is inside the window.
    pub fn contains(&self, time_ns: u64) -> bool {
        !self.is_before(time_ns) && !self.is_after(time_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::Window;

    #[test]
    fn seconds_count_from_the_start_and_either_end_may_be_open() {
        let window = Window::seconds(1_000, Some(1.5), Some(2.0));
        assert_eq!(
            window,
            Window {
                from_ns: Some(1_500_001_000),
                to_ns: Some(2_000_001_000)
            }
        );
        assert!(window.is_before(1_500_000_999));
        assert!(window.contains(1_500_001_000) && window.contains(2_000_001_000));
        assert!(window.is_after(2_000_001_001));
        let open = Window::seconds(1_000, None, None);
        assert!(open.contains(0) && open.contains(u64::MAX));
    }
}
