//! Bytes held by a CUDA array, from its descriptor.
//!
//! The driver pads arrays for alignment; asking it how much
//! (`cuArrayGetMemoryRequirements`) would be a CUDA call the program did not
//! make, so the logical size is recorded instead.

/// Bytes per element times 2, for a `CUarray_format` (times 2 so that 4:2:0
/// and block-compressed formats come out whole). `None` for an unknown format.
fn doubled_bytes_per_element(format: i32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 2,               // 8-bit integers
        0x02 | 0x09 | 0x10 => 4,        // 16-bit integers, half
        0x03 | 0x0a | 0x20 => 8,        // 32-bit integers, float
        0xb0 => 3,                      // NV12: 1.5 bytes per pixel
        0xc0 | 0xc6 => 2,               // UNORM/SNORM INT8X1
        0xc1 | 0xc7 | 0xc3 | 0xc9 => 4, // INT8X2, INT16X1
        0xc2 | 0xc8 | 0xc4 | 0xca => 8, // INT8X4, INT16X2
        0xc5 | 0xcb => 16,              // INT16X4
        0x91 | 0x92 | 0x97 | 0x98 => 1, // BC1, BC4: 8 bytes per 4x4 block
        0x93..=0x96 | 0x99..=0x9e => 2, // BC2, BC3, BC5, BC6H, BC7: 16 bytes per block
        _ => return None,
    })
}

/// Logical bytes of an array of `width x height x depth` elements with
/// `channels` channels; a zero height or depth means a lower-dimensional array.
/// Unknown formats count one byte per element and channel.
pub(crate) fn array_bytes(width: u64, height: u64, depth: u64, format: i32, channels: u32) -> u64 {
    let elements = width
        .saturating_mul(height.max(1))
        .saturating_mul(depth.max(1))
        .saturating_mul(u64::from(channels.max(1)));
    match doubled_bytes_per_element(format) {
        Some(doubled) => elements.saturating_mul(doubled) / 2,
        None => elements,
    }
}

/// Logical bytes of a mipmapped array: every level halves each extent that is
/// in use, down to one element.
pub(crate) fn mipmapped_array_bytes(
    width: u64,
    height: u64,
    depth: u64,
    format: i32,
    channels: u32,
    levels: u32,
) -> u64 {
    let shrink = |extent: u64, level: u32| {
        if extent == 0 {
            0
        } else {
            (extent >> level.min(63)).max(1)
        }
    };
    (0..levels.max(1)).fold(0u64, |total, level| {
        total.saturating_add(array_bytes(
            shrink(width, level),
            shrink(height, level),
            shrink(depth, level),
            format,
            channels,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_formats_multiply_extents_channels_and_element_size() {
        assert_eq!(array_bytes(100, 0, 0, 0x20, 4), 1600); // float4, 1D
        assert_eq!(array_bytes(64, 32, 0, 0x01, 1), 2048); // uchar, 2D
        assert_eq!(array_bytes(8, 8, 8, 0x10, 2), 2048); // half2, 3D
        assert_eq!(array_bytes(64, 64, 0, 0xb0, 1), 6144); // NV12
        assert_eq!(array_bytes(16, 16, 0, 0x91, 1), 128); // BC1: 16 blocks of 8 bytes
        assert_eq!(array_bytes(10, 10, 0, 0x7777, 3), 300); // unknown format
    }

    #[test]
    fn mipmaps_add_every_level() {
        // 8x8 float: 256 + 64 + 16 + 4 bytes.
        assert_eq!(mipmapped_array_bytes(8, 8, 0, 0x20, 1, 4), 340);
        // A 1D mipmap keeps height at zero.
        assert_eq!(mipmapped_array_bytes(4, 0, 0, 0x01, 1, 3), 4 + 2 + 1);
    }
}
