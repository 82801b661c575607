//! Per-dispatch parameters: the 32-byte uniform every kernel reads, and the packing of
//! one such block per dispatch into a single uniform buffer at aligned dynamic offsets.

use crate::device::DeviceError;
use bytemuck::{Pod, Zeroable};

use super::ops::OpCall;
use super::ExecError;

/// Bytes of one parameter block (`4 × u32` then `4 × f32`, as each shader's `Params`).
pub const PARAMS_SIZE: u64 = 32;

/// The uniform block of one dispatch. What each slot means is written at the top of
/// each shader's `struct Params`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct KernelParams {
    /// Integer slots (lengths, dimensions, op codes).
    pub ints: [u32; 4],
    /// Float slots (scale factor, epsilon, base).
    pub floats: [f32; 4],
}

/// Why the WGSL struct type `ty` of `module` does not have [`KernelParams`]' layout
/// (32 bytes: four `u32` at offsets 0..16, then four `f32` at 16..32, as scalars or
/// vectors), or `None` when it does. The naga reflection test checks every built-in
/// kernel's `Params` with it, and user ops are checked with it at registration.
pub fn params_layout_mismatch(
    module: &naga::Module,
    ty: naga::Handle<naga::Type>,
) -> Option<String> {
    use naga::{ScalarKind, TypeInner};
    let TypeInner::Struct { members, span } = &module.types[ty].inner else {
        return Some("Params is not a struct".to_string());
    };
    let rust_size = std::mem::size_of::<KernelParams>();
    if *span as usize != rust_size {
        return Some(format!("Params is {span} bytes, KernelParams {rust_size}"));
    }
    let mut slots = Vec::new();
    for member in members {
        match &module.types[member.ty].inner {
            TypeInner::Scalar(scalar) => slots.push((member.offset, scalar.kind, scalar.width)),
            TypeInner::Vector { size, scalar } => {
                for k in 0..*size as u32 {
                    slots.push((member.offset + 4 * k, scalar.kind, scalar.width));
                }
            }
            other => return Some(format!("Params member of type {other:?}")),
        }
    }
    let expected: Vec<(u32, ScalarKind, u8)> = (0..8u32)
        .map(|k| {
            let kind = if k < 4 {
                ScalarKind::Uint
            } else {
                ScalarKind::Float
            };
            (4 * k, kind, 4)
        })
        .collect();
    (slots != expected).then(|| {
        format!("Params slots {slots:?}, KernelParams has 4 x u32 then 4 x f32 (32 bytes)")
    })
}

impl KernelParams {
    /// The parameter block for one op call, in the slot order its shader declares.
    pub fn for_call(call: &OpCall) -> KernelParams {
        let (ints, f0) = match *call {
            OpCall::Unary { op, len, alpha } => ([len, op.code(), 0, 0], alpha),
            OpCall::Binary { op, len, len_b } => ([len, len_b, op.code(), 0], 0.0),
            OpCall::Softmax {
                rows,
                cols,
                causal_period,
            } => (
                [
                    rows,
                    cols,
                    u32::from(causal_period.is_some()),
                    causal_period.unwrap_or(1).max(1),
                ],
                0.0,
            ),
            OpCall::LayerNorm { rows, cols, eps } | OpCall::RmsNorm { rows, cols, eps } => {
                ([rows, cols, 0, 0], eps)
            }
            OpCall::Matmul { m, k, n, .. } => ([m, k, n, 0], 0.0),
            OpCall::Embedding { rows, dim, vocab } => {
                ([rows.saturating_mul(dim), dim, vocab, 0], 0.0)
            }
            OpCall::Rope { rows, dim, base } => ([rows.saturating_mul(dim / 2), dim, 0, 0], base),
            OpCall::CountPositive { len } => ([len, 0, 0, 0], 0.0),
            OpCall::Compact { len, out_len } => ([len, out_len, 0, 0], 0.0),
            OpCall::MatmulPacked { m, k, n } => ([m, k, n, 0], 0.0),
            OpCall::NormMatmul { m, k, n, gelu, eps } => ([m, k, n, u32::from(gelu)], eps),
            OpCall::MatmulFused {
                m, k, n, epilogue, ..
            } => (
                [m, k, n, u32::from(epilogue == super::ops::Epilogue::Gelu)],
                0.0,
            ),
            OpCall::Attention {
                seq,
                heads,
                head_dim,
                scale,
            } => ([seq, heads, head_dim, 0], scale),
            OpCall::KvSelf {
                n,
                heads,
                head_dim,
                scale,
            } => ([n, heads, head_dim, 0], scale),
            OpCall::KvAttend {
                n,
                heads,
                head_dim,
                layer,
                page,
                scale,
                ..
            }
            | OpCall::KvSelfAttend {
                n,
                heads,
                head_dim,
                layer,
                page,
                scale,
                ..
            } => {
                // The page number rides in a float slot (exact: resolve keeps it <= 2^24).
                return KernelParams {
                    ints: [n, heads, head_dim, layer],
                    floats: [scale, page as f32, 0.0, 0.0],
                };
            }
        };
        KernelParams {
            ints,
            floats: [f0, 0.0, 0.0, 0.0],
        }
    }

    /// The parameter block of the staging copy (`shaders/copy.wgsl`): `words` 32-bit
    /// words.
    pub fn copy(words: u32) -> KernelParams {
        KernelParams {
            ints: [words, 0, 0, 0],
            floats: [0.0; 4],
        }
    }
}

/// Bytes a parameter block of `size` bytes is bound with: rounded up to 16 (a
/// uniform binding's granularity), at least 16.
pub fn padded_block(size: u64) -> u64 {
    size.max(1).div_ceil(16).saturating_mul(16)
}

/// Packs one [`KernelParams`] per dispatch into a byte block, each at a multiple of the
/// device's `min_uniform_buffer_offset_alignment`, for use with dynamic offsets.
#[derive(Debug, Clone)]
pub struct UniformPacker {
    stride: u64,
    bytes: Vec<u8>,
}

impl UniformPacker {
    /// A packer for this alignment (`min_uniform_buffer_offset_alignment`).
    ///
    /// # Errors
    /// [`ExecError::Device`] ([`DeviceError::BadLimit`]) when the alignment is not a
    /// power of two.
    pub fn new(alignment: u32) -> Result<UniformPacker, ExecError> {
        if !alignment.is_power_of_two() {
            return Err(ExecError::Device(DeviceError::BadLimit {
                limit: "min_uniform_buffer_offset_alignment",
                value: u64::from(alignment),
            }));
        }
        Ok(UniformPacker {
            stride: PARAMS_SIZE.max(u64::from(alignment)),
            bytes: Vec::new(),
        })
    }

    /// Appends a block and returns its dynamic offset.
    ///
    /// # Errors
    /// [`ExecError::UniformOffsetOverflow`] when the offset no longer fits the 32-bit
    /// dynamic offset wgpu takes.
    pub fn push(&mut self, params: &KernelParams) -> Result<u32, ExecError> {
        self.push_bytes(bytemuck::bytes_of(params))
    }

    /// Appends a block of any length (a user op's own parameters), padded to whole
    /// strides and to [`padded_block`] bytes, and returns its dynamic offset.
    ///
    /// # Errors
    /// As [`UniformPacker::push`].
    pub fn push_bytes(&mut self, block: &[u8]) -> Result<u32, ExecError> {
        let offset = self.bytes.len() as u64;
        let small = u32::try_from(offset).map_err(|_| ExecError::UniformOffsetOverflow {
            offset,
            max: u64::from(u32::MAX),
        })?;
        self.bytes.extend_from_slice(block);
        let strides = padded_block(block.len() as u64)
            .div_ceil(self.stride)
            .max(1);
        let padded = offset.saturating_add(strides.saturating_mul(self.stride));
        self.bytes
            .resize(usize::try_from(padded).unwrap_or(usize::MAX), 0);
        Ok(small)
    }

    /// The packed bytes (a multiple of the stride long).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::ops::{BinaryOp, UnaryOp};

    #[test]
    fn params_are_packed_at_aligned_offsets() {
        let mut p = UniformPacker::new(256).expect("power of two");
        let a = KernelParams::for_call(&OpCall::Unary {
            op: UnaryOp::Scale,
            len: 7,
            alpha: 0.5,
        });
        let b = KernelParams::for_call(&OpCall::Binary {
            op: BinaryOp::Mul,
            len: 12,
            len_b: 3,
        });
        assert_eq!(p.push(&a), Ok(0));
        assert_eq!(p.push(&b), Ok(256));
        assert_eq!(p.bytes().len(), 512);
        let back: &KernelParams = bytemuck::from_bytes(&p.bytes()[256..288]);
        assert_eq!(back.ints, [12, 3, 1, 0]);
        let first: &KernelParams = bytemuck::from_bytes(&p.bytes()[0..32]);
        assert_eq!(first.ints, [7, 1, 0, 0]);
        assert_eq!(first.floats[0], 0.5);
    }

    #[test]
    fn small_alignment_still_strides_a_whole_block() {
        let mut p = UniformPacker::new(16).expect("power of two");
        p.push(&KernelParams::zeroed()).expect("fits");
        assert_eq!(p.bytes().len() as u64, PARAMS_SIZE);
        assert_eq!(p.push(&KernelParams::zeroed()), Ok(32));
        assert!(UniformPacker::new(48).is_err());
    }

    #[test]
    fn causal_softmax_sets_flag_and_period() {
        let k = KernelParams::for_call(&OpCall::Softmax {
            rows: 16,
            cols: 8,
            causal_period: Some(8),
        });
        assert_eq!(k.ints, [16, 8, 1, 8]);
        let plain = KernelParams::for_call(&OpCall::Softmax {
            rows: 3,
            cols: 5,
            causal_period: None,
        });
        assert_eq!(plain.ints, [3, 5, 0, 1]);
    }
}
