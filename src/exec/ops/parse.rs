//! [`Op`]: an op name parsed once into what it means, with the number of inputs it
//! takes. Resolution ([`super::resolve`]) then goes by op family.

use super::{BinaryOp, UnaryOp};

/// A built-in op, parsed from a node's op name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `copy`, `scale`, `relu`, `gelu`, `silu`.
    Unary(UnaryOp),
    /// `add`, `mul`.
    Binary(BinaryOp),
    /// `softmax`, or `softmax_causal` when `causal`.
    Softmax {
        /// `softmax_causal`.
        causal: bool,
    },
    /// `layer_norm`.
    LayerNorm,
    /// `rms_norm`.
    RmsNorm,
    /// `matmul`, or `matmul_bt` when `transposed_b`.
    Matmul {
        /// `matmul_bt`.
        transposed_b: bool,
    },
    /// `matmul_packed`.
    MatmulPacked,
    /// `embedding`.
    Embedding,
    /// `rope`.
    Rope,
    /// `count_positive`.
    CountPositive,
    /// `compact`.
    Compact,
    /// `matmul_gelu`: a matmul with GELU fused into its epilogue.
    MatmulGelu,
    /// `matmul_add`: `residual + a·b`.
    MatmulAdd,
    /// `attention_causal`: fused causal multi-head attention over packed QKV.
    AttentionCausal,
    /// `matmul_bias`: `a·b + bias`.
    MatmulBias,
    /// `matmul_bias_gelu`: `gelu(a·b + bias)`.
    MatmulBiasGelu,
    /// `matmul_add_bias`: `residual + a·b + bias`.
    MatmulAddBias,
    /// `kv_self`: a chunk's attention over its own keys, as an online-softmax state.
    KvSelf,
    /// `kv_attend`: the state continued over one page of the KV cache (and the
    /// chunk's K, V appended to it).
    KvAttend,
    /// `kv_attend_out`: as `kv_attend`, then normalised into the attention output.
    KvAttendOut,
    /// `kv_self_attend`: `kv_self`, then `kv_attend` over the first page, in one kernel.
    KvSelfAttend,
    /// `kv_self_attend_out`: as `kv_self_attend`, then normalised (a single page).
    KvSelfAttendOut,
    /// `layer_norm_matmul_bias`: `layer_norm(x)·w + bias`, the norm in the matmul's
    /// prologue.
    NormMatmulBias,
    /// `layer_norm_matmul_bias_gelu`: `gelu(layer_norm(x)·w + bias)`.
    NormMatmulBiasGelu,
}

impl Op {
    /// Whether the op has kernels for f16 storage ([`crate::exec::StorageType::F16`]):
    /// the ops of the decoder's forward pass (elementwise, softmax, norms, dense and
    /// fused matmuls, fused attention, embedding) and of its generation step (the
    /// norm-fused matmul, the KV-cache ops: f16 qkv, pages and normalised output, an
    /// f32 state, see `storage_of`), rope, the compaction (`count_positive` and
    /// `compact`: f16 values in and out, the count f32) and the packed matmul (its
    /// packed B f16 too). Every built-in op has one.
    pub fn has_f16(self) -> bool {
        matches!(
            self,
            Op::Unary(_)
                | Op::Binary(_)
                | Op::Softmax { .. }
                | Op::LayerNorm
                | Op::RmsNorm
                | Op::Matmul { .. }
                | Op::Embedding
                | Op::MatmulGelu
                | Op::MatmulAdd
                | Op::MatmulBias
                | Op::MatmulBiasGelu
                | Op::MatmulAddBias
                | Op::AttentionCausal
                | Op::KvSelf
                | Op::KvAttend
                | Op::KvAttendOut
                | Op::KvSelfAttend
                | Op::KvSelfAttendOut
                | Op::NormMatmulBias
                | Op::NormMatmulBiasGelu
                | Op::Rope
                | Op::CountPositive
                | Op::Compact
                | Op::MatmulPacked
        )
    }
}

/// Every built-in op with its name, in the order of [`super::SUPPORTED_OPS`].
const TABLE: [(&str, Op); 31] = [
    ("copy", Op::Unary(UnaryOp::Copy)),
    ("scale", Op::Unary(UnaryOp::Scale)),
    ("relu", Op::Unary(UnaryOp::Relu)),
    ("gelu", Op::Unary(UnaryOp::Gelu)),
    ("silu", Op::Unary(UnaryOp::Silu)),
    ("add", Op::Binary(BinaryOp::Add)),
    ("mul", Op::Binary(BinaryOp::Mul)),
    ("softmax", Op::Softmax { causal: false }),
    ("softmax_causal", Op::Softmax { causal: true }),
    ("layer_norm", Op::LayerNorm),
    ("rms_norm", Op::RmsNorm),
    (
        "matmul",
        Op::Matmul {
            transposed_b: false,
        },
    ),
    ("matmul_bt", Op::Matmul { transposed_b: true }),
    ("embedding", Op::Embedding),
    ("rope", Op::Rope),
    ("count_positive", Op::CountPositive),
    ("compact", Op::Compact),
    ("matmul_packed", Op::MatmulPacked),
    ("matmul_gelu", Op::MatmulGelu),
    ("matmul_add", Op::MatmulAdd),
    ("attention_causal", Op::AttentionCausal),
    ("kv_self", Op::KvSelf),
    ("kv_attend", Op::KvAttend),
    ("kv_attend_out", Op::KvAttendOut),
    ("matmul_bias", Op::MatmulBias),
    ("matmul_bias_gelu", Op::MatmulBiasGelu),
    ("matmul_add_bias", Op::MatmulAddBias),
    ("layer_norm_matmul_bias", Op::NormMatmulBias),
    ("layer_norm_matmul_bias_gelu", Op::NormMatmulBiasGelu),
    ("kv_self_attend", Op::KvSelfAttend),
    ("kv_self_attend_out", Op::KvSelfAttendOut),
];

impl Op {
    /// The built-in op named `name`, or `None` when no built-in kernel has that name.
    pub fn parse(name: &str) -> Option<Op> {
        TABLE.iter().find(|(n, _)| *n == name).map(|&(_, op)| op)
    }

    /// The op's name as graphs spell it.
    pub fn name(self) -> &'static str {
        TABLE
            .iter()
            .find(|(_, op)| *op == self)
            .map_or("", |&(name, _)| name)
    }

    /// How many inputs a node of this op takes.
    pub fn arity(self) -> usize {
        match self {
            Op::Unary(_)
            | Op::Softmax { .. }
            | Op::Rope
            | Op::CountPositive
            | Op::AttentionCausal
            | Op::KvSelf => 1,
            Op::Binary(_)
            | Op::RmsNorm
            | Op::Matmul { .. }
            | Op::MatmulPacked
            | Op::Embedding
            | Op::Compact
            | Op::MatmulGelu => 2,
            Op::LayerNorm
            | Op::MatmulAdd
            | Op::MatmulBias
            | Op::MatmulBiasGelu
            | Op::KvSelfAttend
            | Op::KvSelfAttendOut => 3,
            Op::KvAttend | Op::KvAttendOut | Op::MatmulAddBias => 4,
            Op::NormMatmulBias | Op::NormMatmulBiasGelu => 5,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doc_of_supported_ops_names_every_op() {
        let source = include_str!("mod.rs");
        let doc: String = source
            .split("pub const SUPPORTED_OPS")
            .next()
            .and_then(|before| before.rsplit("\n\n").next())
            .unwrap_or_default()
            .to_string();
        let names: Vec<&str> = doc
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| !n.contains(':'))
            .collect();
        assert_eq!(names, super::super::SUPPORTED_OPS, "{doc}");
    }

    #[test]
    fn every_supported_name_parses_and_prints_back() {
        for &name in super::super::SUPPORTED_OPS {
            let op = Op::parse(name).unwrap_or_else(|| panic!("{name} does not parse"));
            assert_eq!(op.name(), name);
        }
        assert_eq!(TABLE.len(), super::super::SUPPORTED_OPS.len());
        assert_eq!(Op::parse("conv2d"), None);
    }

    #[test]
    fn arity_follows_the_family() {
        assert_eq!(Op::parse("gelu").map(Op::arity), Some(1));
        assert_eq!(Op::parse("matmul_bt").map(Op::arity), Some(2));
        assert_eq!(Op::parse("layer_norm").map(Op::arity), Some(3));
        assert_eq!(Op::parse("compact").map(Op::arity), Some(2));
    }
}
