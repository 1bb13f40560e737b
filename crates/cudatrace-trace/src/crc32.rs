//! CRC-32 (IEEE 802.3, reflected, as zlib computes it).

const fn table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                0xEDB8_8320 ^ (crc >> 1)
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static TABLE: [u32; 256] = table();

/// Continues a CRC over `bytes`; start from 0.
pub fn update(crc: u32, bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!crc, |crc, &b| {
        TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_standard_check_value() {
        assert_eq!(super::update(0, b"123456789"), 0xCBF4_3926);
        assert_eq!(super::update(super::update(0, b"1234"), b"56789"), 0xCBF4_3926);
    }
}
