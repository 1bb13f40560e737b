//! The settings `libcudatrace.so` and the `cudatrace` command share: every
//! environment variable of the contract between them, named once, in one
//! table ([`ALL`]), with what it means, its default and its parser.
//!
//! The library reads most of the variables it acts on once, when it loads,
//! into a [`Settings`] value (looked up with `getenv`); the tree's own
//! variables, the ranks and the host name are read when a spool is made,
//! where they are used. `cudatrace run`
//! writes them for the command it starts, and the command line reads them
//! back, all through the names here. The README's table of environment
//! variables and `cudatrace run --help` are tested against [`ALL`]: a new
//! variable goes here first.
//!
//! (Like bytehound's options: one struct, one table.)

use crate::recording_switch::StackSetting;
use std::ffi::CStr;

/// Who sets a variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetBy {
    /// The user (`cudatrace run` sets some from its options too).
    User,
    /// cudatrace, for the processes it traces: not for users.
    Cudatrace,
    /// Tests that make one machine stand for another host.
    Tests,
    /// Other programs (launchers, the shell): read, never set.
    Others,
}

/// One environment variable of the contract.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// Its name, NUL-terminated, for `getenv` (which allocates nothing).
    pub c_name: &'static CStr,
    /// What it means, in one line.
    pub meaning: &'static str,
    /// What holds when it is not set.
    pub default: &'static str,
    /// Who sets it.
    pub set_by: SetBy,
}

impl Variable {
    /// Its value in this process's environment now (the command line's
    /// side; the library reads through `getenv`).
    pub fn value_os(&self) -> Option<std::ffi::OsString> {
        std::env::var_os(self.name)
    }

    /// Its value now, when set and not empty.
    pub fn non_empty(&self) -> Option<std::ffi::OsString> {
        self.value_os().filter(|value| !value.is_empty())
    }
}

/// A [`Variable`] whose `name` and `c_name` are written once.
macro_rules! variable {
    ($name:literal, $set_by:ident, default: $default:literal, $meaning:literal) => {
        Variable {
            name: $name,
            c_name: match CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) {
                Ok(name) => name,
                Err(_) => panic!("a variable's name has no NUL"),
            },
            meaning: $meaning,
            default: $default,
            set_by: SetBy::$set_by,
        }
    };
}

/// Where a plain `LD_PRELOAD` tree's trace goes.
pub const OUT: Variable = variable!(
    "CUDATRACE_OUT",
    User,
    default: "cudatrace-<program>-<pid>.trace in the root's working folder",
    "Plain LD_PRELOAD runs: where the tree root's trace goes."
);
/// The library `cudatrace run` preloads.
pub const PRELOAD: Variable = variable!(
    "CUDATRACE_PRELOAD",
    User,
    default: "the libcudatrace.so next to cudatrace",
    "cudatrace run: the library to preload, if not --preload."
);
/// The `cudatrace` that collects a plain `LD_PRELOAD` tree.
pub const CLI: Variable = variable!(
    "CUDATRACE_CLI",
    User,
    default: "the cudatrace next to libcudatrace.so",
    "Plain LD_PRELOAD runs: the cudatrace binary that collects the tree."
);
/// The folder spools go to.
pub const DIR: Variable = variable!(
    "CUDATRACE_DIR",
    User,
    default: "$TMPDIR/cudatrace-<uid>/",
    "The folder spools go to; with plain LD_PRELOAD, only spools are kept (then cudatrace collect DIR)."
);
/// Which frames events carry.
pub const STACKS: Variable = variable!(
    "CUDATRACE_STACKS",
    User,
    default: "all",
    "none, native, python or all: which call-stack frames each event carries (--stacks)."
);
/// Whether PyTorch's caching allocator is followed.
pub const TENSORS: Variable = variable!(
    "CUDATRACE_TENSORS",
    User,
    default: "on where a known PyTorch version is found",
    "off: do not attach to PyTorch's caching allocator (--tensors off)."
);
/// Whether recording starts paused.
pub const START_PAUSED: Variable = variable!(
    "CUDATRACE_START_PAUSED",
    User,
    default: "recording from the start",
    "1: start with recording paused, events without call stacks until cudatrace resume (--start-paused)."
);
/// The deepest stack recorded.
pub const MAX_DEPTH: Variable = variable!(
    "CUDATRACE_MAX_DEPTH",
    User,
    default: "64",
    "Deepest stack walked for each event, 1 to 256 frames; in Python, the frames below the outermost Python call are walked once a thread and not counted (--max-depth)."
);
/// The trace's size cap.
pub const MAX_SIZE: Variable = variable!(
    "CUDATRACE_MAX_SIZE",
    User,
    default: "2GiB",
    "Largest the trace may grow, such as 2GiB or unlimited; past it older detail is folded (--max-size)."
);
/// The memory limit.
pub const LIMIT: Variable = variable!(
    "CUDATRACE_LIMIT",
    User,
    default: "off",
    "A size such as 24GiB: every GPU behaves like a card of that size for the whole tree (--limit)."
);
/// Whether kernel launches are hooked.
pub const LAUNCH_HOOKS: Variable = variable!(
    "CUDATRACE_LAUNCH_HOOKS",
    User,
    default: "launches hooked",
    "0: leave kernel launches alone (--no-launch-hooks)."
);
/// Whether the device's memory is read at a rate and at exit.
pub const SAMPLES: Variable = variable!(
    "CUDATRACE_SAMPLES",
    User,
    default: "readings taken",
    "0: no rate-limited or exit readings of the device's memory."
);
/// Whether a plain `LD_PRELOAD` root says that nothing can be recorded.
pub const QUIET: Variable = variable!(
    "CUDATRACE_QUIET",
    User,
    default: "said once",
    "1: with plain LD_PRELOAD, do not say on stderr that nothing can be recorded."
);
/// The run's notice descriptor (see [`crate::notices`]).
pub const NOTICE: Variable = variable!(
    "CUDATRACE_NOTICE",
    Cudatrace,
    default: "unset",
    "Set by cudatrace run: fd:device:inode of the descriptor through which a process that cannot create its spool says so."
);
/// Loading the library without recording.
pub const DISABLE: Variable = variable!(
    "CUDATRACE_DISABLE",
    User,
    default: "recording",
    "Anything but 0 or empty: load the library without recording."
);
/// Who collects the tree's spools.
pub const COLLECTOR: Variable = variable!(
    "CUDATRACE_COLLECTOR",
    Cudatrace,
    default: "unset: spools only",
    "Set by cudatrace: run (cudatrace run collects) or spawn (the tree's first writer starts a collector)."
);
/// The root of a plain `LD_PRELOAD` tree.
pub const ROOT_PID: Variable = variable!(
    "CUDATRACE_ROOT_PID",
    Cudatrace,
    default: "unset",
    "Set by cudatrace: the pid of the traced tree's root."
);
/// Set by the root of a plain-`LD_PRELOAD` tree given no trace name
/// ([`OUT`]): the folder the trace goes to (the root's working folder),
/// where the collector names it after the first image that records
/// (`naming::default_trace_name`).
pub const TRACE_FOLDER: Variable = variable!(
    "CUDATRACE_TRACE_FOLDER",
    Cudatrace,
    default: "unset",
    "Set by cudatrace: the folder where the tree's collector names the trace when no CUDATRACE_OUT was given."
);
/// The host name to record, for tests.
pub const TEST_HOST: Variable = variable!(
    "CUDATRACE_TEST_HOST",
    Tests,
    default: "the machine's name",
    "For tests only: the host name to record instead of the machine's (for cudatrace merge)."
);
/// Nanoseconds added to `CLOCK_MONOTONIC`, for tests.
pub const TEST_CLOCK_OFFSET_NS: Variable = variable!(
    "CUDATRACE_TEST_CLOCK_OFFSET_NS",
    Tests,
    default: "0",
    "For tests only: nanoseconds added to CLOCK_MONOTONIC, as if the machine had booted that much earlier."
);
/// The process's rank.
pub const RANK: Variable = variable!(
    "RANK",
    Others,
    default: "no rank",
    "Read, never set: the process's rank in a distributed job, recorded with its host name."
);
/// The process's rank on its host.
pub const LOCAL_RANK: Variable = variable!(
    "LOCAL_RANK",
    Others,
    default: "no rank",
    "Read, never set: the process's rank on its host."
);
/// The number of ranks.
pub const WORLD_SIZE: Variable = variable!(
    "WORLD_SIZE",
    Others,
    default: "no rank",
    "Read, never set: how many ranks the job has."
);
/// Where the private spool folders live.
pub const TMPDIR: Variable = variable!(
    "TMPDIR",
    Others,
    default: "/tmp",
    "Where the private spool folders live ($TMPDIR/cudatrace-<uid>/)."
);

/// Every variable, in the README's order.
pub const ALL: &[Variable] = &[
    OUT,
    PRELOAD,
    CLI,
    DIR,
    STACKS,
    TENSORS,
    START_PAUSED,
    MAX_DEPTH,
    MAX_SIZE,
    LIMIT,
    LAUNCH_HOOKS,
    SAMPLES,
    QUIET,
    NOTICE,
    DISABLE,
    COLLECTOR,
    ROOT_PID,
    TRACE_FOLDER,
    RANK,
    LOCAL_RANK,
    WORLD_SIZE,
    TEST_HOST,
    TEST_CLOCK_OFFSET_NS,
    TMPDIR,
];

/// Not a setting, and not in [`ALL`]: a signal the library raises in the
/// thread creating its spool, while it does, so that a test's handler meets
/// the spool half made. Read only by a library built with its `testing`
/// feature, which release builds leave out (the name is then in no binary).
pub const TEST_SIGNAL_WHILE_OPENING: Variable = variable!(
    "CUDATRACE_TEST_SIGNAL_WHILE_OPENING",
    Tests,
    default: "none",
    "For the library's own tests: a signal number raised while the spool is made."
);

/// Not a setting, and not in [`ALL`]: `1` makes every native walk run to
/// the stack's end, as before walks stopped at the outermost Python call,
/// so that a test can compare the two. Read only by a library built with
/// its `testing` feature.
pub const TEST_WHOLE_WALKS: Variable = variable!(
    "CUDATRACE_TEST_WHOLE_WALKS",
    Tests,
    default: "off",
    "For the library's own tests: `1` walks every native stack to its end."
);

/// [`COLLECTOR`]'s value under `cudatrace run`.
pub const COLLECTOR_RUN: &str = "run";
/// [`COLLECTOR`]'s value in a plain `LD_PRELOAD` tree whose first writer
/// starts a collector.
pub const COLLECTOR_SPAWN: &str = "spawn";

/// The memory limit as [`LIMIT`] sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSetting {
    /// No limit: unset, empty, `0` or `off`.
    Off,
    /// Every device holds this many bytes at most.
    Bytes(u64),
    /// A value that is no size: said once, and no limit applies.
    NotASize,
}

/// What the library acts on, read once when it loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// [`DISABLE`]: load without recording.
    pub disabled: bool,
    /// [`LAUNCH_HOOKS`]: kernel launches are hooked.
    pub launch_hooks: bool,
    /// [`SAMPLES`]: rate-limited and exit readings are taken.
    pub samples: bool,
    /// [`TEST_CLOCK_OFFSET_NS`], signed.
    pub clock_offset_ns: i64,
    /// [`NOTICE`]: the run's notice descriptor, `(fd, device, inode)`.
    pub notice: Option<(i32, u64, u64)>,
    /// [`START_PAUSED`].
    pub start_paused: bool,
    /// [`STACKS`]; `None` keeps the default (all).
    pub stacks: Option<StackSetting>,
    /// [`MAX_DEPTH`], as given; `None` keeps the default.
    pub max_depth: Option<u32>,
    /// [`TENSORS`]: PyTorch's allocator is followed.
    pub tensors: bool,
    /// [`LIMIT`].
    pub limit: LimitSetting,
    /// [`QUIET`].
    pub quiet: bool,
}

impl Settings {
    /// Every setting at its default: what an empty environment gives.
    pub const DEFAULT: Settings = Settings {
        disabled: false,
        launch_hooks: true,
        samples: true,
        clock_offset_ns: 0,
        notice: None,
        start_paused: false,
        stacks: None,
        max_depth: None,
        tensors: true,
        limit: LimitSetting::Off,
        quiet: false,
    };

    /// Reads every setting through `lookup`, which gives a variable's
    /// value as bytes (`None` when unset). Allocates only to read a limit.
    pub fn read<'a>(lookup: impl Fn(&Variable) -> Option<&'a [u8]>) -> Settings {
        Settings {
            disabled: disabled(lookup(&DISABLE)),
            launch_hooks: lookup(&LAUNCH_HOOKS) != Some(b"0"),
            samples: lookup(&SAMPLES) != Some(b"0"),
            clock_offset_ns: lookup(&TEST_CLOCK_OFFSET_NS).map_or(0, parse_clock_offset),
            notice: lookup(&NOTICE)
                .and_then(|value| std::str::from_utf8(value).ok())
                .and_then(crate::notices::parse_descriptor),
            start_paused: lookup(&START_PAUSED) == Some(b"1"),
            stacks: lookup(&STACKS).and_then(parse_stacks),
            max_depth: lookup(&MAX_DEPTH).and_then(|value| std::str::from_utf8(value).ok()?.parse().ok()),
            tensors: !matches!(lookup(&TENSORS), Some(b"off" | b"0")),
            limit: parse_limit(lookup(&LIMIT)),
            quiet: lookup(&QUIET) == Some(b"1"),
        }
    }
}

/// [`DISABLE`]'s parser: set to anything but `0` or empty.
pub fn disabled(value: Option<&[u8]>) -> bool {
    value.is_some_and(|value| value != b"0" && !value.is_empty())
}

/// [`STACKS`]'s parser; `None` for a value it does not know.
pub fn parse_stacks(value: &[u8]) -> Option<StackSetting> {
    StackSetting::from_name(std::str::from_utf8(value).ok()?)
}

/// [`TEST_CLOCK_OFFSET_NS`]'s parser: a signed decimal, 0 when it is none.
pub fn parse_clock_offset(value: &[u8]) -> i64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// [`LIMIT`]'s parser: a size such as `24GiB`; `0`, `off` or empty for none.
pub fn parse_limit(value: Option<&[u8]>) -> LimitSetting {
    let Some(value) = value.filter(|value| !value.is_empty()) else {
        return LimitSetting::Off;
    };
    let text = String::from_utf8_lossy(value);
    if matches!(text.trim(), "0" | "off") {
        return LimitSetting::Off;
    }
    match crate::sizes::parse_bytes(&text) {
        Ok(bytes) if bytes > 0 => LimitSetting::Bytes(bytes),
        _ => LimitSetting::NotASize,
    }
}

/// [`TEST_SIGNAL_WHILE_OPENING`]'s parser: a signal number, 1 to 64.
pub fn parse_test_signal(value: &[u8]) -> Option<i32> {
    std::str::from_utf8(value)
        .ok()?
        .parse()
        .ok()
        .filter(|signal| (1..=64).contains(signal))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&Variable) -> Option<&'a [u8]> {
        move |variable| {
            pairs
                .iter()
                .find(|(name, _)| *name == variable.name)
                .map(|(_, value)| value.as_bytes())
        }
    }

    #[test]
    fn an_empty_environment_is_every_default() {
        assert_eq!(Settings::read(environment(&[])), Settings::DEFAULT);
    }

    #[test]
    fn every_name_is_once_in_the_table_and_its_c_name_is_the_same() {
        let mut names: Vec<_> = ALL.iter().map(|variable| variable.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for variable in ALL.iter().chain([&TEST_SIGNAL_WHILE_OPENING, &TEST_WHOLE_WALKS]) {
            assert_eq!(variable.c_name.to_str(), Ok(variable.name));
        }
        assert!(!ALL.iter().any(|v| v.name == TEST_SIGNAL_WHILE_OPENING.name));
        assert!(!ALL.iter().any(|v| v.name == TEST_WHOLE_WALKS.name));
    }

    #[test]
    fn values_read_as_the_library_always_read_them() {
        let read = Settings::read(environment(&[
            ("CUDATRACE_DISABLE", "0"),
            ("CUDATRACE_LAUNCH_HOOKS", "0"),
            ("CUDATRACE_SAMPLES", "1"),
            ("CUDATRACE_TEST_CLOCK_OFFSET_NS", " -25 "),
            ("CUDATRACE_NOTICE", "7:2049:131"),
            ("CUDATRACE_START_PAUSED", "1"),
            ("CUDATRACE_STACKS", "python"),
            ("CUDATRACE_MAX_DEPTH", "300"),
            ("CUDATRACE_TENSORS", "0"),
            ("CUDATRACE_LIMIT", " 24GiB"),
            ("CUDATRACE_QUIET", "1"),
        ]));
        assert_eq!(
            read,
            Settings {
                disabled: false,
                launch_hooks: false,
                samples: true,
                clock_offset_ns: -25,
                notice: Some((7, 2049, 131)),
                start_paused: true,
                stacks: Some(StackSetting::Python),
                max_depth: Some(300),
                tensors: false,
                limit: LimitSetting::Bytes(24 << 30),
                quiet: true,
            }
        );
        assert!(disabled(Some(b"yes")));
        assert!(!disabled(Some(b"")));
        assert!(!disabled(None));
        assert_eq!(parse_stacks(b"everything"), None);
        assert_eq!(parse_clock_offset(b"soon"), 0);
        for off in [&b""[..], b"0", b" off "] {
            assert_eq!(parse_limit(Some(off)), LimitSetting::Off);
        }
        assert_eq!(parse_limit(Some(b"lots")), LimitSetting::NotASize);
        assert_eq!(parse_limit(Some(b"0.1")), LimitSetting::NotASize, "no whole byte");
        assert_eq!(parse_test_signal(b"17"), Some(17));
        assert_eq!(parse_test_signal(b"65"), None);
    }
}
