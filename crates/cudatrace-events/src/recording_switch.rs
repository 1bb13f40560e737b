//! The recording switch of a traced job: one file in its spool folder,
//! `recording.switch`, that `cudatrace pause` and `cudatrace resume` write
//! and every traced process of the job reads at each event.
//!
//! The file is a 4096-byte page followed by a log. Every process maps the
//! page shared and reads one word of it per recorded event; the log (the
//! switches, in order, with their times) is read by the collector at the end
//! of the run and goes into the trace, so that the trace says which spans
//! were paused.
//!
//! | offset | type | field |
//! | --- | --- | --- |
//! | 0 | 8 bytes | magic `CUTRSWI\0` |
//! | 8 | u64 | the state word (below), read and written atomically |
//! | 4096 | 16 bytes each | the log: u64 `CLOCK_MONOTONIC` ns, u64 state word it switched to |
//!
//! The state word: bit 0 set = paused; bits 8–15 a stack setting that
//! replaces the job's own (`0` = the job's own, else [`StackSetting`] + 1).
//!
//! While paused, every event is still recorded, so that every byte stays
//! accounted for, but without its call stack: the stack field holds
//! [`PAUSED_STACK`]. That leaves out the costly part of recording (the
//! stack walks) and keeps every output true, as PyTorch's snapshot keeps
//! every block when its history recording is off.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The file's name in the spool folder.
pub const FILE_NAME: &str = "recording.switch";

/// The first 8 bytes of the file.
pub const MAGIC: [u8; 8] = *b"CUTRSWI\0";

/// Bytes of the page every process maps; the log starts here.
pub const PAGE_SIZE: usize = 4096;

/// Offset of the state word in the page.
pub const STATE_OFFSET: usize = 8;

/// Bytes of one log entry.
pub const LOG_ENTRY_SIZE: usize = 16;

/// The stack id an event recorded while paused carries: never a real node
/// id (those count up from 1).
pub const PAUSED_STACK: u32 = u32::MAX;

code_enum! {
    /// Which frames events carry, as the switch can set them.
    pub enum StackSetting read from u8 {
        /// No stacks (only the caller of CUDA).
        None = 0 => "none",
        /// Native frames only.
        Native = 1 => "native",
        /// Python frames only.
        Python = 2 => "python",
        /// Both.
        All = 3 => "all",
    }
}

/// What the switch says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchState {
    /// Events are recorded without call stacks.
    pub paused: bool,
    /// A stack setting that replaces the job's own, if one was given.
    pub stacks: Option<StackSetting>,
}

impl SwitchState {
    /// Recording, with the job's own stack setting: what a job without a
    /// switch file does.
    pub const RECORDING: SwitchState = SwitchState {
        paused: false,
        stacks: None,
    };

    /// The state word.
    pub fn to_word(self) -> u64 {
        let stacks = self.stacks.map_or(0, |s| s as u64 + 1);
        u64::from(self.paused) | stacks << 8
    }

    /// Reads a state word; an unknown stack setting reads as the job's own.
    pub fn from_word(word: u64) -> SwitchState {
        let stacks = match (word >> 8) & 0xff {
            0 => None,
            code => StackSetting::from_code(code as u8 - 1),
        };
        SwitchState {
            paused: word & 1 != 0,
            stacks,
        }
    }
}

/// One switch from the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    /// When, `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// The state switched to.
    pub state: SwitchState,
}

/// A log entry's bytes.
pub fn log_entry(switch: Switch) -> [u8; LOG_ENTRY_SIZE] {
    let mut bytes = [0u8; LOG_ENTRY_SIZE];
    bytes[..8].copy_from_slice(&switch.time_ns.to_le_bytes());
    bytes[8..].copy_from_slice(&switch.state.to_word().to_le_bytes());
    bytes
}

/// The switches logged in a whole file's bytes; `None` when the bytes are
/// not a switch file. A last entry cut short (a writer stopped mid-write) is
/// left out.
pub fn read_log(file: &[u8]) -> Option<Vec<Switch>> {
    if file.len() < PAGE_SIZE || file[..8] != MAGIC {
        return None;
    }
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    Some(
        file[PAGE_SIZE..]
            .chunks_exact(LOG_ENTRY_SIZE)
            .map(|entry| Switch {
                time_ns: word(&entry[..8]),
                state: SwitchState::from_word(word(&entry[8..])),
            })
            .collect(),
    )
}

/// A new file's first page, in state `state`.
pub fn new_page(state: SwitchState) -> Vec<u8> {
    let mut page = vec![0u8; PAGE_SIZE];
    page[..8].copy_from_slice(&MAGIC);
    page[STATE_OFFSET..STATE_OFFSET + 8].copy_from_slice(&state.to_word().to_le_bytes());
    page
}

/// Makes the switch file of spool folder `dir` in state `initial` (logged
/// at `time_ns` when not plain recording), unless a process of the job
/// made it first: that one stays, and this is no error. Both sides make it
/// so: the library when its process creates a spool, `cudatrace run
/// --start-paused`, `pause` and `resume` when the job has none yet.
///
/// The whole file is written under a private name (`recording.switch.<pid>`)
/// and then linked in place, so that no process ever maps half of one.
pub fn make(dir: &Path, initial: SwitchState, time_ns: u64) -> std::io::Result<()> {
    let own = dir.join(format!("{FILE_NAME}.{}", std::process::id()));
    let mut contents = new_page(initial);
    if initial != SwitchState::RECORDING {
        contents.extend_from_slice(&log_entry(Switch {
            time_ns,
            state: initial,
        }));
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&own)
        .and_then(|mut file| file.write_all(&contents));
    let linked = written.and_then(|()| match std::fs::hard_link(&own, dir.join(FILE_NAME)) {
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    });
    let _ = std::fs::remove_file(&own);
    linked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_words_round_trip() {
        for paused in [false, true] {
            for stacks in [
                None,
                Some(StackSetting::None),
                Some(StackSetting::Native),
                Some(StackSetting::Python),
                Some(StackSetting::All),
            ] {
                let state = SwitchState { paused, stacks };
                assert_eq!(SwitchState::from_word(state.to_word()), state);
            }
        }
        assert_eq!(SwitchState::RECORDING.to_word(), 0);
        assert_eq!(
            SwitchState {
                paused: true,
                stacks: Some(StackSetting::Python)
            }
            .to_word(),
            0x301
        );
        assert_eq!(
            SwitchState::from_word(0x901).stacks,
            None,
            "an unknown setting is the job's own"
        );
    }

    #[test]
    fn the_log_is_read_back_and_a_cut_entry_left_out() {
        let mut file = new_page(SwitchState::RECORDING);
        let first = Switch {
            time_ns: 1_000,
            state: SwitchState {
                paused: true,
                stacks: None,
            },
        };
        let second = Switch {
            time_ns: 2_500,
            state: SwitchState {
                paused: false,
                stacks: Some(StackSetting::None),
            },
        };
        file.extend_from_slice(&log_entry(first));
        file.extend_from_slice(&log_entry(second));
        file.extend_from_slice(&[7, 7, 7]);
        assert_eq!(read_log(&file), Some(vec![first, second]));
        assert_eq!(read_log(&file[..100]), None);
        let mut not_a_switch = file.clone();
        not_a_switch[0] = b'X';
        assert_eq!(read_log(&not_a_switch), None);
    }
}
