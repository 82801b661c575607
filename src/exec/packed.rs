//! The packed layout of matmul's B operand, and its CPU reference.
//!
//! `shaders/matmul.wgsl` computes a 64 x 64 block of the output per workgroup of
//! 16 x 16 threads, stepping through `k` 16 at a time; thread column `tx` needs, for
//! each `k` of a step, the four columns `tx, tx + 16, tx + 32, tx + 48` of the block.
//! The packed layout stores exactly that, in the order the kernel walks it:
//!
//! ```text
//! packed[(((nb * k_steps + ks) * 16 + kr) * 16 + tx) * 4 + j]
//!     = B[ks * 16 + kr, nb * 64 + tx + 16 * j]      (0 outside B)
//! ```
//!
//! with `nb < ceil(n / 64)` the column block and `ks < ceil(k / 16)` the k step. One
//! step of one column block is 1024 contiguous floats: the 256 threads of a workgroup
//! each stage one `vec4` with no bounds check, and each thread reads its four columns
//! for one `k` as one `vec4` from workgroup memory. Zero padding rounds `k` up to 16
//! and `n` up to 64.

/// Why a matrix cannot be packed (the pre-packed weight cache reports it as
/// [`crate::prepack::PrepackError::Pack`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// A matrix with a zero or overflowing dimension.
    #[error("cannot pack a [{k}, {n}] matrix (zero or overflowing size)")]
    BadDimensions {
        /// Inner dimension.
        k: u64,
        /// Columns.
        n: u64,
    },
    /// Values given for a weight do not match its element count.
    #[error("expected {expected} values, got {got}")]
    WrongValueCount {
        /// Elements expected.
        expected: u64,
        /// Elements given.
        got: u64,
    },
}

/// Output rows and columns per workgroup of the packed kernel.
pub const PACK_BLOCK: u64 = 64;
/// `k` per packed step.
pub const PACK_KSTEP: u64 = 16;
/// Floats per (column block, k step) tile: `PACK_BLOCK * PACK_KSTEP`.
pub const PACK_TILE: u64 = PACK_BLOCK * PACK_KSTEP;

/// How the source weight is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BSource {
    /// `B` is `[k, n]` row-major (the `matmul` op).
    KByN,
    /// `B` is stored transposed, `[n, k]` row-major (the `matmul_bt` op).
    NByK,
}

/// The packed tensor's shape for a `[k, n]` B: `[ceil(n / 64), ceil(k / 16), 1024]`;
/// `None` when `k` or `n` is 0.
pub fn packed_shape(k: u64, n: u64) -> Option<[u64; 3]> {
    if k == 0 || n == 0 {
        return None;
    }
    Some([n.div_ceil(PACK_BLOCK), k.div_ceil(PACK_KSTEP), PACK_TILE])
}

/// Floats of the packed form of a `[k, n]` B (checked).
///
/// # Errors
/// [`PackError::BadDimensions`] when `k` or `n` is 0 or the count overflows.
pub fn packed_len(k: u64, n: u64) -> Result<u64, PackError> {
    packed_shape(k, n)
        .and_then(|[a, b, c]| a.checked_mul(b)?.checked_mul(c))
        .ok_or(PackError::BadDimensions { k, n })
}

/// Packs B (`[k, n]` for [`BSource::KByN`], `[n, k]` for [`BSource::NByK`]) into the
/// layout the packed kernel reads.
///
/// # Errors
/// [`PackError::BadDimensions`] for a zero or overflowing size,
/// [`PackError::WrongValueCount`] when `values` is not `k * n` floats.
pub fn pack_b(k: u64, n: u64, source: BSource, values: &[f32]) -> Result<Vec<f32>, PackError> {
    let len = packed_len(k, n)?;
    let expected = k.checked_mul(n).ok_or(PackError::BadDimensions { k, n })?;
    if values.len() as u64 != expected {
        return Err(PackError::WrongValueCount {
            expected,
            got: values.len() as u64,
        });
    }
    let len = usize::try_from(len).map_err(|_| PackError::BadDimensions { k, n })?;
    let (ku, nu) = (k as usize, n as usize);
    let k_steps = ku.div_ceil(PACK_KSTEP as usize);
    let mut packed = vec![0f32; len];
    for (i, slot) in packed.iter_mut().enumerate() {
        let j = i % 4;
        let tx = (i / 4) % 16;
        let kr = (i / 64) % 16;
        let ks = (i / PACK_TILE as usize) % k_steps;
        let nb = i / (PACK_TILE as usize * k_steps);
        let row = ks * 16 + kr;
        let col = nb * 64 + tx + 16 * j;
        if row < ku && col < nu {
            *slot = match source {
                BSource::KByN => values[row * nu + col],
                BSource::NByK => values[col * ku + row],
            };
        }
    }
    Ok(packed)
}

/// The value of `B[row, col]` read from a packed B with `k_steps` steps.
fn packed_at(packed: &[f32], k_steps: usize, row: usize, col: usize) -> f32 {
    let (nb, c) = (col / 64, col % 64);
    let (ks, kr) = (row / 16, row % 16);
    let (tx, j) = (c % 16, c / 16);
    let index = (((nb * k_steps + ks) * 16 + kr) * 16 + tx) * 4 + j;
    packed.get(index).copied().unwrap_or(0.0)
}

/// Unpacks a packed B back to `[k, n]` row-major (the inverse of [`pack_b`] with
/// [`BSource::KByN`]).
///
/// # Errors
/// [`PackError::BadDimensions`], or [`PackError::WrongValueCount`] when `packed`
/// is not [`packed_len`] floats.
pub fn unpack_b(k: u64, n: u64, packed: &[f32]) -> Result<Vec<f32>, PackError> {
    let len = packed_len(k, n)?;
    if packed.len() as u64 != len {
        return Err(PackError::WrongValueCount {
            expected: len,
            got: packed.len() as u64,
        });
    }
    let (ku, nu) = (k as usize, n as usize);
    let k_steps = ku.div_ceil(16);
    Ok((0..ku * nu)
        .map(|i| packed_at(packed, k_steps, i / nu, i % nu))
        .collect())
}

/// CPU reference of `matmul_packed`: `a [m, k] × B`, B read from its packed form,
/// accumulating in f64 like the other CPU references.
///
/// # Errors
/// [`PackError::BadDimensions`], or [`PackError::WrongValueCount`] when `a` is
/// not `m * k` floats or `packed` not [`packed_len`] floats.
pub fn matmul_packed_cpu(
    a: &[f32],
    packed: &[f32],
    m: u64,
    k: u64,
    n: u64,
) -> Result<Vec<f32>, PackError> {
    let len = packed_len(k, n)?;
    let a_len = m.checked_mul(k).ok_or(PackError::BadDimensions { k, n })?;
    for (expected, got) in [(a_len, a.len() as u64), (len, packed.len() as u64)] {
        if expected != got {
            return Err(PackError::WrongValueCount { expected, got });
        }
    }
    let (mu, ku, nu) = (m as usize, k as usize, n as usize);
    let k_steps = ku.div_ceil(16);
    let mut out = vec![0f32; mu * nu];
    for (r, row) in out.chunks_exact_mut(nu.max(1)).enumerate() {
        for (c, value) in row.iter_mut().enumerate() {
            let mut acc = 0f64;
            for i in 0..ku {
                acc += f64::from(a[r * ku + i]) * f64::from(packed_at(packed, k_steps, i, c));
            }
            *value = acc as f32;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::cpu_ref;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn packed_shape_pads_k_to_16_and_n_to_64() {
        assert_eq!(packed_shape(33, 65), Some([2, 3, 1024]));
        assert_eq!(packed_shape(16, 64), Some([1, 1, 1024]));
        assert_eq!(packed_shape(0, 5), None);
        assert_eq!(packed_len(1, 1), Ok(1024));
        assert_eq!(
            packed_len(u64::MAX, u64::MAX),
            Err(PackError::BadDimensions {
                k: u64::MAX,
                n: u64::MAX
            })
        );
    }

    #[test]
    fn pack_then_unpack_is_the_identity_on_odd_sizes() {
        for (k, n) in [(1, 1), (17, 65), (33, 7), (64, 130)] {
            let b = values((k * n) as usize, 7);
            let packed = pack_b(k, n, BSource::KByN, &b).expect("packs");
            assert_eq!(packed.len() as u64, packed_len(k, n).expect("len"));
            assert_eq!(unpack_b(k, n, &packed).expect("unpacks"), b);
        }
    }

    #[test]
    fn a_transposed_source_packs_to_the_same_layout_as_its_transpose() {
        let (k, n) = (19u64, 70u64);
        let bt = values((k * n) as usize, 3); // [n, k]
        let mut b = vec![0f32; (k * n) as usize]; // [k, n]
        for r in 0..k as usize {
            for c in 0..n as usize {
                b[r * n as usize + c] = bt[c * k as usize + r];
            }
        }
        assert_eq!(
            pack_b(k, n, BSource::NByK, &bt).expect("packs"),
            pack_b(k, n, BSource::KByN, &b).expect("packs")
        );
    }

    #[test]
    fn one_vec4_holds_the_four_columns_a_thread_reads() {
        let (k, n) = (16u64, 64u64);
        let b: Vec<f32> = (0..k * n).map(|i| i as f32).collect();
        let packed = pack_b(k, n, BSource::KByN, &b).expect("packs");
        // k row 2, thread column 5: columns 5, 21, 37, 53.
        let at = ((2 * 16) + 5) * 4;
        let row = 2.0 * 64.0;
        assert_eq!(
            &packed[at..at + 4],
            &[row + 5.0, row + 21.0, row + 37.0, row + 53.0]
        );
    }

    #[test]
    fn packed_cpu_matmul_equals_the_unpacked_reference() {
        let (m, k, n) = (5u64, 33u64, 67u64);
        let a = values((m * k) as usize, 1);
        let b = values((k * n) as usize, 2);
        let packed = pack_b(k, n, BSource::KByN, &b).expect("packs");
        let want = cpu_ref::matmul(&a, &b, m as usize, k as usize, n as usize, false);
        assert_eq!(matmul_packed_cpu(&a, &packed, m, k, n).expect("runs"), want);
    }

    #[test]
    fn wrong_value_counts_are_refused() {
        assert_eq!(
            pack_b(2, 3, BSource::KByN, &[0.0; 5]),
            Err(PackError::WrongValueCount {
                expected: 6,
                got: 5
            })
        );
        assert!(matches!(
            matmul_packed_cpu(&[0.0; 3], &[0.0; 1024], 1, 2, 2),
            Err(PackError::WrongValueCount { .. })
        ));
    }
}
