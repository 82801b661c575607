//! The kernel registry: one WGSL file per op family (`shaders/`), the entry point and
//! binding count of each kernel, and its pipeline and bind-group layout, built once.

use std::borrow::Cow;
use std::collections::HashMap;

use super::ops::{Epilogue, OpCall};
use super::pipeline::compute_pipeline;
use super::ExecError;
use crate::device::{scoped, DeviceError};
use crate::graph::NodeId;

/// A WGSL source file of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shader {
    /// `shaders/unary.wgsl`.
    Unary,
    /// `shaders/binary.wgsl`.
    Binary,
    /// `shaders/softmax.wgsl`.
    Softmax,
    /// `shaders/norm.wgsl`.
    Norm,
    /// `shaders/matmul.wgsl`.
    Matmul,
    /// `shaders/embedding.wgsl`.
    Embedding,
    /// `shaders/rope.wgsl`.
    Rope,
    /// `shaders/copy.wgsl` (the executor's staging copy).
    Copy,
    /// `shaders/compact.wgsl`.
    Compact,
    /// `shaders/matmul_packed.wgsl` (matmul over a pre-packed B).
    MatmulPacked,
    /// `shaders/matmul_tiled.wgsl` (register-tiled matmul with fused epilogues), after
    /// `shaders/matmul_block.wgsl`.
    MatmulTiled,
    /// `shaders/matmul_tiled.wgsl` after `shaders/matmul_block_shared.wgsl` (and
    /// `shaders/matmul_shared_groups.wgsl`, which the three shared-read forms share):
    /// the reads of A shared across a subgroup (needs the device's subgroup feature).
    MatmulTiledShared,
    /// `shaders/matmul_bt_tiled.wgsl` (register-tiled matmul by a transposed B), after
    /// `shaders/matmul_bt_block.wgsl`.
    MatmulBtTiled,
    /// `shaders/matmul_bt_tiled.wgsl` after `shaders/matmul_bt_block_shared.wgsl`: the
    /// reads of A shared across a subgroup (needs the device's subgroup feature).
    MatmulBtTiledShared,
    /// `shaders/matmul_tiled.wgsl` after `shaders/matmul_block_tile64.wgsl`: a 64 x 64
    /// block per workgroup, staged in workgroup memory ([`MatmulTile::Tile64`]).
    MatmulTiled64,
    /// `shaders/attention.wgsl` (fused causal attention).
    Attention,
    /// `shaders/attention_tiled.wgsl` (fused causal attention, keys in workgroup memory).
    AttentionTiled,
    /// `shaders/attention_blocks.wgsl` (fused causal attention, a block of queries per
    /// invocation), after `shaders/attention_blocks_plain.wgsl`.
    AttentionBlocks,
    /// `shaders/attention_blocks.wgsl` after `shaders/attention_blocks_shared.wgsl`: the
    /// key and value reads shared across a subgroup (needs the device's subgroup
    /// feature).
    AttentionBlocksShared,
    /// `shaders/kv_self.wgsl` (a chunk's attention over its own keys, as a state).
    KvSelf,
    /// `shaders/kv_attend.wgsl` (the state over one page of the paged KV cache).
    KvAttend,
    /// `shaders/matmul_norm.wgsl` (a layer norm in the tiled matmul's prologue), after
    /// `shaders/matmul_norm_block.wgsl`.
    MatmulNorm,
    /// `shaders/matmul_norm.wgsl` after `shaders/matmul_norm_block_shared.wgsl`: the
    /// reads of x shared across a subgroup (needs the device's subgroup feature).
    MatmulNormShared,
    /// `shaders/kv_self_attend.wgsl` (a chunk's own keys and the first cache page).
    KvSelfAttend,
    /// `shaders/matvec.wgsl` (matrix-vector products: one row, or a few, by a weight
    /// matrix, with the tiled matmul's fused epilogues).
    Matvec,
}

// Some of these only the tests call (the `testing` feature makes the enum public).
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
impl Shader {
    /// Every shader of the registry.
    pub const ALL: [Shader; 25] = [
        Shader::Unary,
        Shader::Binary,
        Shader::Softmax,
        Shader::Norm,
        Shader::Matmul,
        Shader::Embedding,
        Shader::Rope,
        Shader::Copy,
        Shader::Compact,
        Shader::MatmulPacked,
        Shader::MatmulTiled,
        Shader::MatmulBtTiled,
        Shader::Attention,
        Shader::KvSelf,
        Shader::KvAttend,
        Shader::MatmulNorm,
        Shader::KvSelfAttend,
        Shader::Matvec,
        Shader::AttentionTiled,
        Shader::AttentionBlocks,
        Shader::MatmulTiledShared,
        Shader::MatmulBtTiledShared,
        Shader::MatmulNormShared,
        Shader::MatmulTiled64,
        Shader::AttentionBlocksShared,
    ];

    /// The file name under `shaders/`.
    pub fn file(self) -> &'static str {
        match self {
            Shader::Unary => "unary.wgsl",
            Shader::Binary => "binary.wgsl",
            Shader::Softmax => "softmax.wgsl",
            Shader::Norm => "norm.wgsl",
            Shader::Matmul => "matmul.wgsl",
            Shader::Embedding => "embedding.wgsl",
            Shader::Rope => "rope.wgsl",
            Shader::Copy => "copy.wgsl",
            Shader::Compact => "compact.wgsl",
            Shader::MatmulPacked => "matmul_packed.wgsl",
            Shader::MatmulTiled | Shader::MatmulTiledShared | Shader::MatmulTiled64 => {
                "matmul_tiled.wgsl"
            }
            Shader::MatmulBtTiled | Shader::MatmulBtTiledShared => "matmul_bt_tiled.wgsl",
            Shader::Attention => "attention.wgsl",
            Shader::AttentionTiled => "attention_tiled.wgsl",
            Shader::AttentionBlocks | Shader::AttentionBlocksShared => "attention_blocks.wgsl",
            Shader::KvSelf => "kv_self.wgsl",
            Shader::KvAttend => "kv_attend.wgsl",
            Shader::MatmulNorm | Shader::MatmulNormShared => "matmul_norm.wgsl",
            Shader::KvSelfAttend => "kv_self_attend.wgsl",
            Shader::Matvec => "matvec.wgsl",
        }
    }

    /// The WGSL source as the device compiles it for f32 storage (compiled into the
    /// crate): [`Shader::source_for`] with [`StorageType::F32`].
    pub fn source(self) -> &'static str {
        // Every shader has its f32 form (`forms!` below), so this is never empty.
        self.source_for(StorageType::F32).unwrap_or_default()
    }

    /// The WGSL source for tensors stored as `storage`, `None` for a shader without
    /// that form: `shaders/storage_f32.wgsl` (or `storage_f16.wgsl`, which enables f16
    /// and declares the element type `T` as f16), then `shaders/prelude.wgsl`, then
    /// the kernel's own file. Every shader has the f32 form; the f16 form exists for
    /// [`Shader::has_f16`].
    pub fn source_for(self, storage: StorageType) -> Option<&'static str> {
        /// A storage header and the prelude joined in front of a kernel's files (a
        /// part two kernels share, then the kernel's own), at compile time.
        macro_rules! joined {
            ($header:literal, $file:literal $(+ $more:literal)*) => {
                concat!(
                    include_str!(concat!("../../shaders/", $header)),
                    include_str!("../../shaders/prelude.wgsl"),
                    include_str!(concat!("../../shaders/", $file)),
                    $(include_str!(concat!("../../shaders/", $more)),)*
                )
            };
        }
        /// The f32 form of every shader and the f16 form of those that have one.
        macro_rules! forms {
            ($($shader:ident => $file:literal $(+ $more:literal)*, $f16:literal;)*) => {
                match (self, storage) {
                    $(
                        (Shader::$shader, StorageType::F32) => Some(joined!("storage_f32.wgsl", $file $(+ $more)*)),
                        (Shader::$shader, StorageType::F16) => {
                            if $f16 { Some(joined!("storage_f16.wgsl", $file $(+ $more)*)) } else { None }
                        }
                    )*
                }
            };
        }
        forms! {
            Unary => "unary.wgsl", true;
            Binary => "binary.wgsl", true;
            Softmax => "softmax.wgsl", true;
            Norm => "norm.wgsl", true;
            Matmul => "matmul.wgsl", true;
            Embedding => "embedding.wgsl", true;
            Rope => "rope.wgsl", true;
            Copy => "copy.wgsl", false;
            Compact => "compact.wgsl", true;
            MatmulPacked => "matmul_packed.wgsl", true;
            MatmulTiled => "matmul_block.wgsl" + "matmul_block_plain.wgsl" + "matmul_rows8.wgsl" + "matmul_tiled.wgsl", true;
            MatmulTiledShared => "matmul_block.wgsl" + "matmul_shared_groups.wgsl" + "matmul_block_shared.wgsl" + "matmul_tiled.wgsl", true;
            MatmulTiled64 => "matmul_block_tile64.wgsl" + "matmul_rows8.wgsl" + "matmul_tiled.wgsl", true;
            MatmulBtTiled => "matmul_bt_block.wgsl" + "matmul_bt_block_plain.wgsl" + "matmul_rows8.wgsl" + "matmul_bt_tiled.wgsl", true;
            MatmulBtTiledShared => "matmul_bt_block.wgsl" + "matmul_shared_groups.wgsl" + "matmul_bt_block_shared.wgsl" + "matmul_bt_tiled.wgsl", true;
            Attention => "attention_io.wgsl" + "head_width.wgsl" + "attention.wgsl", true;
            AttentionTiled => "attention_io.wgsl" + "head_width.wgsl" + "attention_tiled.wgsl", true;
            AttentionBlocks => "attention_io.wgsl" + "head_width.wgsl" + "attention_blocks_plain.wgsl" + "attention_blocks.wgsl", true;
            AttentionBlocksShared => "attention_io.wgsl" + "head_width.wgsl" + "attention_blocks_shared.wgsl" + "attention_blocks.wgsl", true;
            KvSelf => "head_width.wgsl" + "kv_self.wgsl", true;
            KvAttend => "head_width.wgsl" + "kv_pages.wgsl" + "kv_attend.wgsl", true;
            MatmulNorm => "matmul_norm_block.wgsl" + "matmul_norm_block_plain.wgsl" + "matmul_rows8.wgsl" + "matmul_norm.wgsl", true;
            MatmulNormShared => "matmul_norm_block.wgsl" + "matmul_shared_groups.wgsl" + "matmul_norm_block_shared.wgsl" + "matmul_norm.wgsl", true;
            KvSelfAttend => "head_width.wgsl" + "kv_pages.wgsl" + "kv_self_attend.wgsl", true;
            Matvec => "matvec.wgsl", true;
        }
    }

    /// Whether the shader has an f16 form ([`Shader::source_for`] with
    /// [`StorageType::F16`]): the kernels of the decoder's forward pass (elementwise,
    /// softmax, norms, embedding, the matmuls but the packed one, fused attention) and
    /// of its generation step (the paged KV cache's kernels, the norm-fused matmul).
    pub fn has_f16(self) -> bool {
        self.source_for(StorageType::F16).is_some()
    }

    /// Whether the shader uses subgroup operations (the device needs wgpu's
    /// `SUBGROUP` feature to build it).
    pub fn needs_subgroups(self) -> bool {
        matches!(
            self,
            Shader::MatmulTiledShared
                | Shader::MatmulBtTiledShared
                | Shader::MatmulNormShared
                | Shader::AttentionBlocksShared
        )
    }
}

/// The element type of a kernel's float tensors in storage. Kernels compute in f32
/// either way; with [`StorageType::F16`] they load f16, accumulate in f32 and round to
/// f16 on store (the adapter needs `shader-f16`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum StorageType {
    /// 32-bit floats.
    #[default]
    F32,
    /// 16-bit floats (IEEE binary16).
    F16,
}

impl StorageType {
    /// The storage type of tensors of `dtype` (`None` for a non-float type).
    pub fn of(dtype: crate::graph::DType) -> Option<StorageType> {
        match dtype {
            crate::graph::DType::F32 => Some(StorageType::F32),
            crate::graph::DType::F16 => Some(StorageType::F16),
            _ => None,
        }
    }

    /// The graph's element type for this storage.
    pub fn dtype(self) -> crate::graph::DType {
        match self {
            StorageType::F32 => crate::graph::DType::F32,
            StorageType::F16 => crate::graph::DType::F16,
        }
    }

    /// `f32` or `f16`.
    pub fn name(self) -> &'static str {
        match self {
            StorageType::F32 => "f32",
            StorageType::F16 => "f16",
        }
    }

    /// The storage type named `name` (`f32`, `f16`), if any.
    pub fn from_name(name: &str) -> Option<StorageType> {
        [StorageType::F32, StorageType::F16]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

/// One compute pipeline: a shader's entry point. Bindings are `@binding(0)` the
/// parameter uniform, then `@binding(1..=storage)` read-write storage ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// `x → out` (copy, scale, relu, gelu, silu).
    Unary,
    /// `x` rewritten.
    UnaryInPlace,
    /// `(a, b) → out` (add, mul).
    Binary,
    /// `a` rewritten with `b`.
    BinaryInPlace,
    /// Row softmax, plain or causal, `x → out`.
    Softmax,
    /// Row softmax rewriting `x`.
    SoftmaxInPlace,
    /// `(x, gain, out, bias)` in binding order.
    LayerNorm,
    /// As [`Kernel::LayerNorm`], one invocation per row (many short rows).
    LayerNormRows,
    /// `(x, gain, out)`.
    RmsNorm,
    /// `(a, b, out)`, `b` is `[k, n]`.
    Matmul,
    /// `(a, b, out)`, `b` is `[n, k]`.
    MatmulBt,
    /// `(ids, table, out)`.
    Embedding,
    /// `x → out`.
    Rope,
    /// `x` rewritten.
    RopeInPlace,
    /// `src → dst` word for word: stages an input into the executor's workspace.
    CopyWords,
    /// `(x, count)`: counts the elements > 0.
    CountPositive,
    /// `(x, count, out)`: keeps the elements > 0, in order.
    Compact,
    /// `(a, packed b, out)`, `b` pre-packed (see [`crate::exec::packed`]).
    MatmulPacked,
    /// `(a, b, out)`, register-tiled, `k` and `n` multiples of 4; plain or GELU epilogue.
    MatmulTiled(MatmulTile),
    /// `(a, b, out)`: `out += a·b` (the residual updated in place).
    MatmulTiledAcc(MatmulTile),
    /// `(a, b, out, residual)`: `out = residual + a·b`.
    MatmulTiledAccTo(MatmulTile),
    /// `(a, b, out, bias)`: `out = a·b + bias`, plain or GELU epilogue.
    MatmulTiledBias(MatmulTile),
    /// `(a, b, out, bias)`: `out += a·b + bias` (the residual updated in place).
    MatmulTiledAccBias(MatmulTile),
    /// `(a, b, out, residual, bias)`: `out = residual + a·b + bias`.
    MatmulTiledAccToBias(MatmulTile),
    /// `(a, b, out)`, `b` is `[n, k]`, register-tiled, `k` a multiple of 4.
    MatmulBtTiled(MatmulTile),
    /// `(qkv, out)`: fused causal attention, one invocation per query
    /// ([`AttentionForm::PerQuery`]).
    Attention(HeadWidth),
    /// `(qkv, out)`: fused causal attention with the keys in workgroup memory
    /// ([`AttentionForm::KeyTiles`]).
    AttentionTiled(HeadWidth),
    /// `(qkv, out)`: fused causal attention, a block of queries per invocation
    /// ([`AttentionForm::QueryBlocks`]).
    AttentionBlocks(HeadWidth),
    /// `(qkv, out)`: as [`Kernel::AttentionBlocks`], the key and value reads shared
    /// across a subgroup ([`AttentionForm::QueryBlocksShared`]).
    AttentionBlocksShared(HeadWidth),
    /// `(qkv, state)`: a chunk's attention over its own keys.
    KvSelf(HeadWidth),
    /// `(state, qkv, table, page)`: the state continued over one cache page, in place.
    KvAttendInPlace(DecodeSlices, HeadWidth),
    /// `(state, qkv, table, page, out)`: the state continued, written to `out`.
    KvAttend(DecodeSlices, HeadWidth),
    /// `(state, qkv, table, page, out)`: continued and normalised into `out [n, d]`.
    KvAttendOut(DecodeSlices, HeadWidth),
    /// `(x, w, out, bias, gain, beta)`: `out = layer_norm(x)·w + bias`, plain or GELU
    /// epilogue, register-tiled.
    MatmulNormBias(MatmulTile),
    /// `(qkv, table, page, out)`: a chunk's own keys, then one cache page: the state.
    KvSelfAttend(DecodeSlices, HeadWidth),
    /// `(qkv, table, page, out)`: as [`Kernel::KvSelfAttend`], normalised into `out [n, d]`.
    KvSelfAttendOut(DecodeSlices, HeadWidth),
    /// `(a, b, out)`: the matrix-vector form of [`Kernel::MatmulTiled`] for a few rows
    /// (any `k`, `n` a multiple of 4), plain or GELU epilogue.
    Matvec(MatmulTile),
    /// `(a, b, out)`: `out += a·b`, matrix-vector form.
    MatvecAcc(MatmulTile),
    /// `(a, b, out, residual)`: `out = residual + a·b`, matrix-vector form.
    MatvecAccTo(MatmulTile),
    /// `(a, b, out, bias)`: `out = a·b + bias`, plain or GELU epilogue, matrix-vector form.
    MatvecBias(MatmulTile),
    /// `(a, b, out, bias)`: `out += a·b + bias`, matrix-vector form.
    MatvecAccBias(MatmulTile),
    /// `(a, b, out, residual, bias)`: `out = residual + a·b + bias`, matrix-vector form.
    MatvecAccToBias(MatmulTile),
    /// `(x, w, out, bias, gain, beta)`: `out = layer_norm(x)·w + bias`, plain or GELU
    /// epilogue, matrix-vector form of [`Kernel::MatmulNormBias`].
    MatvecNormBias(MatmulTile),
}

/// The register tile of the tiled matmul kernels: rows of the output per invocation
/// and invocations per workgroup (each invocation owns 4 adjacent columns). Chosen per
/// problem shape ([`MatmulTile::choose`]) and set as pipeline constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatmulTile {
    /// 8 rows x 4 columns per invocation, 16 invocations: 8 x 64 per workgroup.
    Rows8,
    /// 4 rows x 4 columns per invocation, 16 invocations: 4 x 64 per workgroup, for
    /// problems with few rows (more workgroups to spread).
    Rows4,
    /// One row per invocation, the matrix-vector form for at most `MATVEC_MAX_ROWS` (4)
    /// rows (decode). `matmul`, its fused forms and the layer norm in a matmul's
    /// prologue run `shaders/matvec.wgsl` with it ([`Kernel::Matvec`]: 16 columns per
    /// invocation, 256 per workgroup); `matmul_bt` runs its tiled kernel
    /// with one row (4 columns per invocation, 16 invocations).
    Rows1,
    /// 8 rows x 4 columns per invocation, 64 invocations: 8 x 256 per workgroup. The
    /// wide form of [`MatmulTile::Rows8`], for adapters that schedule invocations in
    /// groups of 32 or 64 (a 16-invocation workgroup leaves most of such a group idle).
    Rows8Wide,
    /// 4 rows x 4 columns per invocation, 64 invocations: 4 x 256 per workgroup.
    Rows4Wide,
    /// The matrix-vector form of [`MatmulTile::Rows1`] split over `k`: 16 x 16
    /// invocations per workgroup, each of the 16 slices walking every 16th row of the
    /// weights for the same 256 columns, their sums added in workgroup memory. For
    /// adapters that run many invocations at once (one row and 768 columns are 48
    /// invocations unsplit). `matmul_bt` runs it as [`MatmulTile::Rows1`].
    Rows1Split,
    /// [`MatmulTile::Rows1Split`] narrower and split further: 4 x 64 invocations per
    /// workgroup, 64 columns, each of the 64 slices walking every 64th row. Four times
    /// the workgroups of [`MatmulTile::Rows1Split`] for the same output, for a GPU whose
    /// decode outputs (768 columns: 3 workgroups of 256) leave most of it idle.
    /// Offered on GPUs only ([`MatmulTile::for_gpus_only`]).
    Rows1Split64,
    /// Narrower still: 1 x 256 invocations per workgroup, 16 columns, 256 slices.
    /// Offered on GPUs only.
    Rows1Split256,
    /// A 64 x 64 block of the output per workgroup of 256 invocations, each a 4 x 4
    /// tile, with A's and B's blocks staged in workgroup memory 16 steps of `k` at a
    /// time (`shaders/matmul_block_tile64.wgsl`): each element read from storage feeds
    /// 64 multiply-adds. `matmul` and its fused forms only (`matmul_bt` and the
    /// norm-fused matmul run [`MatmulTile::Rows4`] for it), on GPUs only
    /// ([`MatmulTile::for_gpus_only`]): a CPU adapter pays for its barriers.
    Tile64,
    /// [`MatmulTile::Rows8`] with the reads of A shared across a subgroup
    /// (`shaders/matmul_block_shared.wgsl`): each invocation reads one of the 8 rows at
    /// each step of `k` and takes the others from its subgroup. For CPU adapters with
    /// subgroups (llvmpipe), where a read costs a load per invocation even when the
    /// whole workgroup reads one address. `matmul`, its fused forms, `matmul_bt` and the
    /// norm-fused matmul (whose reading invocation also normalises the row).
    Rows8Shared,
    /// [`MatmulTile::Rows4`] with the reads of A shared across a subgroup.
    Rows4Shared,
    /// 16 rows x 4 columns per invocation, 16 invocations, the reads of A shared across
    /// a subgroup in two groups of 8 rows: each read of B feeds twice the multiply-adds
    /// of [`MatmulTile::Rows8Shared`]. For CPU adapters with subgroups, like it.
    Rows16Shared,
    /// 32 rows x 4 columns per invocation, 16 invocations, the reads of A shared in four
    /// groups of 8 rows: each read of B feeds 32 rows. Measured on lavapipe (256-bit
    /// llvmpipe, `examples/kernel_lab.rs`), 1.3-2.3x faster than
    /// [`MatmulTile::Rows8Shared`] at the decoder's shapes: there a storage read costs a
    /// load per invocation, and the 128 accumulators a lane spills cost less.
    Rows32Shared,
}

impl MatmulTile {
    /// Every tile, in the order the tuner times them.
    pub const ALL: [MatmulTile; 13] = [
        MatmulTile::Rows8,
        MatmulTile::Rows4,
        MatmulTile::Rows1,
        MatmulTile::Rows8Wide,
        MatmulTile::Rows4Wide,
        MatmulTile::Rows1Split,
        MatmulTile::Rows8Shared,
        MatmulTile::Rows4Shared,
        MatmulTile::Rows1Split64,
        MatmulTile::Rows1Split256,
        MatmulTile::Tile64,
        MatmulTile::Rows16Shared,
        MatmulTile::Rows32Shared,
    ];

    /// Output rows per invocation (and per workgroup, but for [`MatmulTile::Tile64`]:
    /// [`MatmulTile::workgroup_rows`]).
    pub fn rows(self) -> u32 {
        match self {
            MatmulTile::Rows32Shared => 32,
            MatmulTile::Rows16Shared => 16,
            MatmulTile::Rows8 | MatmulTile::Rows8Wide | MatmulTile::Rows8Shared => 8,
            MatmulTile::Rows4
            | MatmulTile::Rows4Wide
            | MatmulTile::Rows4Shared
            | MatmulTile::Tile64 => 4,
            MatmulTile::Rows1
            | MatmulTile::Rows1Split
            | MatmulTile::Rows1Split64
            | MatmulTile::Rows1Split256 => 1,
        }
    }

    /// Whether the tile is a candidate for an output of `m` rows: every tile but the
    /// matrix-vector ones ([`MatmulTile::is_matvec`]), which are for at most
    /// [`MATVEC_MAX_ROWS`] (4) rows, and the narrow split ones
    /// ([`MatmulTile::Rows1Split64`], [`MatmulTile::Rows1Split256`], GPUs only) for at
    /// most [`SPLIT_MAX_ROWS`] (256).
    pub fn fits(self, m: u32) -> bool {
        match self {
            MatmulTile::Rows1Split64 | MatmulTile::Rows1Split256 => m <= SPLIT_MAX_ROWS,
            tile if tile.is_matvec() => m <= MATVEC_MAX_ROWS,
            _ => true,
        }
    }

    /// Whether the fused matmuls run the matrix-vector kernels with this tile
    /// ([`MatmulTile::Rows1`] and the split tiles).
    pub fn is_matvec(self) -> bool {
        self == MatmulTile::Rows1 || self.split() > 1
    }

    /// Whether the tuner offers the tile on GPUs only: the narrow split tiles
    /// ([`MatmulTile::Rows1Split64`], [`MatmulTile::Rows1Split256`]), whose
    /// many barriers a CPU adapter pays for with every invocation (on lavapipe even the
    /// 16-slice split is 1.2-2.9x slower than [`MatmulTile::Rows1`]).
    pub fn for_gpus_only(self) -> bool {
        matches!(
            self,
            MatmulTile::Rows1Split64 | MatmulTile::Rows1Split256 | MatmulTile::Tile64
        )
    }

    /// The tile `matmul_bt` runs for this one: the same, but [`MatmulTile::Rows1`] for a
    /// split tile and [`MatmulTile::Rows4`] for [`MatmulTile::Tile64`] (its kernel has
    /// neither form). The tuner offers `matmul_bt` only the tiles it runs as themselves.
    pub fn in_bt(self) -> MatmulTile {
        match self {
            t if t.split() > 1 => MatmulTile::Rows1,
            t => t.in_norm(),
        }
    }

    /// The tile the norm-fused matmul runs for this one: the same, but
    /// [`MatmulTile::Rows4`] for [`MatmulTile::Tile64`] (it has no 64 x 64 form).
    pub fn in_norm(self) -> MatmulTile {
        match self {
            MatmulTile::Tile64 => MatmulTile::Rows4,
            t => t,
        }
    }

    /// The tile the matrix-vector kernels run for this one: the same for
    /// [`MatmulTile::Rows1`] and the split tiles, [`MatmulTile::Rows1`] for the others
    /// (a matmul the tiled kernels cannot take falls back to the matrix-vector kernel).
    pub fn in_matvec(self) -> MatmulTile {
        if self.is_matvec() {
            self
        } else {
            MatmulTile::Rows1
        }
    }

    /// Output rows per workgroup: [`MatmulTile::rows`], but 64 for
    /// [`MatmulTile::Tile64`] (16 invocations down, 4 rows each).
    pub fn workgroup_rows(self) -> u32 {
        match self {
            MatmulTile::Tile64 => 64,
            t => t.rows(),
        }
    }

    /// Whether the tile shares its reads of A across a subgroup
    /// ([`MatmulTile::Rows8Shared`], [`MatmulTile::Rows4Shared`],
    /// [`MatmulTile::Rows16Shared`], [`MatmulTile::Rows32Shared`]).
    pub fn shares_a(self) -> bool {
        matches!(
            self,
            MatmulTile::Rows8Shared
                | MatmulTile::Rows4Shared
                | MatmulTile::Rows16Shared
                | MatmulTile::Rows32Shared
        )
    }

    /// Slices of `k` per workgroup of the matrix-vector kernels (1 unsplit; always a
    /// power of two: `shaders/matvec.wgsl` adds the slices' sums as a tree).
    pub fn split(self) -> u32 {
        match self {
            MatmulTile::Rows1Split => 16,
            MatmulTile::Rows1Split64 => 64,
            MatmulTile::Rows1Split256 => 256,
            _ => 1,
        }
    }

    /// Invocations along a workgroup's x dimension (16 or 64; the narrow split tiles
    /// 4 or 1; [`MatmulTile::Tile64`] 256); the split matrix-vector tiles have
    /// [`MatmulTile::split`] rows of them.
    pub fn lanes(self) -> u32 {
        match self {
            MatmulTile::Rows8
            | MatmulTile::Rows4
            | MatmulTile::Rows1
            | MatmulTile::Rows1Split
            | MatmulTile::Rows8Shared
            | MatmulTile::Rows4Shared
            | MatmulTile::Rows16Shared
            | MatmulTile::Rows32Shared => 16,
            MatmulTile::Rows8Wide | MatmulTile::Rows4Wide => 64,
            MatmulTile::Rows1Split64 => 4,
            MatmulTile::Rows1Split256 => 1,
            MatmulTile::Tile64 => 256,
        }
    }

    /// Output columns per workgroup of the tiled kernels (4 per invocation; the
    /// matrix-vector kernels cover [`MatmulTile::matvec_columns`]).
    pub fn columns(self) -> u32 {
        match self {
            MatmulTile::Tile64 => 64,
            t => 4 * t.lanes(),
        }
    }

    /// Output columns per workgroup of the matrix-vector kernels with this tile: 16 per
    /// lane (256 for 16 lanes).
    pub fn matvec_columns(self) -> u32 {
        16 * self.lanes()
    }

    /// The tile for an `m x n` output: 8 rows per invocation unless that leaves fewer
    /// workgroups than `MIN_TILED_WORKGROUPS` (then 4). Measured on lavapipe, 8 rows
    /// ran 1.3-1.4x faster than 4 on the decoder's shapes (`examples/kernel_lab.rs`).
    ///
    /// One row (decode) takes [`MatmulTile::Rows1`], the matrix-vector kernels.
    pub fn choose(m: u32, n: u32) -> MatmulTile {
        if m == 1 {
            return MatmulTile::Rows1;
        }
        let groups =
            |t: MatmulTile| u64::from(m.div_ceil(t.rows())) * u64::from(n.div_ceil(t.columns()));
        if groups(MatmulTile::Rows8) >= MIN_TILED_WORKGROUPS {
            MatmulTile::Rows8
        } else {
            MatmulTile::Rows4
        }
    }

    /// The rule's tile on a CPU adapter with subgroups, where the tiles that share
    /// their reads of A run: the tallest shared tile the `m` rows fill
    /// ([`MatmulTile::Rows32Shared`] from 32 rows, [`MatmulTile::Rows16Shared`] from 16,
    /// [`MatmulTile::Rows8Shared`] from 5, [`MatmulTile::Rows4Shared`] below), and
    /// [`MatmulTile::Rows1`] for one row as [`MatmulTile::choose`]. Measured on
    /// lavapipe (`WGALLOC_BENCH_TILES=1 cargo bench --bench forward`), the 32-row tile
    /// was the fastest or within noise of it at every prefill shape of 64 to 256 rows,
    /// and 1.9-3.9x faster than the plain rule's [`MatmulTile::Rows8`]: a device that
    /// does not tune (tuning off, no timestamps, or the tuning budget spent) still gets
    /// it.
    pub fn choose_shared(m: u32) -> MatmulTile {
        match m {
            1 => MatmulTile::Rows1,
            0..=4 => MatmulTile::Rows4Shared,
            5..=15 => MatmulTile::Rows8Shared,
            16..=31 => MatmulTile::Rows16Shared,
            _ => MatmulTile::Rows32Shared,
        }
    }

    /// The tile's name in the tuning cache (`rows8`, `rows4`, `rows1`, `rows8w64`,
    /// `rows4w64`, `rows1k16`, `rows8sg`, `rows4sg`, `rows1k64`, `rows1k256`, `tile64`,
    /// `rows16sg`, `rows32sg`).
    pub fn name(self) -> &'static str {
        match self {
            MatmulTile::Rows8 => "rows8",
            MatmulTile::Rows4 => "rows4",
            MatmulTile::Rows1 => "rows1",
            MatmulTile::Rows8Wide => "rows8w64",
            MatmulTile::Rows4Wide => "rows4w64",
            MatmulTile::Rows1Split => "rows1k16",
            MatmulTile::Rows1Split64 => "rows1k64",
            MatmulTile::Rows1Split256 => "rows1k256",
            MatmulTile::Tile64 => "tile64",
            MatmulTile::Rows8Shared => "rows8sg",
            MatmulTile::Rows4Shared => "rows4sg",
            MatmulTile::Rows16Shared => "rows16sg",
            MatmulTile::Rows32Shared => "rows32sg",
        }
    }

    /// The tile named `name` ([`MatmulTile::name`]), if any.
    pub fn from_name(name: &str) -> Option<MatmulTile> {
        MatmulTile::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The pipeline constants of this tile.
    pub fn constants(self) -> [(&'static str, f64); 2] {
        [
            ("ROWS", f64::from(self.rows())),
            ("LANES", f64::from(self.lanes())),
        ]
    }
}

/// The most rows of the matrix-vector kernels ([`MatmulTile::Rows1`], [`Kernel::Matvec`]):
/// each row is one more pass over the weights.
pub const MATVEC_MAX_ROWS: u32 = 4;

/// The most rows of the narrow split matrix-vector tiles ([`MatmulTile::Rows1Split64`],
/// [`MatmulTile::Rows1Split256`]), which the tuner offers GPUs only. Each row is its
/// own workgroups, each walking a slice of `k`: the weights are read once per row, on a
/// GPU mostly from its cache, where the tiled kernels give a few rows too few
/// workgroups, each walking all of `k`, to hide their reads. On an NVIDIA H200 (the
/// tuner's classes, us): 16 x 1024 x 1024 `rows4` 689, `rows1k64` 82; 64 x 4096 x 1024
/// `rows4` 578, `rows1k64` 110. The tuner times them against the tiled kernels for
/// outputs of up to this many rows (short prompts, prefill chunks); past it the
/// weights' rereads are left to the tiled kernels.
pub const SPLIT_MAX_ROWS: u32 = 256;

/// Below this many workgroups with 8 rows, the tiled matmul takes 4 rows per invocation.
pub const MIN_TILED_WORKGROUPS: u64 = 32;

/// Queries per workgroup of the per-query and key-tiled attention kernels (and of the
/// KV-cache kernels); [`AttentionForm::queries_per_workgroup`] gives each form's.
pub const ATTENTION_QUERIES: u64 = 16;

/// The widest head [`AttentionForm::KeyTiles`] takes (its tiles hold 16 `vec4`s a row).
pub const TILED_ATTENTION_MAX_HEAD_DIM: u32 = 64;

/// The widest head the query-block attention forms take. Wider heads run per query: at
/// 256 the query blocks' first dispatch on lavapipe (its LLVM compile, four rows of
/// 64 `vec4`s a lane) took 59-62 s against 3.4 s per query, and at 128 the blocks
/// were measured no faster than before the head's width was fixed.
pub const QUERY_BLOCKS_MAX_HEAD_DIM: u32 = 128;

/// Workgroup memory of [`AttentionForm::KeyTiles`]: three tiles of 16 rows of 17
/// `vec4<f32>` (queries, keys, values; 16 and a pad) and 16 x 17 scores.
pub const TILED_ATTENTION_WORKGROUP_BYTES: u32 = 3 * 272 * 16 + 272 * 4;

/// How fused causal attention (`attention_causal`) runs: a choice per device, timed by
/// the tuner ([`crate::exec::tune`]) like a matmul's tile. Both forms compute the same
/// online softmax over the same keys; they differ in how the keys reach the queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttentionForm {
    /// `shaders/attention.wgsl`: one invocation per query, 16 a workgroup, each reading
    /// every key and value row from storage (the same address across the workgroup) and
    /// keeping its query and output row in private memory. Any head up to 256 wide.
    /// The rule's form: measured on lavapipe, where a workgroup's barriers are costly.
    PerQuery,
    /// `shaders/attention_tiled.wgsl`: 64 invocations for 16 queries; the workgroup loads
    /// 16 keys and values at a time into workgroup memory (each row read once per
    /// workgroup) and four invocations share a query's keys and output columns. Heads up
    /// to 64 wide (`TILED_ATTENTION_MAX_HEAD_DIM`).
    KeyTiles,
    /// `shaders/attention_blocks.wgsl`: 16 invocations for 64 queries, 4 consecutive
    /// queries an invocation, so that each key and value element read from storage
    /// feeds four multiply-adds (one per query) where the per-query kernel's feeds one.
    /// For CPU adapters, where every storage read costs a load per invocation and
    /// private arrays are cheap; the queries and outputs take 2 x 4 rows of the head
    /// of private memory per invocation. Heads up to 128 wide
    /// (`QUERY_BLOCKS_MAX_HEAD_DIM`).
    QueryBlocks,
    /// `shaders/attention_blocks.wgsl` with `shaders/attention_blocks_shared.wgsl`: the
    /// query blocks with each group of 8 `vec4`s of a key or value row read once per
    /// subgroup and passed on with `subgroupShuffle` (every invocation of the
    /// workgroup reads the same rows), 8 times fewer storage reads of K and V. Needs
    /// the device's subgroup feature ([`AttentionForm::needs_subgroups`]); a subgroup
    /// narrower than 8 reads as [`AttentionForm::QueryBlocks`]. Heads up to 128 wide.
    QueryBlocksShared,
}

impl AttentionForm {
    /// Every form, in the order the tuner times them.
    pub const ALL: [AttentionForm; 4] = [
        AttentionForm::PerQuery,
        AttentionForm::KeyTiles,
        AttentionForm::QueryBlocks,
        AttentionForm::QueryBlocksShared,
    ];

    /// Whether the form needs the device's subgroup operations.
    pub fn needs_subgroups(self) -> bool {
        self == AttentionForm::QueryBlocksShared
    }

    /// Whether the form takes heads `head_dim` wide.
    pub fn fits(self, head_dim: u32) -> bool {
        match self {
            AttentionForm::PerQuery => true,
            AttentionForm::QueryBlocks | AttentionForm::QueryBlocksShared => {
                head_dim <= QUERY_BLOCKS_MAX_HEAD_DIM
            }
            AttentionForm::KeyTiles => head_dim <= TILED_ATTENTION_MAX_HEAD_DIM,
        }
    }

    /// Invocations per workgroup.
    pub fn invocations(self) -> u32 {
        match self {
            AttentionForm::PerQuery
            | AttentionForm::QueryBlocks
            | AttentionForm::QueryBlocksShared => 16,
            AttentionForm::KeyTiles => 64,
        }
    }

    /// Queries per workgroup (the grid covers the sequence with them, heads along y).
    pub fn queries_per_workgroup(self) -> u64 {
        match self {
            AttentionForm::PerQuery | AttentionForm::KeyTiles => ATTENTION_QUERIES,
            AttentionForm::QueryBlocks | AttentionForm::QueryBlocksShared => 64,
        }
    }

    /// The form's name in the tuning cache (`per-query`, `key-tiles`, `query-blocks`,
    /// `query-blocks-sg`).
    pub fn name(self) -> &'static str {
        match self {
            AttentionForm::PerQuery => "per-query",
            AttentionForm::KeyTiles => "key-tiles",
            AttentionForm::QueryBlocks => "query-blocks",
            AttentionForm::QueryBlocksShared => "query-blocks-sg",
        }
    }

    /// The rule's form, by adapter type: on a CPU adapter
    /// [`AttentionForm::QueryBlocksShared`] where it has subgroups, else
    /// [`AttentionForm::QueryBlocks`] (measured on lavapipe: 1.4-1.8x faster than per
    /// query on the decoder's and GPT-2's shapes, and the shared reads 1.3-2x faster
    /// again at heads 32 and 64 wide); [`AttentionForm::PerQuery`] elsewhere.
    pub fn rule(cpu_adapter: bool, subgroups: bool) -> AttentionForm {
        match (cpu_adapter, subgroups) {
            (true, true) => AttentionForm::QueryBlocksShared,
            (true, false) => AttentionForm::QueryBlocks,
            (false, _) => AttentionForm::PerQuery,
        }
    }

    /// [`AttentionForm::rule`] for heads `head_dim` wide: the rule's form where it
    /// takes the head, else [`AttentionForm::PerQuery`].
    pub fn rule_for(cpu_adapter: bool, subgroups: bool, head_dim: u32) -> AttentionForm {
        Some(AttentionForm::rule(cpu_adapter, subgroups))
            .filter(|f| f.fits(head_dim))
            .unwrap_or(AttentionForm::PerQuery)
    }

    /// The form `pick` asks for a head `head_dim` wide: the picked form where it
    /// takes the head, else [`AttentionForm::PerQuery`].
    pub fn picked(pick: Pick, head_dim: u32) -> AttentionForm {
        pick.attention
            .filter(|f| f.fits(head_dim))
            .unwrap_or(AttentionForm::PerQuery)
    }

    /// The form named `name` ([`AttentionForm::name`]), if any.
    pub fn from_name(name: &str) -> Option<AttentionForm> {
        AttentionForm::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl Kernel {
    /// The shader file and entry point.
    pub fn entry(self) -> (Shader, &'static str) {
        // A tiled matmul's shader: its shared-read form for the tiles that share.
        let by_tile = |t: MatmulTile, plain: Shader, shared: Shader| {
            if t.shares_a() {
                shared
            } else {
                plain
            }
        };
        let tiled = |t| match t {
            MatmulTile::Tile64 => Shader::MatmulTiled64,
            t => by_tile(t, Shader::MatmulTiled, Shader::MatmulTiledShared),
        };
        match self {
            Kernel::Unary => (Shader::Unary, "unary"),
            Kernel::UnaryInPlace => (Shader::Unary, "unary_inplace"),
            Kernel::Binary => (Shader::Binary, "binary"),
            Kernel::BinaryInPlace => (Shader::Binary, "binary_inplace"),
            Kernel::Softmax => (Shader::Softmax, "softmax_rows"),
            Kernel::SoftmaxInPlace => (Shader::Softmax, "softmax_rows_inplace"),
            Kernel::LayerNorm => (Shader::Norm, "layer_norm"),
            Kernel::LayerNormRows => (Shader::Norm, "layer_norm_rows"),
            Kernel::RmsNorm => (Shader::Norm, "rms_norm"),
            Kernel::Matmul => (Shader::Matmul, "matmul"),
            Kernel::MatmulBt => (Shader::Matmul, "matmul_bt"),
            Kernel::Embedding => (Shader::Embedding, "embedding"),
            Kernel::Rope => (Shader::Rope, "rope"),
            Kernel::RopeInPlace => (Shader::Rope, "rope_inplace"),
            Kernel::CopyWords => (Shader::Copy, "copy_words"),
            Kernel::CountPositive => (Shader::Compact, "count_positive"),
            Kernel::Compact => (Shader::Compact, "compact"),
            Kernel::MatmulPacked => (Shader::MatmulPacked, "matmul_packed"),
            Kernel::MatmulTiled(t) => (tiled(t), "matmul_tiled"),
            Kernel::MatmulTiledAcc(t) => (tiled(t), "matmul_tiled_acc"),
            Kernel::MatmulTiledAccTo(t) => (tiled(t), "matmul_tiled_acc_to"),
            Kernel::MatmulTiledBias(t) => (tiled(t), "matmul_tiled_bias"),
            Kernel::MatmulTiledAccBias(t) => (tiled(t), "matmul_tiled_acc_bias"),
            Kernel::MatmulTiledAccToBias(t) => (tiled(t), "matmul_tiled_acc_to_bias"),
            Kernel::MatmulBtTiled(t) => (
                by_tile(t, Shader::MatmulBtTiled, Shader::MatmulBtTiledShared),
                "matmul_bt_tiled",
            ),
            Kernel::Attention(_) => (Shader::Attention, "attention_causal"),
            Kernel::AttentionTiled(_) => (Shader::AttentionTiled, "attention_tiled"),
            Kernel::AttentionBlocks(_) => (Shader::AttentionBlocks, "attention_blocks"),
            Kernel::AttentionBlocksShared(_) => (Shader::AttentionBlocksShared, "attention_blocks"),
            Kernel::KvSelf(_) => (Shader::KvSelf, "kv_self"),
            Kernel::KvAttendInPlace(..) => (Shader::KvAttend, "kv_attend_inplace"),
            Kernel::KvAttend(..) => (Shader::KvAttend, "kv_attend"),
            Kernel::KvAttendOut(..) => (Shader::KvAttend, "kv_attend_out"),
            Kernel::MatmulNormBias(t) => (
                by_tile(t, Shader::MatmulNorm, Shader::MatmulNormShared),
                "matmul_norm_bias",
            ),
            Kernel::KvSelfAttend(..) => (Shader::KvSelfAttend, "kv_self_attend"),
            Kernel::KvSelfAttendOut(..) => (Shader::KvSelfAttend, "kv_self_attend_out"),
            Kernel::Matvec(_) => (Shader::Matvec, "matvec"),
            Kernel::MatvecAcc(_) => (Shader::Matvec, "matvec_acc"),
            Kernel::MatvecAccTo(_) => (Shader::Matvec, "matvec_acc_to"),
            Kernel::MatvecBias(_) => (Shader::Matvec, "matvec_bias"),
            Kernel::MatvecAccBias(_) => (Shader::Matvec, "matvec_acc_bias"),
            Kernel::MatvecAccToBias(_) => (Shader::Matvec, "matvec_acc_to_bias"),
            Kernel::MatvecNormBias(_) => (Shader::Matvec, "matvec_norm_bias"),
        }
    }

    /// The pipeline constants the kernel is built with (its tile, for tiled matmuls;
    /// the paged cache's slices; then the head's width, [`Kernel::head_width`]).
    pub fn constants(self) -> Vec<(&'static str, f64)> {
        let mut constants = match self {
            Kernel::MatmulTiled(t)
            | Kernel::MatmulTiledAcc(t)
            | Kernel::MatmulTiledAccTo(t)
            | Kernel::MatmulTiledBias(t)
            | Kernel::MatmulTiledAccBias(t)
            | Kernel::MatmulTiledAccToBias(t)
            | Kernel::MatmulBtTiled(t)
            | Kernel::MatmulNormBias(t) => t.constants().to_vec(),
            Kernel::Matvec(t)
            | Kernel::MatvecAcc(t)
            | Kernel::MatvecAccTo(t)
            | Kernel::MatvecBias(t)
            | Kernel::MatvecAccBias(t)
            | Kernel::MatvecAccToBias(t)
            | Kernel::MatvecNormBias(t) => vec![
                ("LANES", f64::from(t.lanes())),
                ("SPLIT", f64::from(t.split())),
            ],
            Kernel::KvAttendInPlace(w, _)
            | Kernel::KvAttend(w, _)
            | Kernel::KvAttendOut(w, _)
            | Kernel::KvSelfAttend(w, _)
            | Kernel::KvSelfAttendOut(w, _) => vec![("SLICES", f64::from(w.slices()))],
            _ => Vec::new(),
        };
        constants.extend(self.head_width().map(HeadWidth::constant));
        constants
    }

    /// The head width the kernel is built for: the attention and KV-cache kernels'.
    pub fn head_width(self) -> Option<HeadWidth> {
        match self {
            Kernel::Attention(head)
            | Kernel::AttentionTiled(head)
            | Kernel::AttentionBlocks(head)
            | Kernel::AttentionBlocksShared(head)
            | Kernel::KvSelf(head)
            | Kernel::KvAttendInPlace(_, head)
            | Kernel::KvAttend(_, head)
            | Kernel::KvAttendOut(_, head)
            | Kernel::KvSelfAttend(_, head)
            | Kernel::KvSelfAttendOut(_, head) => Some(head),
            _ => None,
        }
    }

    /// The WGSL source the kernel is built from for tensors stored as `storage`: its
    /// shader's ([`Shader::source_for`]), with the private arrays of a head's row sized
    /// for the kernel's head width where it has one ([`HeadWidth::sized`]).
    pub fn source_for(self, storage: StorageType) -> Option<Cow<'static, str>> {
        let source = self.entry().0.source_for(storage)?;
        Some(match self.head_width() {
            Some(head) => Cow::Owned(head.sized(source)),
            None => Cow::Borrowed(source),
        })
    }

    /// Storage bindings after the uniform.
    pub fn storage_bindings(self) -> usize {
        match self {
            Kernel::UnaryInPlace | Kernel::SoftmaxInPlace | Kernel::RopeInPlace => 1,
            Kernel::Attention(_)
            | Kernel::AttentionTiled(_)
            | Kernel::AttentionBlocks(_)
            | Kernel::AttentionBlocksShared(_)
            | Kernel::KvSelf(_) => 2,
            Kernel::KvAttendInPlace(..)
            | Kernel::KvSelfAttend(..)
            | Kernel::KvSelfAttendOut(..) => 4,
            Kernel::KvAttend(..) | Kernel::KvAttendOut(..) => 5,
            Kernel::MatmulTiled(_) | Kernel::MatmulTiledAcc(_) | Kernel::MatmulBtTiled(_) => 3,
            Kernel::MatmulTiledAccTo(_)
            | Kernel::MatmulTiledBias(_)
            | Kernel::MatmulTiledAccBias(_) => 4,
            Kernel::MatmulTiledAccToBias(_) | Kernel::MatvecAccToBias(_) => 5,
            Kernel::MatvecAccTo(_) | Kernel::MatvecBias(_) | Kernel::MatvecAccBias(_) => 4,
            Kernel::Matvec(_) | Kernel::MatvecAcc(_) => 3,
            Kernel::MatmulNormBias(_) | Kernel::MatvecNormBias(_) => 6,
            Kernel::Unary
            | Kernel::BinaryInPlace
            | Kernel::Softmax
            | Kernel::Rope
            | Kernel::CopyWords
            | Kernel::CountPositive => 2,
            Kernel::Binary
            | Kernel::RmsNorm
            | Kernel::Matmul
            | Kernel::MatmulBt
            | Kernel::Embedding
            | Kernel::Compact
            | Kernel::MatmulPacked => 3,
            Kernel::LayerNorm | Kernel::LayerNormRows => 4,
        }
    }

    /// Every kernel.
    pub const ALL: [Kernel; 133] = [
        Kernel::Unary,
        Kernel::UnaryInPlace,
        Kernel::Binary,
        Kernel::BinaryInPlace,
        Kernel::Softmax,
        Kernel::SoftmaxInPlace,
        Kernel::LayerNorm,
        Kernel::LayerNormRows,
        Kernel::RmsNorm,
        Kernel::Matmul,
        Kernel::MatmulBt,
        Kernel::Embedding,
        Kernel::Rope,
        Kernel::RopeInPlace,
        Kernel::CopyWords,
        Kernel::CountPositive,
        Kernel::Compact,
        Kernel::MatmulPacked,
        Kernel::MatmulTiled(MatmulTile::Rows8),
        Kernel::MatmulTiled(MatmulTile::Rows4),
        Kernel::MatmulTiled(MatmulTile::Rows8Wide),
        Kernel::MatmulTiled(MatmulTile::Rows4Wide),
        Kernel::MatmulTiledAcc(MatmulTile::Rows8),
        Kernel::MatmulTiledAcc(MatmulTile::Rows4),
        Kernel::MatmulTiledAcc(MatmulTile::Rows8Wide),
        Kernel::MatmulTiledAcc(MatmulTile::Rows4Wide),
        Kernel::MatmulTiledAccTo(MatmulTile::Rows8),
        Kernel::MatmulTiledAccTo(MatmulTile::Rows4),
        Kernel::MatmulTiledAccTo(MatmulTile::Rows8Wide),
        Kernel::MatmulTiledAccTo(MatmulTile::Rows4Wide),
        Kernel::MatmulBtTiled(MatmulTile::Rows8),
        Kernel::MatmulBtTiled(MatmulTile::Rows4),
        Kernel::MatmulBtTiled(MatmulTile::Rows8Wide),
        Kernel::MatmulBtTiled(MatmulTile::Rows4Wide),
        Kernel::Attention(HeadWidth::GPT2),
        Kernel::KvSelf(HeadWidth::GPT2),
        Kernel::KvAttendInPlace(DecodeSlices::Queries, HeadWidth::GPT2),
        Kernel::KvAttendInPlace(DecodeSlices::Wide, HeadWidth::GPT2),
        Kernel::KvAttend(DecodeSlices::Queries, HeadWidth::GPT2),
        Kernel::KvAttend(DecodeSlices::Wide, HeadWidth::GPT2),
        Kernel::KvAttendOut(DecodeSlices::Queries, HeadWidth::GPT2),
        Kernel::KvAttendOut(DecodeSlices::Wide, HeadWidth::GPT2),
        Kernel::MatmulTiledBias(MatmulTile::Rows8),
        Kernel::MatmulTiledBias(MatmulTile::Rows4),
        Kernel::MatmulTiledBias(MatmulTile::Rows8Wide),
        Kernel::MatmulTiledBias(MatmulTile::Rows4Wide),
        Kernel::MatmulTiledAccBias(MatmulTile::Rows8),
        Kernel::MatmulTiledAccBias(MatmulTile::Rows4),
        Kernel::MatmulTiledAccBias(MatmulTile::Rows8Wide),
        Kernel::MatmulTiledAccBias(MatmulTile::Rows4Wide),
        Kernel::MatmulTiledAccToBias(MatmulTile::Rows8),
        Kernel::MatmulTiledAccToBias(MatmulTile::Rows4),
        Kernel::MatmulTiledAccToBias(MatmulTile::Rows8Wide),
        Kernel::MatmulTiledAccToBias(MatmulTile::Rows4Wide),
        Kernel::MatmulNormBias(MatmulTile::Rows8),
        Kernel::MatmulNormBias(MatmulTile::Rows4),
        Kernel::MatmulNormBias(MatmulTile::Rows8Wide),
        Kernel::MatmulNormBias(MatmulTile::Rows4Wide),
        Kernel::KvSelfAttend(DecodeSlices::Queries, HeadWidth::GPT2),
        Kernel::KvSelfAttend(DecodeSlices::Wide, HeadWidth::GPT2),
        Kernel::KvSelfAttendOut(DecodeSlices::Queries, HeadWidth::GPT2),
        Kernel::KvSelfAttendOut(DecodeSlices::Wide, HeadWidth::GPT2),
        Kernel::Matvec(MatmulTile::Rows1),
        Kernel::Matvec(MatmulTile::Rows1Split),
        Kernel::Matvec(MatmulTile::Rows1Split64),
        Kernel::Matvec(MatmulTile::Rows1Split256),
        Kernel::MatvecAcc(MatmulTile::Rows1),
        Kernel::MatvecAcc(MatmulTile::Rows1Split),
        Kernel::MatvecAcc(MatmulTile::Rows1Split64),
        Kernel::MatvecAcc(MatmulTile::Rows1Split256),
        Kernel::MatvecAccTo(MatmulTile::Rows1),
        Kernel::MatvecAccTo(MatmulTile::Rows1Split),
        Kernel::MatvecAccTo(MatmulTile::Rows1Split64),
        Kernel::MatvecAccTo(MatmulTile::Rows1Split256),
        Kernel::MatvecBias(MatmulTile::Rows1),
        Kernel::MatvecBias(MatmulTile::Rows1Split),
        Kernel::MatvecBias(MatmulTile::Rows1Split64),
        Kernel::MatvecBias(MatmulTile::Rows1Split256),
        Kernel::MatvecAccBias(MatmulTile::Rows1),
        Kernel::MatvecAccBias(MatmulTile::Rows1Split),
        Kernel::MatvecAccBias(MatmulTile::Rows1Split64),
        Kernel::MatvecAccBias(MatmulTile::Rows1Split256),
        Kernel::MatvecAccToBias(MatmulTile::Rows1),
        Kernel::MatvecAccToBias(MatmulTile::Rows1Split),
        Kernel::MatvecAccToBias(MatmulTile::Rows1Split64),
        Kernel::MatvecAccToBias(MatmulTile::Rows1Split256),
        Kernel::MatmulBtTiled(MatmulTile::Rows1),
        Kernel::MatmulNormBias(MatmulTile::Rows1),
        Kernel::MatvecNormBias(MatmulTile::Rows1),
        Kernel::MatvecNormBias(MatmulTile::Rows1Split),
        Kernel::MatvecNormBias(MatmulTile::Rows1Split64),
        Kernel::MatvecNormBias(MatmulTile::Rows1Split256),
        Kernel::AttentionTiled(HeadWidth::GPT2),
        Kernel::AttentionBlocks(HeadWidth::GPT2),
        Kernel::AttentionBlocksShared(HeadWidth::GPT2),
        Kernel::MatmulTiled(MatmulTile::Rows8Shared),
        Kernel::MatmulTiled(MatmulTile::Rows4Shared),
        Kernel::MatmulTiledAcc(MatmulTile::Rows8Shared),
        Kernel::MatmulTiledAcc(MatmulTile::Rows4Shared),
        Kernel::MatmulTiledAccTo(MatmulTile::Rows8Shared),
        Kernel::MatmulTiledAccTo(MatmulTile::Rows4Shared),
        Kernel::MatmulTiledBias(MatmulTile::Rows8Shared),
        Kernel::MatmulTiledBias(MatmulTile::Rows4Shared),
        Kernel::MatmulTiledAccBias(MatmulTile::Rows8Shared),
        Kernel::MatmulTiledAccBias(MatmulTile::Rows4Shared),
        Kernel::MatmulTiledAccToBias(MatmulTile::Rows8Shared),
        Kernel::MatmulTiledAccToBias(MatmulTile::Rows4Shared),
        Kernel::MatmulBtTiled(MatmulTile::Rows8Shared),
        Kernel::MatmulBtTiled(MatmulTile::Rows4Shared),
        Kernel::MatmulNormBias(MatmulTile::Rows8Shared),
        Kernel::MatmulNormBias(MatmulTile::Rows4Shared),
        Kernel::MatmulTiled(MatmulTile::Rows16Shared),
        Kernel::MatmulTiled(MatmulTile::Rows32Shared),
        Kernel::MatmulTiledAcc(MatmulTile::Rows16Shared),
        Kernel::MatmulTiledAcc(MatmulTile::Rows32Shared),
        Kernel::MatmulTiledAccTo(MatmulTile::Rows16Shared),
        Kernel::MatmulTiledAccTo(MatmulTile::Rows32Shared),
        Kernel::MatmulTiledBias(MatmulTile::Rows16Shared),
        Kernel::MatmulTiledBias(MatmulTile::Rows32Shared),
        Kernel::MatmulTiledAccBias(MatmulTile::Rows16Shared),
        Kernel::MatmulTiledAccBias(MatmulTile::Rows32Shared),
        Kernel::MatmulTiledAccToBias(MatmulTile::Rows16Shared),
        Kernel::MatmulTiledAccToBias(MatmulTile::Rows32Shared),
        Kernel::MatmulBtTiled(MatmulTile::Rows16Shared),
        Kernel::MatmulBtTiled(MatmulTile::Rows32Shared),
        Kernel::MatmulNormBias(MatmulTile::Rows16Shared),
        Kernel::MatmulNormBias(MatmulTile::Rows32Shared),
        Kernel::MatmulTiled(MatmulTile::Tile64),
        Kernel::MatmulTiledAcc(MatmulTile::Tile64),
        Kernel::MatmulTiledAccTo(MatmulTile::Tile64),
        Kernel::MatmulTiledBias(MatmulTile::Tile64),
        Kernel::MatmulTiledAccBias(MatmulTile::Tile64),
        Kernel::MatmulTiledAccToBias(MatmulTile::Tile64),
    ];
}

/// What a pipeline (and so a cached bind group) is known by: a built-in kernel, or a
/// user op's entry point ([`crate::exec::register_op`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PipelineKey {
    /// A built-in kernel.
    Builtin(Kernel),
    /// A registered user op (its process-unique id), in place or not.
    User {
        /// The op's id.
        id: u64,
        /// Its in-place entry point.
        inplace: bool,
    },
}

/// The kernel for a call, in place or not, and the order in which the node's tensors
/// are bound: indices into `[inputs.., output]` (`inputs.len()` is the output).
/// `None` when `inplace` is asked of a call that has no in-place kernel.
pub fn select(call: &OpCall, inplace: bool) -> Option<(Kernel, &'static [usize])> {
    select_with(call, inplace, Pick::default())
}

/// What a device chooses among a call's kernels ([`select_with`], [`workgroups_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// The register tile of a tiled matmul (`None`: the rule, [`MatmulTile::choose`]).
    pub tile: Option<MatmulTile>,
    /// Whether a layer norm of many short rows may run one invocation per row
    /// ([`Kernel::LayerNormRows`], [`norm_by_rows`]). Right on a CPU adapter (lavapipe:
    /// a workgroup's barriers switch between its invocations); on a GPU each invocation
    /// walking its own row reads memory uncoalesced, and the 256-invocation kernel per
    /// row is faster (an NVIDIA H200: 0.25 ms for 256 x 512 per row).
    pub norm_rows: bool,
    /// How fused attention runs (`None`: [`AttentionForm::PerQuery`]); a form that does
    /// not take the call's head width ([`AttentionForm::fits`]) runs per query.
    pub attention: Option<AttentionForm>,
    /// How many invocations split a decode step's cached keys in the paged-cache
    /// attention kernels ([`DecodeSlices`]).
    pub decode: DecodeSlices,
}

impl Pick {
    /// The paged-cache kernels' width for a call of `n` queries: [`Pick::decode`] for
    /// one (a decode step), [`DecodeSlices::Queries`] for a chunk.
    pub fn slices_for(self, n: u32) -> DecodeSlices {
        if n == 1 {
            self.decode
        } else {
            DecodeSlices::Queries
        }
    }
}

/// The width of one attention head in `vec4`s (`head_dim / 4`), the attention and
/// KV-cache shaders' `HD4` pipeline constant. With the width fixed when the pipeline
/// is built, the loops over a head have a known length: a compiler can unroll them and
/// keep the query and output rows in registers instead of indexing arrays sized for
/// the widest head (256) at run time. On llvmpipe the query-block attention took
/// 0.38-0.51 of the per-query form's time at head width 64 with the width fixed,
/// against 0.52-0.95 with it read from the parameters (`cargo bench --bench forward`'s
/// attention table). One pipeline per head width in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HeadWidth(u32);

impl HeadWidth {
    /// GPT-2's heads (64 wide): the width [`Kernel::ALL`] lists the attention kernels with.
    pub const GPT2: HeadWidth = HeadWidth(16);

    /// The width of heads `head_dim` wide (a multiple of 4, as the ops check).
    pub fn of(head_dim: u32) -> HeadWidth {
        HeadWidth(head_dim / 4)
    }

    /// The pipeline constant.
    fn constant(self) -> (&'static str, f64) {
        ("HD4", f64::from(self.0))
    }

    /// `source` (an attention or KV-cache shader, which joins `shaders/head_width.wgsl`)
    /// with its one definition of `MAX_HD4`, the length of the private arrays holding a
    /// head's row, rewritten from the widest head's 64 to this width. A compiler then
    /// allocates only what the head uses: on lavapipe the query-block attention's first
    /// dispatch (its LLVM compile) took 19-37 s with arrays sized for 256, 4.4-5.7 s
    /// sized for 64, at any head width. A source without that definition is returned
    /// as it is.
    pub fn sized(self, source: &str) -> String {
        source.replacen(
            MAX_HD4_WIDEST,
            &format!("const MAX_HD4: u32 = {}u;", self.0),
            1,
        )
    }
}

/// `shaders/head_width.wgsl`'s definition of the private arrays' length, as written
/// (for the widest head), which [`HeadWidth::sized`] rewrites.
const MAX_HD4_WIDEST: &str = "const MAX_HD4: u32 = 64u;";

/// How many invocations of a head's workgroup split a decode step's cached keys in the
/// paged-cache attention kernels (`shaders/kv_pages.wgsl`'s `SLICES`): each scans every
/// `slices()`-th key with a softmax state of its own, then the states are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DecodeSlices {
    /// 16, the workgroup of a prefill chunk's 16 queries, merged one after another:
    /// a CPU adapter's rule (llvmpipe runs a workgroup's invocations in turn, and
    /// every barrier switches between them).
    Queries,
    /// 256, merged as trees (log2 256 rounds per value): a GPU's rule. GPT-2 has 12
    /// heads, so 16 invocations a head left an H100 with 192 invocations walking the
    /// whole cache (about 23 us per token of context a decode step).
    Wide,
}

impl DecodeSlices {
    /// The invocations a workgroup (a power of two).
    pub fn slices(self) -> u32 {
        match self {
            DecodeSlices::Queries => 16,
            DecodeSlices::Wide => 256,
        }
    }

    /// The rule: [`DecodeSlices::Queries`] on a CPU adapter, [`DecodeSlices::Wide`]
    /// elsewhere.
    pub fn rule(cpu_adapter: bool) -> DecodeSlices {
        if cpu_adapter {
            DecodeSlices::Queries
        } else {
            DecodeSlices::Wide
        }
    }
}

impl Default for Pick {
    /// The rule's tile, a layer norm by rows where [`norm_by_rows`] says so, and
    /// attention per query.
    fn default() -> Pick {
        Pick {
            tile: None,
            norm_rows: true,
            attention: None,
            decode: DecodeSlices::Queries,
        }
    }
}

impl From<Option<MatmulTile>> for Pick {
    /// `tile`, and the default for the rest.
    fn from(tile: Option<MatmulTile>) -> Pick {
        Pick {
            tile,
            ..Pick::default()
        }
    }
}

/// [`select`] with the device's choices (`pick`: the register tile of a tiled matmul,
/// ignored by every other kernel, and whether a layer norm may run by rows).
pub fn select_with(call: &OpCall, inplace: bool, pick: Pick) -> Option<(Kernel, &'static [usize])> {
    let tile = pick.tile;
    let tile_of = |m: u32, n: u32| tile.unwrap_or_else(|| MatmulTile::choose(m, n));
    // The matrix-vector kernels' own tile: the chosen one, or the unsplit one where a
    // matmul the tiled kernels cannot take falls back to them.
    let matvec_tile = |m: u32, n: u32| tile_of(m, n).in_matvec();
    Some(match (call, inplace) {
        (OpCall::Unary { .. }, false) => (Kernel::Unary, &[0, 1]),
        (OpCall::Unary { .. }, true) => (Kernel::UnaryInPlace, &[0]),
        (OpCall::Binary { .. }, false) => (Kernel::Binary, &[0, 1, 2]),
        (OpCall::Binary { .. }, true) => (Kernel::BinaryInPlace, &[0, 1]),
        (OpCall::Softmax { .. }, false) => (Kernel::Softmax, &[0, 1]),
        (OpCall::Softmax { .. }, true) => (Kernel::SoftmaxInPlace, &[0]),
        (&OpCall::LayerNorm { rows, cols, .. }, false)
            if pick.norm_rows && norm_by_rows(rows, cols) =>
        {
            (Kernel::LayerNormRows, &[0, 1, 3, 2])
        }
        (OpCall::LayerNorm { .. }, false) => (Kernel::LayerNorm, &[0, 1, 3, 2]),
        (OpCall::RmsNorm { .. }, false) => (Kernel::RmsNorm, &[0, 1, 2]),
        (
            &OpCall::Matmul {
                m,
                k,
                n,
                transposed_b,
            },
            false,
        ) if plain_matvec(m, k, n, transposed_b, tile_of(m, n)) => {
            (Kernel::Matvec(matvec_tile(m, n)), &[0, 1, 2])
        }
        (
            &OpCall::Matmul {
                m,
                k,
                n,
                transposed_b,
            },
            false,
        ) => match (transposed_b, tiled(k, n, transposed_b)) {
            (false, true) => (Kernel::MatmulTiled(tile_of(m, n)), &[0, 1, 2]),
            (true, true) => (Kernel::MatmulBtTiled(tile_of(m, n).in_bt()), &[0, 1, 2]),
            (false, false) => (Kernel::Matmul, &[0, 1, 2]),
            (true, false) => (Kernel::MatmulBt, &[0, 1, 2]),
        },
        (
            &OpCall::MatmulFused {
                m,
                n,
                epilogue,
                bias: true,
                ..
            },
            inplace,
        ) if matvec(tile_of(m, n), m) => match (epilogue, inplace) {
            (Epilogue::Plain | Epilogue::Gelu, false) => {
                (Kernel::MatvecBias(matvec_tile(m, n)), &[0, 1, 3, 2])
            }
            (Epilogue::Residual, true) => (Kernel::MatvecAccBias(matvec_tile(m, n)), &[1, 2, 0, 3]),
            (Epilogue::Residual, false) => {
                (Kernel::MatvecAccToBias(matvec_tile(m, n)), &[1, 2, 4, 0, 3])
            }
            (Epilogue::Plain | Epilogue::Gelu, true) => return None,
        },
        (
            &OpCall::MatmulFused {
                m,
                n,
                epilogue,
                bias: true,
                ..
            },
            inplace,
        ) => {
            let tile = tile_of(m, n);
            match (epilogue, inplace) {
                (Epilogue::Plain | Epilogue::Gelu, false) => {
                    (Kernel::MatmulTiledBias(tile), &[0, 1, 3, 2])
                }
                (Epilogue::Residual, true) => (Kernel::MatmulTiledAccBias(tile), &[1, 2, 0, 3]),
                (Epilogue::Residual, false) => {
                    (Kernel::MatmulTiledAccToBias(tile), &[1, 2, 4, 0, 3])
                }
                (Epilogue::Plain | Epilogue::Gelu, true) => return None,
            }
        }
        (&OpCall::MatmulFused { m, n, epilogue, .. }, inplace) if matvec(tile_of(m, n), m) => {
            match (epilogue, inplace) {
                (Epilogue::Gelu | Epilogue::Plain, false) => {
                    (Kernel::Matvec(matvec_tile(m, n)), &[0, 1, 2])
                }
                (Epilogue::Residual, true) => (Kernel::MatvecAcc(matvec_tile(m, n)), &[1, 2, 0]),
                (Epilogue::Residual, false) => {
                    (Kernel::MatvecAccTo(matvec_tile(m, n)), &[1, 2, 3, 0])
                }
                (Epilogue::Gelu | Epilogue::Plain, true) => return None,
            }
        }
        (&OpCall::MatmulFused { m, n, epilogue, .. }, inplace) => {
            let tile = tile_of(m, n);
            match (epilogue, inplace) {
                (Epilogue::Gelu, false) => (Kernel::MatmulTiled(tile), &[0, 1, 2]),
                (Epilogue::Residual, true) => (Kernel::MatmulTiledAcc(tile), &[1, 2, 0]),
                (Epilogue::Residual, false) => (Kernel::MatmulTiledAccTo(tile), &[1, 2, 3, 0]),
                (Epilogue::Gelu | Epilogue::Plain, true) => return None,
                (Epilogue::Plain, false) => (Kernel::MatmulTiled(tile), &[0, 1, 2]),
            }
        }
        (&OpCall::NormMatmul { m, n, .. }, false) if matvec(tile_of(m, n), m) => (
            Kernel::MatvecNormBias(matvec_tile(m, n)),
            &[0, 3, 5, 4, 1, 2],
        ),
        (&OpCall::NormMatmul { m, n, .. }, false) => (
            Kernel::MatmulNormBias(tile_of(m, n).in_norm()),
            &[0, 3, 5, 4, 1, 2],
        ),
        (&OpCall::Attention { head_dim, .. }, false) => {
            let head = HeadWidth::of(head_dim);
            let kernel = match AttentionForm::picked(pick, head_dim) {
                AttentionForm::PerQuery => Kernel::Attention(head),
                AttentionForm::KeyTiles => Kernel::AttentionTiled(head),
                AttentionForm::QueryBlocks => Kernel::AttentionBlocks(head),
                AttentionForm::QueryBlocksShared => Kernel::AttentionBlocksShared(head),
            };
            (kernel, &[0, 1])
        }
        (
            &OpCall::KvSelfAttend {
                n,
                head_dim,
                normalize,
                ..
            },
            false,
        ) => (
            if normalize {
                Kernel::KvSelfAttendOut(pick.slices_for(n), HeadWidth::of(head_dim))
            } else {
                Kernel::KvSelfAttend(pick.slices_for(n), HeadWidth::of(head_dim))
            },
            &[0, 1, 2, 3],
        ),
        (&OpCall::KvSelf { head_dim, .. }, false) => {
            (Kernel::KvSelf(HeadWidth::of(head_dim)), &[0, 1])
        }
        (
            &OpCall::KvAttend {
                n,
                head_dim,
                normalize: false,
                ..
            },
            true,
        ) => (
            Kernel::KvAttendInPlace(pick.slices_for(n), HeadWidth::of(head_dim)),
            &[0, 1, 2, 3],
        ),
        (
            &OpCall::KvAttend {
                n,
                head_dim,
                normalize,
                ..
            },
            false,
        ) => (
            if normalize {
                Kernel::KvAttendOut(pick.slices_for(n), HeadWidth::of(head_dim))
            } else {
                Kernel::KvAttend(pick.slices_for(n), HeadWidth::of(head_dim))
            },
            &[0, 1, 2, 3, 4],
        ),
        (OpCall::Embedding { .. }, false) => (Kernel::Embedding, &[0, 1, 2]),
        (OpCall::Rope { .. }, false) => (Kernel::Rope, &[0, 1]),
        (OpCall::Rope { .. }, true) => (Kernel::RopeInPlace, &[0]),
        (OpCall::CountPositive { .. }, false) => (Kernel::CountPositive, &[0, 1]),
        (OpCall::Compact { .. }, false) => (Kernel::Compact, &[0, 1, 2]),
        (OpCall::MatmulPacked { .. }, false) => (Kernel::MatmulPacked, &[0, 1, 2]),
        _ => return None,
    })
}

/// Whether the fused forms of `matmul` (and the layer norm in its prologue) run the
/// matrix-vector kernels ([`Kernel::Matvec`]) with `tile` for `m` rows.
fn matvec(tile: MatmulTile, m: u32) -> bool {
    tile.is_matvec() && tile.fits(m)
}

/// Whether a plain `matmul` runs [`Kernel::Matvec`]: `n` a multiple of 4, and either a
/// matrix-vector tile that fits `m` rows ([`MatmulTile::fits`]) or at most
/// [`MATVEC_MAX_ROWS`] rows and a `k` the tiled kernels cannot take (the
/// matrix-vector kernel takes any `k`).
fn plain_matvec(m: u32, k: u32, n: u32, transposed_b: bool, tile: MatmulTile) -> bool {
    !transposed_b
        && n.is_multiple_of(4)
        && (matvec(tile, m) || (m <= MATVEC_MAX_ROWS && !tiled(k, n, false)))
}

/// The grid of the matrix-vector kernels with `tile`: a workgroup per
/// [`MatmulTile::matvec_columns`] columns and per row.
fn matvec_grid(
    tile: MatmulTile,
    m: u32,
    n: u32,
    node: u32,
    max_per_dimension: u32,
) -> Result<[u32; 3], ExecError> {
    let gx = u64::from(n).div_ceil(u64::from(tile.matvec_columns()));
    grid_2d(gx, u64::from(m), node, max_per_dimension)
}

/// Whether a `matmul` (or `matmul_bt`) of these dimensions runs on the tiled kernels:
/// their vector loads need `k` (and, for `matmul`, `n`) to be multiples of 4.
pub fn tiled(k: u32, n: u32, transposed_b: bool) -> bool {
    k.is_multiple_of(4) && (transposed_b || n.is_multiple_of(4))
}

/// Whether a layer norm runs one invocation per row ([`Kernel::LayerNormRows`]): for
/// enough rows to fill [`NORM_ROWS_PER_GROUP`]-row workgroups and rows short enough for
/// one invocation to walk.
pub fn norm_by_rows(rows: u32, cols: u32) -> bool {
    u64::from(rows) >= 4 * NORM_ROWS_PER_GROUP && cols <= 4096
}

/// Rows per workgroup of [`Kernel::LayerNormRows`].
pub const NORM_ROWS_PER_GROUP: u64 = 16;

/// How a layer norm runs: a choice per device, timed by the tuner
/// ([`crate::exec::tune`]) where both forms take the shape. Both
/// compute each row's mean and variance in f32; they sum in another order, so their
/// results differ by rounding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NormForm {
    /// [`Kernel::LayerNormRows`]: one invocation walks a row, 16 rows a workgroup. No
    /// barrier; right on a CPU adapter (lavapipe), where a workgroup's barriers switch
    /// between its invocations.
    InvocationPerRow,
    /// [`Kernel::LayerNorm`]: 256 invocations share a row, adding their sums in
    /// workgroup memory. Reads coalesce on a GPU (an NVIDIA H200: 0.087 ms for
    /// 256 x 512, against 0.25 ms by rows). Takes any shape.
    WorkgroupPerRow,
}

impl NormForm {
    /// Every form, in the order the tuner times them.
    pub const ALL: [NormForm; 2] = [NormForm::InvocationPerRow, NormForm::WorkgroupPerRow];

    /// Whether the form takes `rows` rows of `cols` (a row per invocation: at least 64
    /// rows of at most 4096; a workgroup per row: any shape).
    pub fn fits(self, rows: u32, cols: u32) -> bool {
        match self {
            NormForm::InvocationPerRow => norm_by_rows(rows, cols),
            NormForm::WorkgroupPerRow => true,
        }
    }

    /// The rule's form, by adapter type: a row per invocation on a CPU adapter where
    /// the shape allows it, else a workgroup per row.
    pub fn rule(cpu_adapter: bool, rows: u32, cols: u32) -> NormForm {
        if cpu_adapter && NormForm::InvocationPerRow.fits(rows, cols) {
            NormForm::InvocationPerRow
        } else {
            NormForm::WorkgroupPerRow
        }
    }

    /// The form's name in the tuning cache (`norm-rows`, `norm-workgroup`).
    pub fn name(self) -> &'static str {
        match self {
            NormForm::InvocationPerRow => "norm-rows",
            NormForm::WorkgroupPerRow => "norm-workgroup",
        }
    }

    /// The form named `name` ([`NormForm::name`]), if any.
    pub fn from_name(name: &str) -> Option<NormForm> {
        NormForm::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Threads per workgroup of the 1-D kernels (elementwise, rows).
pub const WORKGROUP_THREADS: u64 = 256;
/// Rows and columns of the output block one matmul workgroup computes.
pub const MATMUL_BLOCK: u64 = 64;

/// Spreads `groups` workgroups over x and y so that neither exceeds `max` (kernels
/// index `wid.y * num_workgroups.x + wid.x`).
fn spread(groups: u64, max: u32) -> Option<[u32; 3]> {
    let max = u64::from(max.max(1));
    let x = groups.clamp(1, max);
    let y = groups.div_ceil(x).max(1);
    if y > max {
        return None;
    }
    Some([u32::try_from(x).ok()?, u32::try_from(y).ok()?, 1])
}

/// The grid of an elementwise kernel over `len` elements (one thread each).
fn elementwise(len: u64, node: u32, max_per_dimension: u32) -> Result<[u32; 3], ExecError> {
    let groups = len.div_ceil(WORKGROUP_THREADS);
    spread(groups, max_per_dimension).ok_or(ExecError::TooManyWorkgroups {
        node: NodeId(node),
        groups,
        max: max_per_dimension,
    })
}

/// The grid of [`Kernel::CopyWords`] over `words` 32-bit words.
///
/// # Errors
/// [`ExecError::TooManyWorkgroups`] when the grid exceeds `max_per_dimension` even in 2-D.
pub fn copy_workgroups(
    words: u64,
    node: u32,
    max_per_dimension: u32,
) -> Result<[u32; 3], ExecError> {
    elementwise(words, node, max_per_dimension)
}

/// The workgroup grid of a call, with the rule's tile (tests; the executor calls
/// [`workgroups_with`] with the tuner's).
///
/// # Errors
/// [`ExecError::TooManyWorkgroups`] when the grid exceeds `max_per_dimension` even in 2-D.
#[cfg(test)]
pub fn workgroups(call: &OpCall, node: u32, max_per_dimension: u32) -> Result<[u32; 3], ExecError> {
    workgroups_with(call, node, max_per_dimension, Pick::default())
}

/// The workgroup grid of a call, with the device's choices as [`select_with`] takes
/// them.
///
/// # Errors
/// [`ExecError::TooManyWorkgroups`] when the grid exceeds `max_per_dimension` even in 2-D.
pub fn workgroups_with(
    call: &OpCall,
    node: u32,
    max_per_dimension: u32,
    pick: Pick,
) -> Result<[u32; 3], ExecError> {
    let tile = pick.tile;
    let tile_of = |m: u32, n: u32| tile.unwrap_or_else(|| MatmulTile::choose(m, n));
    let threads = |n: u64| n.div_ceil(WORKGROUP_THREADS);
    let groups = match *call {
        OpCall::Unary { len, .. } | OpCall::Binary { len, .. } => threads(u64::from(len)),
        OpCall::Embedding { rows, dim, .. } => threads(u64::from(rows) * u64::from(dim)),
        OpCall::Rope { rows, dim, .. } => threads(u64::from(rows) * u64::from(dim / 2)),
        OpCall::LayerNorm { rows, cols, .. } if pick.norm_rows && norm_by_rows(rows, cols) => {
            u64::from(rows).div_ceil(NORM_ROWS_PER_GROUP)
        }
        OpCall::Softmax { rows, .. }
        | OpCall::LayerNorm { rows, .. }
        | OpCall::RmsNorm { rows, .. } => u64::from(rows),
        // One workgroup walks the whole input (an order-keeping prefix sum).
        OpCall::CountPositive { .. } | OpCall::Compact { .. } => 1,
        OpCall::Attention {
            seq,
            heads,
            head_dim,
            ..
        } => {
            let per_group = AttentionForm::picked(pick, head_dim).queries_per_workgroup();
            let gx = u64::from(seq).div_ceil(per_group);
            return grid_2d(gx, u64::from(heads), node, max_per_dimension);
        }
        OpCall::KvSelf { n, heads, .. }
        | OpCall::KvAttend { n, heads, .. }
        | OpCall::KvSelfAttend { n, heads, .. } => {
            let gx = u64::from(n).div_ceil(ATTENTION_QUERIES);
            return grid_2d(gx, u64::from(heads), node, max_per_dimension);
        }
        OpCall::Matmul {
            m,
            k,
            n,
            transposed_b,
        } if plain_matvec(m, k, n, transposed_b, tile_of(m, n)) => {
            return matvec_grid(tile_of(m, n).in_matvec(), m, n, node, max_per_dimension);
        }
        OpCall::MatmulFused { m, n, .. } | OpCall::NormMatmul { m, n, .. }
            if matvec(tile_of(m, n), m) =>
        {
            return matvec_grid(tile_of(m, n), m, n, node, max_per_dimension);
        }
        OpCall::MatmulFused { m, n, .. } | OpCall::NormMatmul { m, n, .. } => {
            let tile = match call {
                OpCall::NormMatmul { .. } => tile_of(m, n).in_norm(),
                _ => tile_of(m, n),
            };
            let gx = u64::from(n).div_ceil(u64::from(tile.columns()));
            let gy = u64::from(m).div_ceil(u64::from(tile.workgroup_rows()));
            return grid_2d(gx, gy, node, max_per_dimension);
        }
        OpCall::Matmul {
            m,
            k,
            n,
            transposed_b,
        } if tiled(k, n, transposed_b) => {
            let tile = match transposed_b {
                true => tile_of(m, n).in_bt(),
                false => tile_of(m, n),
            };
            let gx = u64::from(n).div_ceil(u64::from(tile.columns()));
            let gy = u64::from(m).div_ceil(u64::from(tile.workgroup_rows()));
            return grid_2d(gx, gy, node, max_per_dimension);
        }
        OpCall::Matmul { m, n, .. } | OpCall::MatmulPacked { m, n, .. } => {
            let gx = u64::from(n).div_ceil(MATMUL_BLOCK);
            let gy = u64::from(m).div_ceil(MATMUL_BLOCK);
            let worst = gx.max(gy);
            if worst > u64::from(max_per_dimension) {
                return Err(ExecError::TooManyWorkgroups {
                    node: NodeId(node),
                    groups: worst,
                    max: max_per_dimension,
                });
            }
            // Both fit in u32: each is at most max_per_dimension.
            return Ok([gx as u32, gy as u32, 1]);
        }
    };
    spread(groups, max_per_dimension).ok_or(ExecError::TooManyWorkgroups {
        node: NodeId(node),
        groups,
        max: max_per_dimension,
    })
}

/// A 2-D grid of `gx x gy` workgroups, or [`ExecError::TooManyWorkgroups`].
fn grid_2d(gx: u64, gy: u64, node: u32, max_per_dimension: u32) -> Result<[u32; 3], ExecError> {
    let worst = gx.max(gy);
    match (u32::try_from(gx), u32::try_from(gy)) {
        (Ok(x), Ok(y)) if worst <= u64::from(max_per_dimension) => Ok([x.max(1), y.max(1), 1]),
        _ => Err(ExecError::TooManyWorkgroups {
            node: NodeId(node),
            groups: worst,
            max: max_per_dimension,
        }),
    }
}

/// The kernel registry of one device, shared by every executor on it (and so by every
/// runner: model sessions, graph contexts, streams, the pre-packed model): each
/// pipeline is compiled once per device ([`crate::device::DeviceShared`]).
#[derive(Debug, Default)]
pub(crate) struct SharedRegistry(std::sync::Mutex<KernelRegistry>);

impl SharedRegistry {
    /// The registry of `ctx`'s device.
    pub(crate) fn of(ctx: &crate::device::GpuContext) -> std::sync::Arc<SharedRegistry> {
        ctx.shared.get_or_init(SharedRegistry::default)
    }

    /// Runs `f` with the registry locked.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut KernelRegistry) -> T) -> T {
        let mut registry = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut registry)
    }
}

/// Pipelines, shader modules and bind-group layouts, each built once on first use.
#[derive(Debug, Default)]
pub(crate) struct KernelRegistry {
    /// Keyed by the head width too: the attention kernels' sources are sized per width.
    modules: HashMap<(Shader, StorageType, Option<HeadWidth>), wgpu::ShaderModule>,
    layouts: HashMap<usize, wgpu::BindGroupLayout>,
    pipelines: HashMap<(Kernel, StorageType), wgpu::ComputePipeline>,
}

impl KernelRegistry {
    /// Pipelines built so far.
    pub fn pipelines_built(&self) -> usize {
        self.pipelines.len()
    }

    /// The bind-group layout for `storage` storage bindings after the uniform (built
    /// on first use).
    pub fn layout(&mut self, device: &wgpu::Device, storage: usize) -> wgpu::BindGroupLayout {
        self.layouts
            .entry(storage)
            .or_insert_with(|| {
                let mut entries = vec![wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: true,
                        min_binding_size: wgpu::BufferSize::new(super::params::PARAMS_SIZE),
                    },
                    count: None,
                }];
                for i in 1..=storage {
                    entries.push(wgpu::BindGroupLayoutEntry {
                        binding: i as u32,
                        visibility: wgpu::ShaderStages::COMPUTE,
                        ty: wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Storage { read_only: false },
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                        count: None,
                    });
                }
                device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("wgalloc kernel"),
                    entries: &entries,
                })
            })
            .clone()
    }

    /// The pipeline of `kernel` for tensors stored as `storage` (built on first use).
    ///
    /// # Errors
    /// [`ExecError::NoF16Kernel`] when the kernel has no f16 form,
    /// [`ExecError::ShaderF16Missing`] when f16 is asked of a device without
    /// `shader-f16`, [`ExecError::Device`] when wgpu rejects the shader or the pipeline.
    pub fn pipeline_for(
        &mut self,
        device: &wgpu::Device,
        kernel: Kernel,
        storage: StorageType,
    ) -> Result<wgpu::ComputePipeline, ExecError> {
        if let Some(p) = self.pipelines.get(&(kernel, storage)) {
            return Ok(p.clone());
        }
        let (shader, entry) = kernel.entry();
        let source = kernel.source_for(storage).ok_or(ExecError::NoF16Kernel {
            shader: shader.file(),
        })?;
        if storage == StorageType::F16 && !device.features().contains(wgpu::Features::SHADER_F16) {
            return Err(ExecError::ShaderF16Missing);
        }
        if shader.needs_subgroups() && !device.features().contains(wgpu::Features::SUBGROUP) {
            return Err(ExecError::Device(DeviceError::Internal {
                message: format!("{kernel:?} needs subgroup operations, which this device lacks"),
            }));
        }
        let constants = kernel.constants();
        let layout = self.layout(device, kernel.storage_bindings());
        let modules = &mut self.modules;
        let built = scoped(device, 0, || {
            let module = modules
                .entry((shader, storage, kernel.head_width()))
                .or_insert_with(|| {
                    device.create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some(shader.file()),
                        source: wgpu::ShaderSource::Wgsl(source),
                    })
                })
                .clone();
            compute_pipeline(device, &module, entry, &layout, &constants)
        });
        let pipeline = match built {
            Ok(pipeline) => pipeline,
            Err(error) => {
                self.modules.remove(&(shader, storage, kernel.head_width()));
                return Err(ExecError::Device(match error {
                    DeviceError::Validation { message } => DeviceError::Validation {
                        message: format!(
                            "{}::{entry} ({}): {message}",
                            shader.file(),
                            storage.name()
                        ),
                    },
                    other => other,
                }));
            }
        };
        self.pipelines.insert((kernel, storage), pipeline.clone());
        Ok(pipeline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::ops::UnaryOp;

    #[test]
    fn every_shader_passes_naga_validation_and_has_its_entry_points() {
        for shader in Shader::ALL {
            let module = naga::front::wgsl::parse_str(shader.source()).unwrap_or_else(|e| {
                panic!("{}: {}", shader.file(), e.emit_to_string(shader.source()))
            });
            // The shared-read products need the subgroup capability, nothing else does.
            let capabilities = if shader.needs_subgroups() {
                naga::valid::Capabilities::SUBGROUP
            } else {
                naga::valid::Capabilities::empty()
            };
            naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities)
                .validate(&module)
                .unwrap_or_else(|e| panic!("{}: {e:?}", shader.file()));
            for kernel in Kernel::ALL.iter().filter(|k| k.entry().0 == shader) {
                let name = kernel.entry().1;
                assert!(
                    module.entry_points.iter().any(|e| e.name == name),
                    "{} lacks {name}",
                    shader.file()
                );
            }
        }
    }

    /// Every kernel the ops with f16 storage ([`crate::exec::Op::has_f16`]) select, in
    /// place or not, has an f16 form; the ops without one select shaders without it.
    #[test]
    fn every_kernel_an_f16_op_selects_has_an_f16_form() {
        use crate::exec::ops::{BinaryOp, Op};
        let matmul = |m, k, n, transposed_b| OpCall::Matmul {
            m,
            k,
            n,
            transposed_b,
        };
        let mut calls = vec![
            (
                "gelu",
                OpCall::Unary {
                    op: UnaryOp::Gelu,
                    len: 4,
                    alpha: 1.0,
                },
            ),
            (
                "add",
                OpCall::Binary {
                    op: BinaryOp::Add,
                    len: 4,
                    len_b: 4,
                },
            ),
            (
                "softmax",
                OpCall::Softmax {
                    rows: 2,
                    cols: 4,
                    causal_period: None,
                },
            ),
            (
                "layer_norm",
                OpCall::LayerNorm {
                    rows: 2,
                    cols: 4,
                    eps: 1e-5,
                },
            ),
            (
                "layer_norm",
                OpCall::LayerNorm {
                    rows: 256,
                    cols: 4,
                    eps: 1e-5,
                },
            ),
            (
                "rms_norm",
                OpCall::RmsNorm {
                    rows: 2,
                    cols: 4,
                    eps: 1e-5,
                },
            ),
            ("matmul", matmul(8, 8, 8, false)),
            ("matmul_bt", matmul(8, 8, 8, true)),
            ("matmul", matmul(3, 3, 3, false)),
            ("matmul_bt", matmul(3, 3, 3, true)),
            (
                "embedding",
                OpCall::Embedding {
                    rows: 2,
                    dim: 4,
                    vocab: 8,
                },
            ),
            (
                "attention_causal",
                OpCall::Attention {
                    seq: 4,
                    heads: 1,
                    head_dim: 4,
                    scale: 0.5,
                },
            ),
        ];
        for (name, epilogue, bias) in [
            ("matmul_gelu", Epilogue::Gelu, false),
            ("matmul_add", Epilogue::Residual, false),
            ("matmul_bias", Epilogue::Plain, true),
            ("matmul_bias_gelu", Epilogue::Gelu, true),
            ("matmul_add_bias", Epilogue::Residual, true),
        ] {
            let call = OpCall::MatmulFused {
                m: 8,
                k: 8,
                n: 8,
                epilogue,
                bias,
            };
            calls.push((name, call));
        }
        // The generation step's ops: the norm-fused matmul and the paged KV cache's.
        for (name, gelu) in [
            ("layer_norm_matmul_bias", false),
            ("layer_norm_matmul_bias_gelu", true),
        ] {
            let call = OpCall::NormMatmul {
                m: 8,
                k: 8,
                n: 8,
                gelu,
                eps: 1e-5,
            };
            calls.push((name, call));
        }
        calls.push((
            "kv_self",
            OpCall::KvSelf {
                n: 2,
                heads: 1,
                head_dim: 4,
                scale: 0.5,
            },
        ));
        for (name, normalize) in [("kv_attend", false), ("kv_attend_out", true)] {
            let call = OpCall::KvAttend {
                n: 2,
                heads: 1,
                head_dim: 4,
                layer: 0,
                page: 0,
                scale: 0.5,
                normalize,
            };
            calls.push((name, call));
        }
        for (name, normalize) in [("kv_self_attend", false), ("kv_self_attend_out", true)] {
            let call = OpCall::KvSelfAttend {
                n: 2,
                heads: 1,
                head_dim: 4,
                layer: 0,
                page: 0,
                scale: 0.5,
                normalize,
            };
            calls.push((name, call));
        }
        for (name, call) in calls {
            assert!(Op::parse(name).is_some_and(Op::has_f16), "{name}");
            for inplace in [false, true] {
                if let Some((kernel, _)) = select(&call, inplace) {
                    assert!(kernel.entry().0.has_f16(), "{name}: {kernel:?}");
                }
            }
        }
        let rope = OpCall::Rope {
            rows: 2,
            dim: 4,
            base: 10000.0,
        };
        for inplace in [false, true] {
            let (kernel, _) = select(&rope, inplace).expect("rope");
            assert!(kernel.entry().0.has_f16(), "rope: {kernel:?}");
        }
        assert!(Op::parse("rope").is_some_and(Op::has_f16));
        let compaction = [
            ("compact", OpCall::Compact { len: 4, out_len: 4 }),
            ("count_positive", OpCall::CountPositive { len: 4 }),
        ];
        for (name, call) in compaction {
            let (kernel, _) = select(&call, false).expect("compaction");
            assert!(kernel.entry().0.has_f16(), "{name}");
            assert!(Op::parse(name).is_some_and(Op::has_f16), "{name}");
        }
        let packed = OpCall::MatmulPacked { m: 1, k: 4, n: 4 };
        let (kernel, _) = select(&packed, false).expect("packed");
        assert!(kernel.entry().0.has_f16());
        assert!(Op::parse("matmul_packed").is_some_and(Op::has_f16));
        // Only the staging copy has no f16 form (it copies words, whatever they hold).
        let without: Vec<Shader> = Shader::ALL.into_iter().filter(|s| !s.has_f16()).collect();
        assert_eq!(without, [Shader::Copy]);
    }

    /// Every tile fits the arrays its shaders size: the accumulators (`MAX_ROWS`, 32 in
    /// the shared-read block files, 8 in the others) and the norm-fused matmul's
    /// partial sums (`ROWS * LANES` of 512 floats in `matmul_norm.wgsl`).
    #[test]
    fn every_tile_fits_its_shaders_arrays() {
        let source = |shader: Shader| shader.source_for(StorageType::F32).expect("f32 form");
        for tile in MatmulTile::ALL {
            let (shader, max_rows) = if tile.shares_a() {
                (Shader::MatmulTiledShared, 32)
            } else {
                (Shader::MatmulTiled, 8)
            };
            assert!(
                source(shader).contains(&format!("const MAX_ROWS: u32 = {max_rows}u;")),
                "{shader:?}"
            );
            assert!(tile.rows() <= max_rows, "{tile:?}");
            let norm = tile.in_norm();
            assert!(norm.rows() * norm.lanes() <= 512, "{tile:?}");
        }
        assert!(source(Shader::MatmulNorm).contains("var<workgroup> partial: array<f32, 512>;"));
    }

    /// On a CPU adapter with subgroups the rule takes the tallest shared tile the rows
    /// fill, the matrix-vector tile for one row; every tile it takes shares A's reads
    /// or is the matrix-vector one, and none is taller than the rows from 8 up.
    #[test]
    fn the_shared_rule_takes_the_tallest_shared_tile_the_rows_fill() {
        let expected = [
            (1, MatmulTile::Rows1),
            (2, MatmulTile::Rows4Shared),
            (4, MatmulTile::Rows4Shared),
            (5, MatmulTile::Rows8Shared),
            (15, MatmulTile::Rows8Shared),
            (16, MatmulTile::Rows16Shared),
            (31, MatmulTile::Rows16Shared),
            (32, MatmulTile::Rows32Shared),
            (4096, MatmulTile::Rows32Shared),
        ];
        for (m, tile) in expected {
            assert_eq!(MatmulTile::choose_shared(m), tile, "{m} rows");
        }
        for m in 1..200 {
            let tile = MatmulTile::choose_shared(m);
            assert!(tile.fits(m), "{m}");
            assert!(tile.shares_a() || tile == MatmulTile::Rows1, "{m}");
            assert!(tile.rows() <= m.max(8), "{m}");
        }
    }

    /// One row takes the matrix-vector kernels (`matvec.wgsl`, f16 form included) by
    /// the rule, every fused form the decoder dispatches among them; an odd `k` of up
    /// to four rows too; an odd `n` or five rows do not.
    #[test]
    fn one_row_selects_the_matrix_vector_kernels() {
        assert_eq!(MatmulTile::choose(1, 50257), MatmulTile::Rows1);
        assert_ne!(MatmulTile::choose(2, 64), MatmulTile::Rows1);
        assert!(MatmulTile::Rows1.fits(MATVEC_MAX_ROWS));
        assert!(!MatmulTile::Rows1.fits(MATVEC_MAX_ROWS + 1));
        let matmul = |m, k, n, transposed_b| OpCall::Matmul {
            m,
            k,
            n,
            transposed_b,
        };
        let fused = |epilogue, bias| OpCall::MatmulFused {
            m: 1,
            k: 768,
            n: 2304,
            epilogue,
            bias,
        };
        for (call, inplace, want) in [
            (
                matmul(1, 768, 3072, false),
                false,
                Kernel::Matvec(MatmulTile::Rows1),
            ),
            (
                matmul(1, 7, 12, false),
                false,
                Kernel::Matvec(MatmulTile::Rows1),
            ),
            (
                matmul(4, 9, 8, false),
                false,
                Kernel::Matvec(MatmulTile::Rows1),
            ),
            (matmul(1, 8, 13, false), false, Kernel::Matmul),
            (matmul(5, 9, 8, false), false, Kernel::Matmul),
            (matmul(1, 9, 5, true), false, Kernel::MatmulBt),
            (
                matmul(1, 768, 50257, true),
                false,
                Kernel::MatmulBtTiled(MatmulTile::Rows1),
            ),
            (
                fused(Epilogue::Gelu, false),
                false,
                Kernel::Matvec(MatmulTile::Rows1),
            ),
            (
                fused(Epilogue::Residual, false),
                true,
                Kernel::MatvecAcc(MatmulTile::Rows1),
            ),
            (
                fused(Epilogue::Residual, false),
                false,
                Kernel::MatvecAccTo(MatmulTile::Rows1),
            ),
            (
                fused(Epilogue::Gelu, true),
                false,
                Kernel::MatvecBias(MatmulTile::Rows1),
            ),
            (
                fused(Epilogue::Residual, true),
                true,
                Kernel::MatvecAccBias(MatmulTile::Rows1),
            ),
            (
                fused(Epilogue::Residual, true),
                false,
                Kernel::MatvecAccToBias(MatmulTile::Rows1),
            ),
        ] {
            let (kernel, order) = select(&call, inplace).expect("selects");
            assert_eq!(kernel, want, "{call:?}");
            assert_eq!(order.len(), kernel.storage_bindings(), "{call:?}");
            assert!(kernel.entry().0.has_f16(), "{kernel:?}");
        }
        let norm = OpCall::NormMatmul {
            m: 1,
            k: 768,
            n: 3072,
            gelu: true,
            eps: 1e-5,
        };
        assert_eq!(
            select(&norm, false).map(|(k, _)| k),
            Some(Kernel::MatvecNormBias(MatmulTile::Rows1))
        );
        // The split tile: the matrix-vector kernels split over k, and `matmul_bt`
        // (no split form) unsplit.
        let split = Some(MatmulTile::Rows1Split);
        assert_eq!(
            select_with(&matmul(1, 768, 3072, false), false, split.into()).map(|(k, _)| k),
            Some(Kernel::Matvec(MatmulTile::Rows1Split))
        );
        assert_eq!(
            select_with(&matmul(1, 768, 50257, true), false, split.into()).map(|(k, _)| k),
            Some(Kernel::MatmulBtTiled(MatmulTile::Rows1))
        );
        assert_eq!(
            Kernel::Matvec(MatmulTile::Rows1Split).constants(),
            vec![("LANES", 16.0), ("SPLIT", 16.0)]
        );
        // The narrow split tiles take up to SPLIT_MAX_ROWS rows (every fused form and
        // the norm's), the 16-slice split and the unsplit tile four; past them the
        // tiled kernels run.
        for tile in [MatmulTile::Rows1Split64, MatmulTile::Rows1Split256] {
            let pick = Some(tile).into();
            for m in [5, 16, SPLIT_MAX_ROWS] {
                assert!(tile.fits(m), "{tile:?} {m}");
                assert_eq!(
                    select_with(&matmul(m, 768, 768, false), false, pick).map(|(k, _)| k),
                    Some(Kernel::Matvec(tile))
                );
                let fused = OpCall::MatmulFused {
                    m,
                    k: 768,
                    n: 768,
                    epilogue: Epilogue::Residual,
                    bias: true,
                };
                assert_eq!(
                    select_with(&fused, true, pick).map(|(k, _)| k),
                    Some(Kernel::MatvecAccBias(tile))
                );
                let norm = OpCall::NormMatmul {
                    m,
                    k: 768,
                    n: 3072,
                    gelu: true,
                    eps: 1e-5,
                };
                assert_eq!(
                    select_with(&norm, false, pick).map(|(k, _)| k),
                    Some(Kernel::MatvecNormBias(tile))
                );
                // A workgroup per row (and per 64 or 16 columns).
                assert_eq!(
                    workgroups_with(&matmul(m, 768, 768, false), 0, 65535, pick).map(|g| g[1]),
                    Ok(m)
                );
            }
            assert!(!tile.fits(SPLIT_MAX_ROWS + 1));
        }
        assert!(MatmulTile::Rows1Split.fits(MATVEC_MAX_ROWS));
        assert!(!MatmulTile::Rows1Split.fits(MATVEC_MAX_ROWS + 1));
        // A workgroup per 256 columns and per row.
        assert_eq!(
            workgroups(&matmul(1, 7, 260, false), 0, 65535),
            Ok([2, 1, 1])
        );
        assert_eq!(
            workgroups(&matmul(3, 9, 64, false), 0, 65535),
            Ok([1, 3, 1])
        );
        assert_eq!(
            workgroups(&fused(Epilogue::Plain, true), 0, 65535),
            Ok([9, 1, 1])
        );
        // The transposed kernel with one row: 64 columns per workgroup.
        assert_eq!(
            workgroups(&matmul(1, 8, 130, true), 0, 65535),
            Ok([3, 1, 1])
        );
        // Given another tile, one row runs the tiled kernels.
        let (kernel, _) = select_with(
            &fused(Epilogue::Plain, true),
            false,
            Some(MatmulTile::Rows4).into(),
        )
        .expect("");
        assert_eq!(kernel, Kernel::MatmulTiledBias(MatmulTile::Rows4));
    }

    #[test]
    fn a_gpu_runs_a_layer_norm_of_many_rows_with_a_workgroup_per_row() {
        let call = OpCall::LayerNorm {
            rows: 256,
            cols: 512,
            eps: 1e-5,
        };
        // The rule (a CPU adapter): one invocation per row.
        assert_eq!(
            select(&call, false).map(|(k, _)| k),
            Some(Kernel::LayerNormRows)
        );
        assert_eq!(
            workgroups(&call, 0, 65535),
            Ok([(256 / NORM_ROWS_PER_GROUP) as u32, 1, 1])
        );
        // A GPU: a 256-invocation workgroup per row.
        let gpu = Pick {
            norm_rows: false,
            ..Pick::default()
        };
        assert_eq!(
            select_with(&call, false, gpu).map(|(k, _)| k),
            Some(Kernel::LayerNorm)
        );
        assert_eq!(workgroups_with(&call, 0, 65535, gpu), Ok([256, 1, 1]));
    }

    #[test]
    fn large_elementwise_grids_spill_into_the_second_dimension() {
        let call = OpCall::Unary {
            op: UnaryOp::Relu,
            len: 100_000_000,
            alpha: 1.0,
        };
        let [x, y, z] = workgroups(&call, 0, 65535).expect("fits in 2-D");
        assert_eq!((x, z), (65535, 1));
        assert!(u64::from(x) * u64::from(y) * 256 >= 100_000_000);
        let small = OpCall::Unary {
            op: UnaryOp::Relu,
            len: 7,
            alpha: 1.0,
        };
        assert_eq!(workgroups(&small, 0, 65535), Ok([1, 1, 1]));
    }

    #[test]
    fn a_matmul_wider_than_the_grid_limit_is_refused() {
        // The dense kernel (64 columns a workgroup, five rows) and the matrix-vector
        // kernel (256 columns a workgroup, one row).
        for (m, n) in [(5, 64 * 70_000), (1, 256 * 70_000)] {
            let call = OpCall::Matmul {
                m,
                k: 1,
                n,
                transposed_b: false,
            };
            assert!(matches!(
                workgroups(&call, 3, 65535),
                Err(ExecError::TooManyWorkgroups {
                    node: NodeId(3),
                    ..
                })
            ));
        }
    }

    #[test]
    fn in_place_kernels_bind_one_range_less() {
        for kernel in Kernel::ALL {
            let (shader, entry) = kernel.entry();
            assert!(shader.source().contains(&format!("fn {entry}(")));
        }
        let call = OpCall::Unary {
            op: UnaryOp::Gelu,
            len: 4,
            alpha: 1.0,
        };
        let (k, order) = select(&call, true).expect("gelu runs in place");
        assert_eq!(
            (k, order.len()),
            (Kernel::UnaryInPlace, k.storage_bindings())
        );
        let norm = OpCall::LayerNorm {
            rows: 1,
            cols: 4,
            eps: 1e-5,
        };
        assert!(select(&norm, true).is_none());
        let (k, order) = select(&norm, false).expect("out of place");
        assert_eq!(order.len(), k.storage_bindings());
    }

    #[test]
    fn every_attention_kernel_is_built_for_its_head_width() {
        for head_dim in [4, 64, 128, 256] {
            let want = ("HD4", f64::from(head_dim / 4));
            let mut calls = vec![
                OpCall::Attention {
                    seq: 9,
                    heads: 2,
                    head_dim,
                    scale: 1.0,
                },
                OpCall::KvSelf {
                    n: 2,
                    heads: 2,
                    head_dim,
                    scale: 1.0,
                },
            ];
            for normalize in [false, true] {
                calls.push(OpCall::KvAttend {
                    n: 1,
                    heads: 2,
                    head_dim,
                    layer: 0,
                    page: 0,
                    scale: 1.0,
                    normalize,
                });
                calls.push(OpCall::KvSelfAttend {
                    n: 3,
                    heads: 2,
                    head_dim,
                    layer: 0,
                    page: 0,
                    scale: 1.0,
                    normalize,
                });
            }
            let forms = AttentionForm::ALL.map(|form| Pick {
                attention: Some(form),
                decode: DecodeSlices::Wide,
                ..Pick::default()
            });
            for call in &calls {
                for pick in forms {
                    for inplace in [false, true] {
                        let Some((kernel, _)) = select_with(call, inplace, pick) else {
                            continue;
                        };
                        let constants = kernel.constants();
                        assert!(constants.contains(&want), "{kernel:?}: {constants:?}");
                        // The shader reads the width from the constant it is built with.
                        assert!(kernel.entry().0.source().contains("override HD4"));
                    }
                }
            }
        }
        // Two widths are two pipelines (the device's cache is keyed by the kernel).
        assert_ne!(
            Kernel::Attention(HeadWidth::of(64)),
            Kernel::Attention(HeadWidth::of(128))
        );
    }

    #[test]
    fn the_shared_query_blocks_are_a_cpu_adapter_s_rule_where_it_has_subgroups() {
        assert_eq!(
            AttentionForm::rule(true, true),
            AttentionForm::QueryBlocksShared
        );
        assert_eq!(AttentionForm::rule(true, false), AttentionForm::QueryBlocks);
        for subgroups in [false, true] {
            assert_eq!(
                AttentionForm::rule(false, subgroups),
                AttentionForm::PerQuery
            );
        }
        // Heads wider than the query blocks take run per query, by the rule too.
        for form in [AttentionForm::QueryBlocks, AttentionForm::QueryBlocksShared] {
            assert!(form.fits(QUERY_BLOCKS_MAX_HEAD_DIM));
            assert!(!form.fits(QUERY_BLOCKS_MAX_HEAD_DIM + 4));
        }
        assert_eq!(
            AttentionForm::rule_for(true, true, QUERY_BLOCKS_MAX_HEAD_DIM),
            AttentionForm::QueryBlocksShared
        );
        assert_eq!(
            AttentionForm::rule_for(true, true, 256),
            AttentionForm::PerQuery
        );
        let call = OpCall::Attention {
            seq: 70,
            heads: 3,
            head_dim: 64,
            scale: 1.0,
        };
        let pick = Pick {
            attention: Some(AttentionForm::QueryBlocksShared),
            ..Pick::default()
        };
        let (kernel, _) = select_with(&call, false, pick).expect("selected");
        assert_eq!(kernel, Kernel::AttentionBlocksShared(HeadWidth(16)));
        assert!(kernel.entry().0.needs_subgroups());
        assert!(!Kernel::AttentionBlocks(HeadWidth(16))
            .entry()
            .0
            .needs_subgroups());
        assert!(AttentionForm::QueryBlocksShared.needs_subgroups());
        assert_eq!(
            AttentionForm::from_name("query-blocks-sg"),
            Some(AttentionForm::QueryBlocksShared)
        );
        // The same grid as the plain query blocks: 64 queries a workgroup.
        assert_eq!(workgroups_with(&call, 0, 65535, pick), Ok([2, 3, 1]));
    }

    #[test]
    fn attention_runs_key_tiles_only_where_picked_and_the_head_fits() {
        let call = |head_dim| OpCall::Attention {
            seq: 40,
            heads: 2,
            head_dim,
            scale: 1.0,
        };
        let tiled = Pick {
            attention: Some(AttentionForm::KeyTiles),
            ..Pick::default()
        };
        let kernel = |c: &OpCall, p| select_with(c, false, p).map(|(k, _)| k);
        assert_eq!(
            kernel(&call(64), Pick::default()),
            Some(Kernel::Attention(HeadWidth(16)))
        );
        assert_eq!(
            kernel(&call(64), tiled),
            Some(Kernel::AttentionTiled(HeadWidth(16)))
        );
        assert_eq!(
            kernel(&call(128), tiled),
            Some(Kernel::Attention(HeadWidth(32)))
        );
        assert!(!AttentionForm::KeyTiles.fits(TILED_ATTENTION_MAX_HEAD_DIM + 4));
        // Both cover 16 queries a workgroup, heads along y; query blocks cover 64.
        for pick in [Pick::default(), tiled] {
            assert_eq!(workgroups_with(&call(64), 0, 65535, pick), Ok([3, 2, 1]));
        }
        let blocks = Pick {
            attention: Some(AttentionForm::QueryBlocks),
            ..Pick::default()
        };
        assert_eq!(
            kernel(&call(128), blocks),
            Some(Kernel::AttentionBlocks(HeadWidth(32)))
        );
        assert_eq!(workgroups_with(&call(128), 0, 65535, blocks), Ok([1, 2, 1]));
        // Heads wider than the blocks take run per query.
        assert_eq!(
            kernel(&call(256), blocks),
            Some(Kernel::Attention(HeadWidth(64)))
        );
        assert_eq!(workgroups_with(&call(256), 0, 65535, blocks), Ok([3, 2, 1]));
        // A form that does not take the head runs, and is gridded, per query.
        assert_eq!(workgroups_with(&call(128), 0, 65535, tiled), Ok([3, 2, 1]));
    }
}
