//! What `/proc` says of the machine's processes: their pids, parents and
//! environments. A process this user cannot read has no environment here.

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

/// The parent pid of `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
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
