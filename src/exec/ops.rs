//! The supported ops and [`OpCall`]: a node's op with its dimensions checked against
//! the graph, shared by the GPU kernels and the CPU reference.

use super::ExecError;
use crate::graph::{DType, Graph, NodeId, Tensor, TensorId};

/// Every op the executor and the CPU reference run.
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
];

/// The most elements `count_positive` and `compact` take: their count is a whole
/// number stored in an f32, exact up to 2^24.
pub const MAX_COMPACT_ELEMENTS: u64 = 1 << 24;

/// Whether `op` has a kernel (see [`SUPPORTED_OPS`]).
pub fn supports(op: &str) -> bool {
    SUPPORTED_OPS.contains(&op)
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
}

impl OpCall {
    /// Whether a kernel exists that writes the output over input 0 in place.
    pub fn has_inplace_kernel(&self) -> bool {
        matches!(
            self,
            OpCall::Unary { .. }
                | OpCall::Binary { .. }
                | OpCall::Softmax { .. }
                | OpCall::Rope { .. }
        )
    }
}

/// Checks a node against its op and returns its dimensions.
struct Checker<'g> {
    graph: &'g Graph,
    step: u32,
    op: &'g str,
}

impl Checker<'_> {
    fn bad(&self, problem: String) -> ExecError {
        ExecError::BadShape {
            node: NodeId(self.step),
            op: self.op.to_string(),
            problem,
        }
    }

    fn tensor(&self, id: TensorId) -> Result<&Tensor, ExecError> {
        self.graph.tensor(id).ok_or(ExecError::UnknownTensor {
            node: NodeId(self.step),
            tensor: id,
        })
    }

    fn small(&self, value: u64) -> Result<u32, ExecError> {
        u32::try_from(value).map_err(|_| ExecError::TooManyElements {
            node: NodeId(self.step),
            len: value,
            max: MAX_ELEMENTS,
        })
    }

    /// Elements of a tensor, checking that shape, dtype and byte size agree.
    fn len(&self, t: &Tensor, dtypes: &[DType]) -> Result<u64, ExecError> {
        if !dtypes.contains(&t.dtype) {
            return Err(self.bad(format!(
                "tensor {} is {:?}, expected one of {:?}",
                t.id, t.dtype, dtypes
            )));
        }
        let len = t
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| self.bad(format!("shape {:?} of {} overflows", t.shape, t.id)))?;
        if len.checked_mul(t.dtype.size()) != Some(t.size) {
            return Err(self.bad(format!(
                "tensor {} has shape {:?} ({len} elements) but {} bytes",
                t.id, t.shape, t.size
            )));
        }
        if len == 0 {
            return Err(self.bad(format!("tensor {} is empty", t.id)));
        }
        Ok(len)
    }

    fn last_dim(t: &Tensor) -> u64 {
        t.shape.last().copied().unwrap_or(1)
    }

    fn same_len(&self, out: &Tensor, out_len: u64, want: u64) -> Result<(), ExecError> {
        if out_len != want {
            return Err(self.bad(format!(
                "output {} has {out_len} elements, expected {want}",
                out.id
            )));
        }
        Ok(())
    }
}

/// Resolves node `step` of `graph` into an [`OpCall`], checking input count, dtypes,
/// shapes and sizes.
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
    let op = node.op.as_str();
    // The built-in kernels index dense tensors: a view that occupies fewer bytes than
    // it has (a broadcast view larger than its root, see graph::extent) cannot be read
    // by them without reading past its binding. Refuse it rather than compute garbage.
    for &id in node.inputs.iter().chain(std::iter::once(&node.output)) {
        let (Some(t), Some(extent)) = (graph.tensor(id), graph.extent(id)) else {
            continue;
        };
        if extent.size < t.size {
            return Err(ExecError::BadShape {
                node: NodeId(step_id),
                op: op.to_string(),
                problem: format!(
                    "{id} is a view of {} logical bytes over {} bytes of its root {}; \
                     the built-in kernels read dense tensors (materialise the broadcast)",
                    t.size, extent.size, extent.root
                ),
            });
        }
    }
    let c = Checker {
        graph,
        step: step_id,
        op,
    };
    let arity = match op {
        "copy" | "scale" | "relu" | "gelu" | "silu" | "softmax" | "softmax_causal" | "rope" => 1,
        "add" | "mul" | "rms_norm" | "matmul" | "matmul_bt" | "embedding" => 2,
        "layer_norm" => 3,
        "count_positive" => 1,
        "compact" => 2,
        "matmul_packed" => 2,
        _ => {
            return Err(ExecError::NoKernel {
                node: NodeId(step_id),
                op: op.to_string(),
            })
        }
    };
    if node.inputs.len() != arity {
        return Err(ExecError::WrongArity {
            node: NodeId(step_id),
            op: op.to_string(),
            expected: arity,
            got: node.inputs.len(),
        });
    }
    let inputs = node
        .inputs
        .iter()
        .map(|&id| c.tensor(id))
        .collect::<Result<Vec<_>, _>>()?;
    let out = c.tensor(node.output)?;
    let f32s = &[DType::F32][..];
    let out_len = c.len(out, f32s)?;
    c.small(out_len)?;
    let x = inputs[0];
    let param = |i: usize, default: f32| node.params.get(i).copied().unwrap_or(default);

    let call = match op {
        "copy" | "scale" | "relu" | "gelu" | "silu" => {
            let len = c.len(x, f32s)?;
            c.same_len(out, out_len, len)?;
            let unary = match op {
                "copy" => UnaryOp::Copy,
                "scale" => UnaryOp::Scale,
                "relu" => UnaryOp::Relu,
                "gelu" => UnaryOp::Gelu,
                _ => UnaryOp::Silu,
            };
            let alpha = if unary == UnaryOp::Scale {
                *node
                    .params
                    .first()
                    .ok_or_else(|| c.bad("scale needs params[0], the factor".to_string()))?
            } else {
                1.0
            };
            OpCall::Unary {
                op: unary,
                len: c.small(len)?,
                alpha,
            }
        }
        "add" | "mul" => {
            let len = c.len(x, f32s)?;
            let len_b = c.len(inputs[1], f32s)?;
            c.same_len(out, out_len, len)?;
            if !len.is_multiple_of(len_b) {
                return Err(c.bad(format!(
                    "second input has {len_b} elements, which does not divide {len}"
                )));
            }
            OpCall::Binary {
                op: if op == "add" {
                    BinaryOp::Add
                } else {
                    BinaryOp::Mul
                },
                len: c.small(len)?,
                len_b: c.small(len_b)?,
            }
        }
        "softmax" | "softmax_causal" => {
            let len = c.len(x, f32s)?;
            c.same_len(out, out_len, len)?;
            let cols = Checker::last_dim(x);
            let period = if x.shape.len() >= 2 {
                x.shape[x.shape.len() - 2]
            } else {
                1
            };
            OpCall::Softmax {
                rows: c.small(len / cols)?,
                cols: c.small(cols)?,
                causal_period: if op == "softmax_causal" {
                    Some(c.small(period)?)
                } else {
                    None
                },
            }
        }
        "layer_norm" | "rms_norm" => {
            let len = c.len(x, f32s)?;
            c.same_len(out, out_len, len)?;
            let cols = Checker::last_dim(x);
            for &w in &inputs[1..] {
                let wl = c.len(w, f32s)?;
                if wl != cols {
                    return Err(c.bad(format!(
                        "gain/bias {} has {wl} elements, rows have {cols}",
                        w.id
                    )));
                }
            }
            let (rows, cols) = (c.small(len / cols)?, c.small(cols)?);
            let eps = param(0, DEFAULT_EPS);
            if op == "layer_norm" {
                OpCall::LayerNorm { rows, cols, eps }
            } else {
                OpCall::RmsNorm { rows, cols, eps }
            }
        }
        "matmul" | "matmul_bt" => {
            let a_len = c.len(x, f32s)?;
            let b = inputs[1];
            c.len(b, f32s)?;
            if b.shape.len() != 2 {
                return Err(c.bad(format!(
                    "second input {} must be 2-D, has shape {:?}",
                    b.id, b.shape
                )));
            }
            let k = Checker::last_dim(x);
            let m = a_len
                .checked_div(k)
                .ok_or_else(|| c.bad(format!("input {} has an empty inner dimension", x.id)))?;
            let transposed_b = op == "matmul_bt";
            let (bk, n) = if transposed_b {
                (b.shape[1], b.shape[0])
            } else {
                (b.shape[0], b.shape[1])
            };
            if bk != k {
                return Err(c.bad(format!(
                    "inner dimensions differ: a {:?} has k = {k}, b {:?} has {bk}",
                    x.shape, b.shape
                )));
            }
            c.same_len(out, out_len, m.saturating_mul(n))?;
            OpCall::Matmul {
                m: c.small(m)?,
                k: c.small(k)?,
                n: c.small(n)?,
                transposed_b,
            }
        }
        "embedding" => {
            let rows = c.len(x, &[DType::U32, DType::I32])?;
            let table = inputs[1];
            c.len(table, f32s)?;
            if table.shape.len() != 2 {
                return Err(c.bad(format!(
                    "table {} must be 2-D, has shape {:?}",
                    table.id, table.shape
                )));
            }
            let (vocab, dim) = (table.shape[0], table.shape[1]);
            c.same_len(out, out_len, rows.saturating_mul(dim))?;
            OpCall::Embedding {
                rows: c.small(rows)?,
                dim: c.small(dim)?,
                vocab: c.small(vocab)?,
            }
        }
        "count_positive" | "compact" => {
            let len = c.len(x, f32s)?;
            if len > MAX_COMPACT_ELEMENTS {
                return Err(c.bad(format!(
                    "{len} elements; counts are exact up to {MAX_COMPACT_ELEMENTS}"
                )));
            }
            if op == "count_positive" {
                c.same_len(out, out_len, 1)?;
                OpCall::CountPositive { len: c.small(len)? }
            } else {
                let count_len = c.len(inputs[1], f32s)?;
                if count_len != 1 {
                    return Err(c.bad(format!(
                        "count {} has {count_len} elements, expected 1",
                        inputs[1].id
                    )));
                }
                if out_len > len {
                    return Err(c.bad(format!(
                        "output has {out_len} elements, more than the {len} of its input"
                    )));
                }
                OpCall::Compact {
                    len: c.small(len)?,
                    out_len: c.small(out_len)?,
                }
            }
        }
        "matmul_packed" => {
            let a_len = c.len(x, f32s)?;
            let packed = inputs[1];
            c.len(packed, f32s)?;
            let k = Checker::last_dim(x);
            let n = Checker::last_dim(out);
            let m = a_len
                .checked_div(k)
                .ok_or_else(|| c.bad(format!("input {} has an empty inner dimension", x.id)))?;
            c.same_len(out, out_len, m.saturating_mul(n))?;
            let want = super::packed::packed_shape(k, n);
            if want.as_ref().map(|s| s.as_slice()) != Some(packed.shape.as_slice()) {
                return Err(c.bad(format!(
                    "packed input {} has shape {:?}, a [{m}, {k}] x [{k}, {n}] product needs {want:?}",
                    packed.id, packed.shape
                )));
            }
            OpCall::MatmulPacked {
                m: c.small(m)?,
                k: c.small(k)?,
                n: c.small(n)?,
            }
        }
        _ => {
            // "rope": the only op left with arity 1 and no arm above.
            let len = c.len(x, f32s)?;
            c.same_len(out, out_len, len)?;
            let dim = Checker::last_dim(x);
            if !dim.is_multiple_of(2) {
                return Err(c.bad(format!("rope needs an even last dimension, got {dim}")));
            }
            OpCall::Rope {
                rows: c.small(len / dim)?,
                dim: c.small(dim)?,
                base: param(0, DEFAULT_ROPE_BASE),
            }
        }
    };
    Ok(call)
}

#[cfg(test)]
mod tests {
    use super::*;

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
