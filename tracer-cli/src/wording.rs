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

/// `1 process`, `2 processes`: `n` and the noun that goes with it.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

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
