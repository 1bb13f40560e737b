//! Numbers as people read them: byte counts in binary units, and counts
//! with the noun agreeing.

/// Bytes in binary units: `512 B`, `2.0 MiB`.
pub fn bytes(value: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut scaled = value as f64;
    let mut unit = 0;
    while scaled >= 1024.0 && unit < UNITS.len() - 1 {
        scaled /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value} B")
    } else {
        format!("{scaled:.1} {}", UNITS[unit])
    }
}

/// Bytes with their sign: `+2.0 MiB`, `-512 B`, `+0 B`.
pub fn signed_bytes(change: i128) -> String {
    let sign = if change < 0 { "-" } else { "+" };
    format!("{sign}{}", bytes(change.unsigned_abs().min(u64::MAX as u128) as u64))
}

/// A length of time as people read it: `850 us`, `25.1 ms`, `12.35 s`,
/// `2 min 41 s`, `3 h 02 min`.
pub fn duration(ns: u64) -> String {
    let seconds = ns / 1_000_000_000;
    if ns < 1_000_000 {
        format!("{} us", ns / 1000)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else if seconds < 60 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else if seconds < 3600 {
        format!("{} min {} s", seconds / 60, seconds % 60)
    } else {
        format!("{} h {:02} min", seconds / 3600, seconds % 3600 / 60)
    }
}

/// A path as a POSIX shell reads it back, for commands the user may paste:
/// as it is when every character is plain, else in single quotes (a quote
/// inside written `'\''`), so that no `;`, `$`, space or newline in it runs
/// or splits anything. Bytes that are not UTF-8 (a path is any bytes) are
/// written `$(printf '\377')` between the quoted pieces, so the pasted
/// command names the very same file.
pub fn shell_quoted(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    let quoted = |text: &str| format!("'{}'", text.replace('\'', "'\\''"));
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.is_empty() && text.chars().all(plain) => text.to_string(),
        Ok(text) => quoted(text),
        Err(_) => bytes
            .utf8_chunks()
            .flat_map(|chunk| {
                let valid = (!chunk.valid().is_empty()).then(|| quoted(chunk.valid()));
                let invalid = chunk.invalid().iter().map(|b| format!("\"$(printf '\\{b:03o}')\""));
                valid.into_iter().chain(invalid)
            })
            .collect(),
    }
}

/// `1 process`, `2 processes`: `n` and the noun that goes with it.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `24000000000` as `24,000,000,000`.
pub fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (at, digit) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_and_signed_bytes_read_as_people_write_them() {
        use super::{duration, signed_bytes};
        assert_eq!(duration(850_000), "850 us");
        assert_eq!(duration(25_100_000), "25.1 ms");
        assert_eq!(duration(12_345_000_000), "12.35 s");
        assert_eq!(duration(161_000_000_000), "2 min 41 s");
        assert_eq!(duration(10_920_000_000_000), "3 h 02 min");
        assert_eq!(signed_bytes(2 << 20), "+2.0 MiB");
        assert_eq!(signed_bytes(-512), "-512 B");
        assert_eq!(signed_bytes(0), "+0 B");
    }

    use super::*;

    #[test]
    fn paths_are_quoted_for_the_shell_only_where_needed() {
        use std::path::Path;
        assert_eq!(
            shell_quoted(Path::new("/tmp/cudatrace-0/run-12")),
            "/tmp/cudatrace-0/run-12"
        );
        assert_eq!(shell_quoted(Path::new("/tmp/a b")), "'/tmp/a b'");
        assert_eq!(shell_quoted(Path::new("/tmp/x;rm -rf ~")), "'/tmp/x;rm -rf ~'");
        assert_eq!(shell_quoted(Path::new("/tmp/it's")), "'/tmp/it'\\''s'");
        use std::os::unix::ffi::OsStrExt;
        let not_utf8 = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/t\xffmp"));
        assert_eq!(shell_quoted(not_utf8), "'/tmp/t'\"$(printf '\\377')\"'mp'");
        assert_eq!(shell_quoted(Path::new("/tmp/$HOME")), "'/tmp/$HOME'");
        assert_eq!(shell_quoted(Path::new("")), "''");
    }

    #[test]
    fn byte_counts_read_naturally() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(2 << 20), "2.0 MiB");
        assert_eq!(bytes(214_748_364_800), "200.0 GiB");
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(count(1, "process", "processes"), "1 process");
        assert_eq!(count(0, "process", "processes"), "0 processes");
        assert_eq!(count(2, "event", "events"), "2 events");
    }
}
