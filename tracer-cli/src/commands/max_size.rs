//! The trace's size cap: `run --max-size SIZE` and `CUDATRACE_MAX_SIZE`,
//! which the collector of a plain `LD_PRELOAD` tree honours too.

use cudatrace_events::sizes::SizeError;

/// The cap when none is given: 2 GiB.
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;
/// The variable that sets the cap where `--max-size` is not given.
pub const MAX_SIZE_VARIABLE: &str = cudatrace_events::settings::MAX_SIZE.name;
/// The smallest cap accepted.
pub const SMALLEST_MAX_SIZE: u64 = crate::collector::fold_schedule::SMALLEST_CAP;

/// A cap as written: bytes, or no cap at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxSize {
    /// At most this many bytes.
    Bytes(u64),
    /// `unlimited`.
    Unlimited,
}

impl MaxSize {
    /// The cap in bytes; `None` when unlimited.
    pub fn bytes(self) -> Option<u64> {
        match self {
            MaxSize::Bytes(bytes) => Some(bytes),
            MaxSize::Unlimited => None,
        }
    }
}

/// Parses `2GiB`, `256MiB`, `1.5G`, `500MB`, `1048576` or `unlimited`:
/// K, M, G and T (with or without `iB`) count in 1024s, KB, MB, GB and TB in
/// 1000s. Refuses anything under [`SMALLEST_MAX_SIZE`].
pub fn parse_max_size(text: &str) -> Result<MaxSize, String> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("unlimited") {
        return Ok(MaxSize::Unlimited);
    }
    let bytes = cudatrace_events::sizes::parse_bytes(trimmed).map_err(|error| match error {
        SizeError::NotASize => not_a_size(text),
        SizeError::TooLarge => format!("'{text}' is too large; give unlimited for no cap"),
    })?;
    if bytes < SMALLEST_MAX_SIZE {
        return Err(format!("'{text}' is too small: a trace needs at least 64KiB"));
    }
    Ok(MaxSize::Bytes(bytes))
}

/// Why `text` is no size, and what is one.
fn not_a_size(text: &str) -> String {
    format!("'{text}' is not a size (a number of bytes, K, M, G or T, with iB or B, such as 2GiB, 500MB or unlimited)")
}

/// The cap in bytes (`None`: unlimited): `--max-size` if given, else
/// `CUDATRACE_MAX_SIZE`, else [`DEFAULT_MAX_SIZE`].
pub fn trace_cap(flag: Option<MaxSize>) -> Result<Option<u64>, String> {
    if let Some(size) = flag {
        return Ok(size.bytes());
    }
    match std::env::var(MAX_SIZE_VARIABLE) {
        Ok(text) if !text.trim().is_empty() => parse_max_size(&text)
            .map(MaxSize::bytes)
            .map_err(|why| format!("{MAX_SIZE_VARIABLE}: {why}")),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{MAX_SIZE_VARIABLE} is not a size")),
        _ => Ok(Some(DEFAULT_MAX_SIZE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(parse_max_size("2GiB"), Ok(MaxSize::Bytes(2 << 30)));
        assert_eq!(parse_max_size("256MiB"), Ok(MaxSize::Bytes(256 << 20)));
        assert_eq!(parse_max_size("64m"), Ok(MaxSize::Bytes(64 << 20)));
        assert_eq!(parse_max_size("1.5G"), Ok(MaxSize::Bytes(3 << 29)));
        assert_eq!(parse_max_size("500MB"), Ok(MaxSize::Bytes(500_000_000)));
        assert_eq!(parse_max_size("1048576"), Ok(MaxSize::Bytes(1 << 20)));
        assert_eq!(parse_max_size(" 64 KiB "), Ok(MaxSize::Bytes(64 << 10)));
        assert_eq!(parse_max_size("Unlimited"), Ok(MaxSize::Unlimited));
    }

    #[test]
    fn what_is_not_a_size_is_refused_in_one_line() {
        assert_eq!(
            parse_max_size("lots"),
            Err("'lots' is not a size (a number of bytes, K, M, G or T, with iB or B, such as 2GiB, 500MB or unlimited)".to_string())
        );
        assert_eq!(
            parse_max_size("12XB"),
            Err("'12XB' is not a size (a number of bytes, K, M, G or T, with iB or B, such as 2GiB, 500MB or unlimited)".to_string())
        );
        assert_eq!(
            parse_max_size("1.2.3M"),
            Err("'1.2.3M' is not a size (a number of bytes, K, M, G or T, with iB or B, such as 2GiB, 500MB or unlimited)".to_string())
        );
        assert_eq!(
            parse_max_size("1000"),
            Err("'1000' is too small: a trace needs at least 64KiB".to_string())
        );
        assert_eq!(
            parse_max_size("99999999999T"),
            Err("'99999999999T' is too large; give unlimited for no cap".to_string())
        );
    }
}
