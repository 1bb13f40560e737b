//! What `/proc` says of the machine's processes: their pids, parents,
//! sessions, terminals and environments. A process this user cannot read
//! has no environment here.

/// Every pid in `/proc`.
pub fn pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// The fields of `/proc/PID/stat` after the name (field 2, which is in
/// parentheses and may hold spaces): the state first, then the parent.
fn stat_fields_after_name(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    Some(after_name.split_whitespace().map(str::to_owned).collect())
}

/// The parent pid of `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    stat_fields_after_name(pid)?.get(1)?.parse().ok()
}

/// The session id of `pid` and its controlling terminal's device number
/// (0: none), from `/proc/PID/stat`. A session whose leader lies outside
/// this pid namespace reads as 0.
pub fn session_and_terminal(pid: u32) -> Option<(u32, u32)> {
    let fields = stat_fields_after_name(pid)?;
    // Fields 6 (session) and 7 (tty_nr), counted from the pid's 1.
    let session = fields.get(3)?.parse().ok()?;
    let terminal = fields.get(4)?.parse::<i64>().ok()?;
    Some((session, u32::try_from(terminal).unwrap_or(0)))
}

/// The environment `pid` started with, as `KEY=VALUE` entries.
pub fn environment(pid: u32) -> Option<Vec<Vec<u8>>> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(
        environ
            .split(|&b| b == 0)
            .filter(|entry| !entry.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
    )
}

/// The value of `key` in `environment`, if set.
pub fn value<'a>(environment: &'a [Vec<u8>], key: &str) -> Option<&'a [u8]> {
    environment.iter().find_map(|entry| {
        entry
            .strip_prefix(key.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
    })
}
