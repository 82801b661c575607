//! [`PrepackKey`]: what identifies one pre-packed weight in the cache.

use std::fmt;

use crate::exec::packed::BSource;
use crate::exec::StorageType;

/// How a weight was packed. Two packings of one weight are two cache entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PackFormat {
    /// matmul's B operand in the 64 x 16 tile, vec4-along-N layout of
    /// `shaders/matmul_packed.wgsl` (see [`crate::exec::packed`]), packed from a source laid
    /// out as `source`, stored as `storage` (the weight's own type: f32 or f16).
    MatmulB {
        /// The source weight's layout (`[k, n]` for `matmul`, `[n, k]` for `matmul_bt`).
        source: BSource,
        /// The element type of the packed data.
        storage: StorageType,
    },
}

impl fmt::Display for PackFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let PackFormat::MatmulB { source, storage } = self;
        let layout = match source {
            BSource::KByN => "matmul-b/kn",
            BSource::NByK => "matmul-b/nk",
        };
        match storage {
            StorageType::F32 => f.write_str(layout),
            StorageType::F16 => write!(f, "{layout}/f16"),
        }
    }
}

/// The identity of one pre-packed weight: the weight's name and shape as the model
/// gives them, a hash of its bytes, and the packing format.
///
/// Two graphs (or two nodes) share a cache entry exactly when all four agree, so a
/// weight whose values change (a new seed, a fine-tuned copy with the same name) is
/// packed again under a new key instead of reusing stale data. The content hash is
/// 64-bit FNV-1a over the little-endian bytes ([`content_hash`]): fast and stable
/// across runs, not a defence against crafted collisions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrepackKey {
    /// The weight's name (e.g. `h0.mlp.w1`).
    pub weight: String,
    /// The weight's shape as stored (before packing).
    pub shape: Vec<u64>,
    /// [`content_hash`] of the weight's bytes.
    pub content_hash: u64,
    /// The packing.
    pub format: PackFormat,
}

impl PrepackKey {
    /// The key of f32 weight `weight` with `shape` and `values`, packed as `format`.
    pub fn for_f32(
        weight: impl Into<String>,
        shape: &[u64],
        values: &[f32],
        format: PackFormat,
    ) -> PrepackKey {
        PrepackKey {
            weight: weight.into(),
            shape: shape.to_vec(),
            content_hash: content_hash(bytemuck::cast_slice(values)),
            format,
        }
    }
}

impl fmt::Display for PrepackKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} #{:016x} as {}",
            self.weight, self.shape, self.content_hash, self.format
        )
    }
}

/// 64-bit FNV-1a of `bytes`.
pub fn content_hash(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_hash_matches_fnv1a_test_vectors() {
        assert_eq!(content_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(content_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(content_hash(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn keys_differ_by_values_shape_and_format() {
        let kn = PackFormat::MatmulB {
            source: BSource::KByN,
            storage: StorageType::F32,
        };
        let nk = PackFormat::MatmulB {
            source: BSource::NByK,
            storage: StorageType::F32,
        };
        let half = PackFormat::MatmulB {
            source: BSource::KByN,
            storage: StorageType::F16,
        };
        let base = PrepackKey::for_f32("w", &[2, 2], &[1.0, 2.0, 3.0, 4.0], kn);
        assert_eq!(
            base,
            PrepackKey::for_f32("w", &[2, 2], &[1.0, 2.0, 3.0, 4.0], kn)
        );
        assert_ne!(
            base,
            PrepackKey::for_f32("w", &[2, 2], &[1.0, 2.0, 3.0, 5.0], kn)
        );
        assert_ne!(
            base,
            PrepackKey::for_f32("w", &[4, 1], &[1.0, 2.0, 3.0, 4.0], kn)
        );
        assert_ne!(
            base,
            PrepackKey::for_f32("w", &[2, 2], &[1.0, 2.0, 3.0, 4.0], nk)
        );
        assert_ne!(
            base,
            PrepackKey::for_f32("w", &[2, 2], &[1.0, 2.0, 3.0, 4.0], half)
        );
        assert!(base.to_string().starts_with("w [2, 2] #"));
        assert!(base.to_string().ends_with("as matmul-b/kn"), "{base}");
        assert_eq!(half.to_string(), "matmul-b/kn/f16");
    }
}
