//! The supported ops and [`OpCall`]: a node's op with its dimensions checked against
//! the graph, shared by the GPU kernels and the CPU reference.
//!
//! A node's op name is parsed once into an [`Op`] (`parse`); resolution then goes by
//! family: `elementwise` (unary, binary), `rows` (softmax, norms, rope), `matmul`
//! (dense, transposed, packed) and `gather` (embedding, count/compact), each on the
//! shared checks of `check`.

mod check;
mod elementwise;
mod gather;
mod kv;
mod matmul;
mod parse;
mod rows;

pub use kv::{kv_state_row, KV_TABLE_HEADER};
pub use parse::Op;

use super::ExecError;
use crate::graph::{Graph, Node, NodeId};
use check::{Checker, NodeView, F16S, F32S};

/// Every op the executor and the CPU reference run (rustdoc does not show a slice's
/// value, so here they are): `copy`, `scale`, `relu`, `gelu`, `silu`, `add`, `mul`,
/// `softmax`, `softmax_causal`, `layer_norm`, `rms_norm`, `matmul`, `matmul_bt`,
/// `embedding`, `rope`, `count_positive`, `compact`, `matmul_packed`, `matmul_gelu`,
/// `matmul_add`, `attention_causal`, `kv_self`, `kv_attend`, `kv_attend_out`,
/// `matmul_bias`, `matmul_bias_gelu`, `matmul_add_bias`, `layer_norm_matmul_bias`,
/// `layer_norm_matmul_bias_gelu`, `kv_self_attend`, `kv_self_attend_out`. Other names
/// are user ops ([`crate::exec::UserOp`]).
pub const SUPPORTED_OPS: &[&str] = &[
    "copy",
    "scale",
    "relu",
    "gelu",
    "silu",
    "add",
    "mul",
    "softmax",
    "softmax_causal",
    "layer_norm",
    "rms_norm",
    "matmul",
    "matmul_bt",
    "embedding",
    "rope",
    "count_positive",
    "compact",
    "matmul_packed",
    "matmul_gelu",
    "matmul_add",
    "attention_causal",
    "kv_self",
    "kv_attend",
    "kv_attend_out",
    "matmul_bias",
    "matmul_bias_gelu",
    "matmul_add_bias",
    "layer_norm_matmul_bias",
    "layer_norm_matmul_bias_gelu",
    "kv_self_attend",
    "kv_self_attend_out",
];

/// The most elements `count_positive` and `compact` take: their count is a whole
/// number stored in an f32, exact up to 2^24.
pub const MAX_COMPACT_ELEMENTS: u64 = 1 << 24;

/// Whether `op` has a kernel (see [`SUPPORTED_OPS`]).
pub fn supports(op: &str) -> bool {
    Op::parse(op).is_some()
}

/// Layer-norm and RMS-norm epsilon when a node gives none.
pub const DEFAULT_EPS: f32 = 1e-5;
/// Rotary embedding base when a node gives none.
pub const DEFAULT_ROPE_BASE: f32 = 10000.0;

/// The largest element count or dimension the kernels index (32-bit indices).
pub const MAX_ELEMENTS: u64 = u32::MAX as u64;

/// A unary elementwise op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `out = x`.
    Copy,
    /// `out = alpha * x` (`params[0]`).
    Scale,
    /// `out = max(x, 0)`.
    Relu,
    /// GELU, tanh approximation.
    Gelu,
    /// `out = x * sigmoid(x)`.
    Silu,
}

impl UnaryOp {
    /// The code the unary kernel switches on.
    pub fn code(self) -> u32 {
        match self {
            UnaryOp::Copy => 0,
            UnaryOp::Scale => 1,
            UnaryOp::Relu => 2,
            UnaryOp::Gelu => 3,
            UnaryOp::Silu => 4,
        }
    }
}

/// A binary elementwise op; `b` repeats to the length of `a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `out = a + b`.
    Add,
    /// `out = a * b`.
    Mul,
}

impl BinaryOp {
    /// The code the binary kernel switches on.
    pub fn code(self) -> u32 {
        match self {
            BinaryOp::Add => 0,
            BinaryOp::Mul => 1,
        }
    }
}

/// What a fused matmul does with its product before storing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// `matmul_bias`: `out = a·b + bias` (only with a bias).
    Plain,
    /// `matmul_gelu`: `out = gelu(a·b)`.
    Gelu,
    /// `matmul_add`: `out = residual + a·b`, the residual being input 0 (in place
    /// over it when the plan puts the output there).
    Residual,
}

/// A node's op with checked dimensions. Inputs are in the node's order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OpCall {
    /// `x → out`, both `len` elements.
    Unary {
        /// The op.
        op: UnaryOp,
        /// Elements.
        len: u32,
        /// Scale factor (`scale` only; 1 otherwise).
        alpha: f32,
    },
    /// `(a, b) → out`; `a` and `out` have `len` elements, `b` has `len_b`, dividing `len`.
    Binary {
        /// The op.
        op: BinaryOp,
        /// Elements of `a` and `out`.
        len: u32,
        /// Elements of `b`.
        len_b: u32,
    },
    /// Softmax of each row of `[rows, cols]`.
    Softmax {
        /// Rows.
        rows: u32,
        /// Columns (the last dimension).
        cols: u32,
        /// For `softmax_causal`: rows per causal block (the second-to-last dimension);
        /// row `r` sees columns `0..=r % period`.
        causal_period: Option<u32>,
    },
    /// `(x, gain, bias) → out`, normalising rows of length `cols`.
    LayerNorm {
        /// Rows.
        rows: u32,
        /// Columns.
        cols: u32,
        /// Epsilon (`params[0]`, default [`DEFAULT_EPS`]).
        eps: f32,
    },
    /// `(x, gain) → out`, RMS-normalising rows of length `cols`.
    RmsNorm {
        /// Rows.
        rows: u32,
        /// Columns.
        cols: u32,
        /// Epsilon (`params[0]`, default [`DEFAULT_EPS`]).
        eps: f32,
    },
    /// `(a [m, k], b) → out [m, n]`; `b` is `[k, n]`, or `[n, k]` when `transposed_b`.
    Matmul {
        /// Rows of `a`.
        m: u32,
        /// Inner dimension.
        k: u32,
        /// Columns of the result.
        n: u32,
        /// `matmul_bt`: multiply by `bᵀ`.
        transposed_b: bool,
    },
    /// `(ids [rows] u32, table [vocab, dim]) → out [rows, dim]`.
    Embedding {
        /// Token ids.
        rows: u32,
        /// Row width of the table.
        dim: u32,
        /// Rows of the table.
        vocab: u32,
    },
    /// Rotary embedding of `[rows, dim]` (row = position, `dim` even).
    Rope {
        /// Rows (positions).
        rows: u32,
        /// Row width; even.
        dim: u32,
        /// Frequency base (`params[0]`, default [`DEFAULT_ROPE_BASE`]).
        base: f32,
    },
    /// `x [len] → count [1]`: how many elements of `x` are > 0, as a whole-number f32.
    CountPositive {
        /// Elements of `x`.
        len: u32,
    },
    /// `(x [len], count [1]) → out [out_len]`: the elements of `x` that are > 0, in
    /// order (zeros after them when `out_len` exceeds their number). `out` has a
    /// data-dependent length ([`crate::graph::DynamicLen`]) whose count is `count`.
    Compact {
        /// Elements of `x`.
        len: u32,
        /// Elements of `out`.
        out_len: u32,
    },
    /// `(a [m, k], packed B) → out [m, n]`: B pre-packed in the layout of
    /// [`crate::exec::packed`] (`[ceil(n/64), ceil(k/16), 1024]`).
    MatmulPacked {
        /// Rows of `a`.
        m: u32,
        /// Inner dimension.
        k: u32,
        /// Columns of the result (the output's last dimension).
        n: u32,
    },
    /// A matmul with a fused epilogue: `(a [m, k], b [k, n]) → gelu(a·b)` for
    /// [`Epilogue::Gelu`], `(residual [m, n], a, b) → residual + a·b` for
    /// [`Epilogue::Residual`]. `k` and `n` are multiples of 4 (vector loads).
    MatmulFused {
        /// Rows of `a`.
        m: u32,
        /// Inner dimension.
        k: u32,
        /// Columns of the result.
        n: u32,
        /// What is done with the product.
        epilogue: Epilogue,
        /// Whether a bias row `[n]` (the last input) is added to the product first
        /// (`matmul_bias`, `matmul_bias_gelu`, `matmul_add_bias`).
        bias: bool,
    },
    /// `(qkv, table u32, page) → state` (`kv_self_attend`) or `→ out [n,
    /// heads·head_dim]` (`kv_self_attend_out`, normalised): [`OpCall::KvSelf`] and then
    /// [`OpCall::KvAttend`] over the first page in one kernel (the state between them
    /// is never stored).
    KvSelfAttend {
        /// Queries of the chunk.
        n: u32,
        /// Heads (`params[0]`).
        heads: u32,
        /// Width of one head; a multiple of 4, at most [`MAX_ATTENTION_HEAD_DIM`].
        head_dim: u32,
        /// The layer (`params[1]`, default 0).
        layer: u32,
        /// The page's number in the block table (`params[2]`, default 0).
        page: u32,
        /// Score scale (`params[3]`, default `1/√head_dim`).
        scale: f32,
        /// `kv_self_attend_out`: divide by the sum and write the attention output.
        normalize: bool,
    },
    /// `(x [m, k], gain [k], beta [k], w [k, n], bias [n]) → out [m, n]`: a layer norm
    /// of `x`'s rows fused into the prologue of a matmul with a bias
    /// (`layer_norm_matmul_bias`), GELU in the epilogue when `gelu`
    /// (`layer_norm_matmul_bias_gelu`). `k` and `n` are multiples of 4.
    NormMatmul {
        /// Rows of `x`.
        m: u32,
        /// Inner dimension (the normalised width).
        k: u32,
        /// Columns of the result.
        n: u32,
        /// GELU (tanh form) after the bias.
        gelu: bool,
        /// The norm's epsilon (`params[0]`, default [`DEFAULT_EPS`]).
        eps: f32,
    },
    /// `qkv [seq, 3·heads·head_dim] → out [seq, heads·head_dim]`: causal multi-head
    /// attention, row `t` of `qkv` holding `q | k | v`, each split into heads.
    Attention {
        /// Tokens.
        seq: u32,
        /// Heads.
        heads: u32,
        /// Width of one head; a multiple of 4, at most [`MAX_ATTENTION_HEAD_DIM`].
        head_dim: u32,
        /// Score scale (`params[1]`, default `1/√head_dim`).
        scale: f32,
    },
    /// `qkv [n, 3·heads·head_dim] → state [n, heads, head_dim + 4]`: causal attention
    /// of a chunk of `n` queries over the chunk's own keys, as an unnormalised online
    /// softmax per (query, head): `[max, sum, 0, 0, acc[head_dim]]` (see `crate::kv`).
    KvSelf {
        /// Queries (and keys) of the chunk.
        n: u32,
        /// Heads (`params[0]`).
        heads: u32,
        /// Width of one head; a multiple of 4, at most [`MAX_ATTENTION_HEAD_DIM`].
        head_dim: u32,
        /// Score scale (`params[1]`, default `1/√head_dim`).
        scale: f32,
    },
    /// `(state, qkv, table u32, page) → state` (`kv_attend`) or `→ out [n, heads·head_dim]`
    /// (`kv_attend_out`, normalised): the state continued over the cached keys at
    /// positions `< past` whose block lies in `page`, read through the block table
    /// (`table[0]` is `past`); the chunk's own K and V rows whose block lies in `page`
    /// are written into it. Layout in `crate::kv`.
    KvAttend {
        /// Queries of the chunk.
        n: u32,
        /// Heads (`params[0]`).
        heads: u32,
        /// Width of one head; a multiple of 4, at most [`MAX_ATTENTION_HEAD_DIM`].
        head_dim: u32,
        /// The layer (`params[1]`, default 0): where its rows sit in each block.
        layer: u32,
        /// The page's number in the block table (`params[2]`, default 0).
        page: u32,
        /// Score scale (`params[3]`, default `1/√head_dim`).
        scale: f32,
        /// `kv_attend_out`: divide by the sum and write the attention output.
        normalize: bool,
    },
}

/// The widest head the fused attention kernel takes.
pub const MAX_ATTENTION_HEAD_DIM: u64 = 256;

impl OpCall {
    /// Whether a kernel exists that writes the output over input 0 in place.
    pub fn has_inplace_kernel(&self) -> bool {
        matches!(
            self,
            OpCall::Unary { .. }
                | OpCall::Binary { .. }
                | OpCall::Softmax { .. }
                | OpCall::Rope { .. }
                | OpCall::MatmulFused {
                    epilogue: Epilogue::Residual,
                    ..
                }
                | OpCall::KvAttend {
                    normalize: false,
                    ..
                }
        )
    }
}

/// Resolves node `step` of `graph` into an [`OpCall`], checking input count, dtypes,
/// shapes and sizes: the op name is parsed once into an [`Op`], then resolved by its
/// family.
///
/// # Errors
/// [`ExecError::NoKernel`] for an unsupported op, [`ExecError::WrongArity`],
/// [`ExecError::UnknownTensor`], [`ExecError::BadShape`] naming the mismatch, and
/// [`ExecError::TooManyElements`] beyond 32-bit indexing.
pub fn resolve(graph: &Graph, step: usize) -> Result<OpCall, ExecError> {
    let step_id = u32::try_from(step).unwrap_or(u32::MAX);
    let node = graph.nodes.get(step).ok_or(ExecError::UnknownNode {
        node: NodeId(step_id),
        nodes: graph.nodes.len(),
    })?;
    let name = node.op.as_str();
    refuse_sparse_views(graph, step_id, node)?;
    let op = Op::parse(name).ok_or_else(|| ExecError::NoKernel {
        node: NodeId(step_id),
        op: name.to_string(),
    })?;
    let view = node_view(graph, step_id, op.arity())?;
    if view.float == F16S && !op.has_f16() {
        return Err(view.c.bad(format!(
            "{name} has no f16 kernel; store its tensors as f32"
        )));
    }
    match op {
        Op::Unary(unary) => elementwise::unary(&view, unary),
        Op::Binary(binary) => elementwise::binary(&view, binary),
        Op::Softmax { causal } => rows::softmax(&view, causal),
        Op::LayerNorm => rows::norm(&view, true),
        Op::RmsNorm => rows::norm(&view, false),
        Op::Rope => rows::rope(&view),
        Op::Matmul { transposed_b } => matmul::dense(&view, transposed_b),
        Op::MatmulPacked => matmul::packed(&view),
        Op::MatmulGelu => matmul::fused(&view, Epilogue::Gelu, false),
        Op::MatmulAdd => matmul::fused(&view, Epilogue::Residual, false),
        Op::MatmulBias => matmul::fused(&view, Epilogue::Plain, true),
        Op::MatmulBiasGelu => matmul::fused(&view, Epilogue::Gelu, true),
        Op::MatmulAddBias => matmul::fused(&view, Epilogue::Residual, true),
        Op::NormMatmulBias => matmul::norm_fused(&view, false),
        Op::NormMatmulBiasGelu => matmul::norm_fused(&view, true),
        Op::AttentionCausal => matmul::attention(&view),
        Op::KvSelf => kv::self_attention(&view),
        Op::KvAttend => kv::attend(&view, false),
        Op::KvAttendOut => kv::attend(&view, true),
        Op::KvSelfAttend => kv::self_attend(&view, false),
        Op::KvSelfAttendOut => kv::self_attend(&view, true),
        Op::Embedding => gather::embedding(&view),
        Op::CountPositive => gather::compact(&view, false),
        Op::Compact => gather::compact(&view, true),
    }
}

/// The element type node `step`'s float tensors are stored as: its output's
/// ([`crate::exec::StorageType::F16`] for an f16 output, f32 otherwise). Meaningful
/// for a node [`resolve`] accepts, which checks that its float inputs agree.
///
/// Two exceptions: the KV-cache family (`kv_self`, `kv_attend[_out]`,
/// `kv_self_attend[_out]`), whose storage type is its `qkv` input's, which its pages
/// and its normalised output share, while the online-softmax state it reads or
/// writes is f32 whatever the storage type (the f16 kernels keep every score, sum and
/// accumulator in f32); and the compaction (`count_positive`, `compact`), whose
/// storage type is its values' (input 0, and `compact`'s output), while the count is
/// f32 whatever the storage type (exact to 2^24).
pub fn storage_of(graph: &Graph, step: usize) -> crate::exec::StorageType {
    let Some(node) = graph.nodes.get(step) else {
        return crate::exec::StorageType::default();
    };
    let typed = match Op::parse(&node.op).and_then(typed_input) {
        Some(index) => node.inputs.get(index).copied(),
        None => Some(node.output),
    };
    typed
        .and_then(|id| graph.tensor(id))
        .and_then(|t| crate::exec::StorageType::of(t.dtype))
        .unwrap_or_default()
}

/// The input whose element type is the storage type of a node of `op`, for the ops
/// whose output does not say it: the KV-cache family's `qkv` (its state is f32), and
/// the compaction's values (its count is f32).
fn typed_input(op: Op) -> Option<usize> {
    match op {
        Op::CountPositive | Op::Compact => Some(0),
        _ => kv::qkv_index(op),
    }
}

/// Checks node `step` for an op that takes `arity` dense `f32` inputs and writes a
/// dense `f32` output (a user op, [`crate::exec::UserOp`]); returns the inputs' shapes
/// and the output's.
///
/// # Errors
/// [`ExecError::UnknownNode`], [`ExecError::WrongArity`],
/// [`ExecError::UnknownTensor`], [`ExecError::BadShape`] (a dtype other than f32, a
/// shape that disagrees with the byte size, an empty tensor, a broadcast view) and
/// [`ExecError::TooManyElements`].
pub(crate) fn dense_f32_node(
    graph: &Graph,
    step: usize,
    arity: usize,
) -> Result<(Vec<Vec<u64>>, Vec<u64>), ExecError> {
    let step_id = u32::try_from(step).unwrap_or(u32::MAX);
    let node = graph.nodes.get(step).ok_or(ExecError::UnknownNode {
        node: NodeId(step_id),
        nodes: graph.nodes.len(),
    })?;
    refuse_sparse_views(graph, step_id, node)?;
    let view = node_view(graph, step_id, arity)?;
    view.c.len(view.out, F32S)?;
    for &input in &view.inputs {
        let len = view.c.len(input, F32S)?;
        view.c.small(len)?;
    }
    Ok((
        view.inputs.iter().map(|t| t.shape.clone()).collect(),
        view.out.shape.clone(),
    ))
}

/// The built-in kernels index dense tensors: a view that occupies fewer bytes than it
/// has (a broadcast view larger than its root, see graph::extent) cannot be read by
/// them without reading past its binding. Refuse it rather than compute garbage.
fn refuse_sparse_views(graph: &Graph, step: u32, node: &Node) -> Result<(), ExecError> {
    for &id in node.inputs.iter().chain(std::iter::once(&node.output)) {
        let (Some(t), Some(extent)) = (graph.tensor(id), graph.extent(id)) else {
            continue;
        };
        if extent.size < t.size {
            return Err(ExecError::BadShape {
                node: NodeId(step),
                op: node.op.clone(),
                problem: format!(
                    "{id} is a view of {} logical bytes over {} bytes of its root {}; \
                     the built-in kernels read dense tensors (materialise the broadcast)",
                    t.size, extent.size, extent.root
                ),
            });
        }
    }
    Ok(())
}

/// Node `step`'s tensors, checked for count (`arity` inputs) and existence, with the
/// output's element count (f32, 32-bit).
fn node_view(graph: &Graph, step: u32, arity: usize) -> Result<NodeView<'_>, ExecError> {
    let node = graph
        .nodes
        .get(step as usize)
        .ok_or(ExecError::UnknownNode {
            node: NodeId(step),
            nodes: graph.nodes.len(),
        })?;
    if node.inputs.len() != arity {
        return Err(ExecError::WrongArity {
            node: NodeId(step),
            op: node.op.clone(),
            expected: arity,
            got: node.inputs.len(),
        });
    }
    let c = Checker {
        graph,
        step,
        op: node.op.as_str(),
    };
    let inputs = node
        .inputs
        .iter()
        .map(|&id| c.tensor(id))
        .collect::<Result<Vec<_>, _>>()?;
    let out = c.tensor(node.output)?;
    let float = if out.dtype == crate::graph::DType::F16 {
        F16S
    } else {
        F32S
    };
    let out_len = c.len(out, float)?;
    c.small(out_len)?;
    Ok(NodeView {
        c,
        inputs,
        out,
        out_len,
        float,
        params: &node.params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::DType;

    #[test]
    fn a_broadcast_view_larger_than_its_root_is_refused_not_read_past_its_binding() {
        let mut b = crate::graph::GraphBuilder::new("g");
        let x = b.input("x", crate::graph::DType::F32, &[4]);
        let wide = b.view("expand", x, &[16]);
        let y = b.input("y", crate::graph::DType::F32, &[16]);
        let z = b.node("add", &[wide, y], &[16], false);
        b.mark_output(z);
        let g = b.build().expect("valid");
        match resolve(&g, 0) {
            Err(ExecError::BadShape { problem, .. }) => {
                assert!(problem.contains("logical bytes"), "{problem}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn every_built_in_op_has_an_f16_kernel() {
        for name in SUPPORTED_OPS {
            let op = Op::parse(name).expect("a built-in op");
            assert!(op.has_f16(), "{name}");
        }
    }
    use crate::graph::GraphBuilder;

    #[test]
    fn matmul_dimensions_are_read_from_shapes() {
        let mut b = GraphBuilder::new("t");
        let a = b.input("a", DType::F32, &[33, 65]);
        let w = b.weight("w", DType::F32, &[65, 17]);
        b.node("matmul", &[a, w], &[33, 17], false);
        let g = b.build().expect("valid");
        assert_eq!(
            resolve(&g, 0),
            Ok(OpCall::Matmul {
                m: 33,
                k: 65,
                n: 17,
                transposed_b: false
            })
        );
    }

    #[test]
    fn an_empty_inner_dimension_is_a_bad_shape() {
        for op in ["matmul", "matmul_packed"] {
            let mut b = GraphBuilder::new("t");
            let a = b.input("a", DType::F32, &[4, 0]);
            let w = b.weight("w", DType::F32, &[0, 8]);
            b.node(op, &[a, w], &[4, 8], false);
            let g = b.build().expect("zero-size tensors are valid graph data");
            assert!(
                matches!(
                    resolve(&g, 0),
                    Err(ExecError::BadShape {
                        node: NodeId(0),
                        ..
                    })
                ),
                "{op}"
            );
        }
    }

    #[test]
    fn mismatched_inner_dimension_is_a_bad_shape() {
        let mut b = GraphBuilder::new("t");
        let a = b.input("a", DType::F32, &[4, 8]);
        let w = b.weight("w", DType::F32, &[5, 8]);
        b.node("matmul", &[a, w], &[4, 8], false);
        let g = b.build().expect("valid");
        assert!(matches!(
            resolve(&g, 0),
            Err(ExecError::BadShape {
                node: NodeId(0),
                ..
            })
        ));
    }

    #[test]
    fn unknown_op_has_no_kernel_and_wrong_arity_is_named() {
        let mut b = GraphBuilder::new("t");
        let a = b.input("a", DType::F32, &[4]);
        b.node("conv2d", &[a], &[4], false);
        b.node("add", &[a], &[4], false);
        let g = b.build().expect("valid");
        assert!(matches!(
            resolve(&g, 0),
            Err(ExecError::NoKernel {
                node: NodeId(0),
                ..
            })
        ));
        assert_eq!(
            resolve(&g, 1),
            Err(ExecError::WrongArity {
                node: NodeId(1),
                op: "add".into(),
                expected: 2,
                got: 1
            })
        );
    }

    #[test]
    fn scale_without_a_factor_and_odd_rope_width_are_refused() {
        let mut b = GraphBuilder::new("t");
        let a = b.input("a", DType::F32, &[3, 5]);
        b.node("scale", &[a], &[3, 5], true);
        b.node("rope", &[a], &[3, 5], true);
        let g = b.build().expect("valid");
        assert!(matches!(resolve(&g, 0), Err(ExecError::BadShape { .. })));
        assert!(matches!(resolve(&g, 1), Err(ExecError::BadShape { .. })));
    }

    #[test]
    fn causal_softmax_period_is_the_second_to_last_dimension() {
        let mut b = GraphBuilder::new("t");
        let a = b.input("a", DType::F32, &[2, 8, 8]);
        b.node("softmax_causal", &[a], &[2, 8, 8], true);
        let g = b.build().expect("valid");
        assert_eq!(
            resolve(&g, 0),
            Ok(OpCall::Softmax {
                rows: 16,
                cols: 8,
                causal_period: Some(8)
            })
        );
    }
}
