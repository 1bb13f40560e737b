//! Sizes as people write them (`24GiB`, `500MB`, `1.5G`, `1048576`), read
//! the same way by the command line and by the library, which takes them
//! from the environment.

/// Why a text is not a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not a number followed by a known unit.
    NotASize,
    /// More bytes than 64 bits hold.
    TooLarge,
}

/// Parses a number of bytes with an optional unit: K, M, G and T (with or
/// without `iB`) count in 1024s, KB, MB, GB and TB in 1000s, B or nothing
/// in bytes. Fractions are allowed (`1.5G`) and rounded down to a byte.
pub fn parse_bytes(text: &str) -> Result<u64, SizeError> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let unit_bytes: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(SizeError::NotASize),
    };
    if !number.contains('.') {
        let whole: u64 = number.parse().map_err(|_| {
            if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
                SizeError::TooLarge
            } else {
                SizeError::NotASize
            }
        })?;
        return whole.checked_mul(unit_bytes).ok_or(SizeError::TooLarge);
    }
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or(SizeError::NotASize)?;
    let bytes = value * unit_bytes as f64;
    if bytes >= u64::MAX as f64 {
        return Err(SizeError::TooLarge);
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_count_in_1024s_or_1000s() {
        assert_eq!(parse_bytes("24GiB"), Ok(24 << 30));
        assert_eq!(parse_bytes("24G"), Ok(24 << 30));
        assert_eq!(parse_bytes(" 512 MiB "), Ok(512 << 20));
        assert_eq!(parse_bytes("500MB"), Ok(500_000_000));
        assert_eq!(parse_bytes("1.5g"), Ok(3 << 29));
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("7b"), Ok(7));
    }

    #[test]
    fn what_is_no_size_says_why() {
        assert_eq!(parse_bytes("lots"), Err(SizeError::NotASize));
        assert_eq!(parse_bytes(""), Err(SizeError::NotASize));
        assert_eq!(parse_bytes("-5"), Err(SizeError::NotASize));
        assert_eq!(parse_bytes("24 GiBs"), Err(SizeError::NotASize));
        assert_eq!(parse_bytes("1.2.3G"), Err(SizeError::NotASize));
        assert_eq!(parse_bytes("99999999999999999999"), Err(SizeError::TooLarge));
        assert_eq!(parse_bytes("17179869184T"), Err(SizeError::TooLarge));
    }
}
