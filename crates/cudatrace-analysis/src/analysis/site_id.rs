//! The number a call site is known by across traces: a fixed hash of its
//! key ([`super::site_key_of`], what `diff` matches call sites of two runs
//! by), so that the same line of the program gets the same number in every
//! rank's trace, whatever its process, stack node ids or load addresses.
//!
//! The hash is 64-bit FNV-1a over the key's UTF-8 bytes (offset basis
//! 0xcbf29ce484222325, prime 0x100000001b3): fixed by its definition, the
//! same on every machine and in every version, unlike a seeded hasher.

/// FNV-1a's 64-bit offset basis.
const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's 64-bit prime.
const PRIME: u64 = 0x0100_0000_01b3;

/// The id of the call site whose key is `key`.
pub fn call_site_id(key: &str) -> u64 {
    key.bytes()
        .fold(OFFSET_BASIS, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_fnv_1a_64_of_the_key() {
        // The function's published test values.
        assert_eq!(call_site_id(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(call_site_id("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(call_site_id("foobar"), 0x8594_4171_f739_67e8);
        // A key as `diff` makes them: this number is part of the export's format.
        assert_eq!(call_site_id("/home/me/model.py:31 forward"), 0x9aa5_1635_c3b3_c712);
    }
}
