//! CPU references: every op's math on the CPU (accumulating in f64), and
//! [`evaluate`], which runs a whole graph.
//!
//! Tensor values are [`TensorData`]: `F32` for float tensors, `U32` for token ids
//! (`u32` or `i32` tensors, read as `u32`). A view reads its root's first elements,
//! and a node writing a view writes its root's first elements, as on the GPU.
//! An f16 tensor ([`crate::graph::DType::F16`]) holds `F32` values rounded to f16
//! ([`round_to_f16`]): its given values are rounded on entry and each node that
//! writes one rounds its result, as the f16 kernels store it; the math between stays
//! in f64/f32.

use super::custom::{self, Registered, UserCall, UserOps};
use super::ops::{self, BinaryOp, OpCall, UnaryOp};
use super::ExecError;
use crate::graph::{DType, Graph, NodeId, TensorId};

pub use super::cpu_kv::{
    kv_append_page, kv_attend_page, kv_self, normalize as kv_normalize, KvDims,
};
use super::inputs::{Inputs, TensorData};

/// GELU, tanh approximation: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu(x: f32) -> f32 {
    let x = f64::from(x);
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    (0.5 * x * (1.0 + u.tanh())) as f32
}

/// SiLU: `x · sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    let x = f64::from(x);
    (x / (1.0 + (-x).exp())) as f32
}

/// A unary elementwise op.
pub fn unary(op: UnaryOp, alpha: f32, x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| match op {
            UnaryOp::Copy => v,
            UnaryOp::Scale => v * alpha,
            UnaryOp::Relu => v.max(0.0),
            UnaryOp::Gelu => gelu(v),
            UnaryOp::Silu => silu(v),
        })
        .collect()
}

/// A binary elementwise op with `b` repeated (`b[i % b.len()]`); empty `b` gives `a`.
pub fn binary(op: BinaryOp, a: &[f32], b: &[f32]) -> Vec<f32> {
    if b.is_empty() {
        return a.to_vec();
    }
    a.iter()
        .enumerate()
        .map(|(i, &u)| {
            let v = b[i % b.len()];
            match op {
                BinaryOp::Add => u + v,
                BinaryOp::Mul => u * v,
            }
        })
        .collect()
}

/// Softmax of each row of length `cols`; with `causal_period = Some(p)`, row `r` sees
/// only columns `0..=r % p` (the rest become 0).
pub fn softmax(x: &[f32], cols: usize, causal_period: Option<usize>) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    if cols == 0 {
        return out;
    }
    for (r, (row, dst)) in x.chunks(cols).zip(out.chunks_mut(cols)).enumerate() {
        let visible = match causal_period {
            Some(p) => (r % p.max(1) + 1).min(row.len()),
            None => row.len(),
        };
        let max = row[..visible]
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let sum: f64 = row[..visible]
            .iter()
            .map(|&v| (f64::from(v) - max).exp())
            .sum();
        for c in 0..visible {
            dst[c] = ((f64::from(row[c]) - max).exp() / sum) as f32;
        }
    }
    out
}

/// Causal multi-head attention over `qkv [seq, 3·heads·head_dim]` (row `t`: `q | k |
/// v`, each split into heads): `out[t, head] = Σ_{j≤t} softmax_j(q_t·k_j·scale)·v_j`.
pub fn attention_causal(
    qkv: &[f32],
    seq: usize,
    heads: usize,
    head_dim: usize,
    scale: f32,
) -> Vec<f32> {
    let width = heads * head_dim;
    let mut out = vec![0.0f32; seq * width];
    let at = |t: usize, part: usize, h: usize, e: usize| {
        f64::from(qkv[t * 3 * width + part * width + h * head_dim + e])
    };
    let mut scores = vec![0.0f64; seq];
    for h in 0..heads {
        for t in 0..seq {
            for (j, s) in scores.iter_mut().enumerate().take(t + 1) {
                let dot: f64 = (0..head_dim).map(|e| at(t, 0, h, e) * at(j, 1, h, e)).sum();
                *s = dot * f64::from(scale);
            }
            let max = scores[..=t]
                .iter()
                .fold(f64::NEG_INFINITY, |m, &v| m.max(v));
            let weights: Vec<f64> = scores[..=t].iter().map(|&s| (s - max).exp()).collect();
            let sum: f64 = weights.iter().sum();
            for e in 0..head_dim {
                let v: f64 = weights
                    .iter()
                    .enumerate()
                    .map(|(j, w)| w * at(j, 2, h, e))
                    .sum();
                out[t * width + h * head_dim + e] = (v / sum) as f32;
            }
        }
    }
    out
}

/// Layer norm of each row of length `gain.len()`: `(x − mean)/√(var + eps)·gain + bias`.
pub fn layer_norm(x: &[f32], gain: &[f32], bias: &[f32], eps: f32) -> Vec<f32> {
    let cols = gain.len();
    let mut out = Vec::with_capacity(x.len());
    if cols == 0 {
        return x.to_vec();
    }
    for row in x.chunks(cols) {
        let n = row.len() as f64;
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = row
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        let inv = 1.0 / (var + f64::from(eps)).sqrt();
        for (c, &v) in row.iter().enumerate() {
            let b = bias.get(c).copied().unwrap_or(0.0);
            out.push(((f64::from(v) - mean) * inv * f64::from(gain[c]) + f64::from(b)) as f32);
        }
    }
    out
}

/// RMS norm of each row of length `gain.len()`: `x/√(mean(x²) + eps)·gain`.
pub fn rms_norm(x: &[f32], gain: &[f32], eps: f32) -> Vec<f32> {
    let cols = gain.len();
    if cols == 0 {
        return x.to_vec();
    }
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let mean_sq = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / row.len() as f64;
        let inv = 1.0 / (mean_sq + f64::from(eps)).sqrt();
        for (c, &v) in row.iter().enumerate() {
            out.push((f64::from(v) * inv * f64::from(gain[c])) as f32);
        }
    }
    out
}

/// `a [m, k] × b` where `b` is `[k, n]`, or `[n, k]` when `transposed_b`.
pub fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, transposed_b: bool) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f64;
            for p in 0..k {
                let bv = if transposed_b {
                    b[j * k + p]
                } else {
                    b[p * n + j]
                };
                acc += f64::from(a[i * k + p]) * f64::from(bv);
            }
            out[i * n + j] = acc as f32;
        }
    }
    out
}

/// Rows of `table` (`[vocab, dim]`) picked by `ids`; an id ≥ vocab gives zeros.
pub fn embedding(ids: &[u32], table: &[f32], dim: usize) -> Vec<f32> {
    let vocab = table.len().checked_div(dim).unwrap_or(0);
    let mut out = Vec::with_capacity(ids.len() * dim);
    for &id in ids {
        let id = id as usize;
        if id < vocab {
            out.extend_from_slice(&table[id * dim..(id + 1) * dim]);
        } else {
            out.extend(std::iter::repeat_n(0.0, dim));
        }
    }
    out
}

/// Rotary embedding of `[rows, dim]`: pair `(2j, 2j+1)` of row `r` rotated by
/// `r · base^(−2j/dim)` (the angle computed in f32 like the kernel).
pub fn rope(x: &[f32], dim: usize, base: f32) -> Vec<f32> {
    let mut out = x.to_vec();
    if dim < 2 {
        return out;
    }
    for (r, row) in out.chunks_mut(dim).enumerate() {
        for j in 0..dim / 2 {
            let inv_freq = base.powf(-2.0 * j as f32 / dim as f32);
            let angle = f64::from(r as f32 * inv_freq);
            let (sin, cos) = angle.sin_cos();
            let (x0, x1) = (f64::from(row[2 * j]), f64::from(row[2 * j + 1]));
            row[2 * j] = (x0 * cos - x1 * sin) as f32;
            row[2 * j + 1] = (x0 * sin + x1 * cos) as f32;
        }
    }
    out
}

/// The elements of `x` that are > 0, in order, cut or zero-padded to `out_len`.
pub fn compact(x: &[f32], out_len: usize) -> Vec<f32> {
    let mut kept: Vec<f32> = x.iter().copied().filter(|&v| v > 0.0).collect();
    kept.resize(out_len, 0.0);
    kept
}

/// One node's input values (in the node's order), read with the checks every op makes:
/// a wrong type or length is [`ExecError::BadShape`] naming the node.
struct Operands<'a> {
    inputs: &'a [&'a TensorData],
    node: u32,
    op: &'a str,
}

impl<'a> Operands<'a> {
    /// The node's [`ExecError::BadShape`] for `problem`.
    fn bad(&self, problem: String) -> ExecError {
        ExecError::BadShape {
            node: NodeId(self.node),
            op: self.op.to_string(),
            problem,
        }
    }

    /// Input `i` as `len` f32 values.
    fn float(&self, i: usize, len: usize) -> Result<&'a [f32], ExecError> {
        let v = self.any_float(i)?;
        if v.len() != len {
            return Err(self.bad(format!("input {i} has {} values, expected {len}", v.len())));
        }
        Ok(v)
    }

    /// Input `i` as f32 values of any length.
    fn any_float(&self, i: usize) -> Result<&'a [f32], ExecError> {
        self.inputs
            .get(i)
            .and_then(|d| d.as_f32())
            .ok_or_else(|| self.bad(format!("input {i} is not an f32 value")))
    }

    /// Input `i` as u32 values (`what` names them in the error).
    fn words(&self, i: usize, what: &str) -> Result<&'a [u32], ExecError> {
        match self.inputs.get(i) {
            Some(TensorData::U32(words)) => Ok(words.as_slice()),
            _ => Err(self.bad(format!("input {i} must be {what}"))),
        }
    }
}

fn u(v: u32) -> usize {
    v as usize
}

/// Applies one checked call to its inputs' values (in the node's order).
///
/// # Errors
/// [`ExecError::BadShape`] (node `node`) when a value has the wrong type or length.
pub fn apply(
    call: &OpCall,
    inputs: &[&TensorData],
    node: u32,
    op: &str,
) -> Result<Vec<f32>, ExecError> {
    let x = Operands { inputs, node, op };
    Ok(match *call {
        OpCall::Unary { op, len, alpha } => unary(op, alpha, x.float(0, u(len))?),
        OpCall::Binary { op, len, len_b } => binary(op, x.float(0, u(len))?, x.float(1, u(len_b))?),
        OpCall::Softmax {
            rows,
            cols,
            causal_period,
        } => softmax(
            x.float(0, u(rows) * u(cols))?,
            u(cols),
            causal_period.map(u),
        ),
        OpCall::LayerNorm { rows, cols, eps } => layer_norm(
            x.float(0, u(rows) * u(cols))?,
            x.float(1, u(cols))?,
            x.float(2, u(cols))?,
            eps,
        ),
        OpCall::RmsNorm { rows, cols, eps } => {
            rms_norm(x.float(0, u(rows) * u(cols))?, x.float(1, u(cols))?, eps)
        }
        OpCall::Matmul {
            m,
            k,
            n,
            transposed_b,
        } => matmul(
            x.float(0, u(m) * u(k))?,
            x.float(1, u(k) * u(n))?,
            u(m),
            u(k),
            u(n),
            transposed_b,
        ),
        OpCall::Embedding { rows, dim, vocab } => {
            let ids = x.words(0, &format!("{rows} u32 token ids"))?;
            if ids.len() != u(rows) {
                return Err(x.bad(format!("input 0 must be {rows} u32 token ids")));
            }
            embedding(ids, x.float(1, u(vocab) * u(dim))?, u(dim))
        }
        OpCall::Rope { rows, dim, base } => rope(x.float(0, u(rows) * u(dim))?, u(dim), base),
        OpCall::CountPositive { len } => {
            vec![x.float(0, u(len))?.iter().filter(|&&v| v > 0.0).count() as f32]
        }
        OpCall::Compact { len, out_len } => compact(x.float(0, u(len))?, u(out_len)),
        OpCall::MatmulFused {
            m,
            k,
            n,
            epilogue,
            bias,
        } => matmul_fused(&x, [m, k, n], epilogue, bias)?,
        OpCall::NormMatmul {
            m,
            k,
            n,
            gelu: with_gelu,
            eps,
        } => norm_matmul(&x, [m, k, n], with_gelu, eps)?,
        OpCall::Attention {
            seq,
            heads,
            head_dim,
            scale,
        } => attention_causal(
            x.float(0, u(seq) * 3 * u(heads) * u(head_dim))?,
            u(seq),
            u(heads),
            u(head_dim),
            scale,
        ),
        OpCall::KvSelf {
            n,
            heads,
            head_dim,
            scale,
        } => super::cpu_kv::kv_self(
            x.float(0, u(n) * 3 * u(heads) * u(head_dim))?,
            u(n),
            u(heads),
            u(head_dim),
            scale,
        ),
        OpCall::KvAttend {
            n,
            heads,
            head_dim,
            layer,
            page,
            scale,
            normalize,
        } => {
            let dims = kv_dims(n, heads, head_dim, layer, scale);
            kv_attend(&x, &dims, page, normalize)?
        }
        OpCall::KvSelfAttend {
            n,
            heads,
            head_dim,
            layer,
            page,
            scale,
            normalize,
        } => {
            let dims = kv_dims(n, heads, head_dim, layer, scale);
            kv_self_attend(&x, &dims, page, normalize)?
        }
        OpCall::MatmulPacked { m, k, n } => {
            let packed_len = super::packed::packed_len(u64::from(k), u64::from(n))
                .map_err(|e| x.bad(e.to_string()))?;
            super::packed::matmul_packed_cpu(
                x.float(0, u(m) * u(k))?,
                x.float(1, packed_len as usize)?,
                u64::from(m),
                u64::from(k),
                u64::from(n),
            )
            .map_err(|e| x.bad(e.to_string()))?
        }
    })
}

/// `matmul` with a fused epilogue: `(a, b[, bias])` or, for
/// [`ops::Epilogue::Residual`], `(residual, a, b[, bias])`.
fn matmul_fused(
    x: &Operands,
    [m, k, n]: [u32; 3],
    epilogue: ops::Epilogue,
    bias: bool,
) -> Result<Vec<f32>, ExecError> {
    let first = usize::from(epilogue == ops::Epilogue::Residual);
    let mut product = matmul(
        x.float(first, u(m) * u(k))?,
        x.float(first + 1, u(k) * u(n))?,
        u(m),
        u(k),
        u(n),
        false,
    );
    if bias {
        let row = x.float(first + 2, u(n))?;
        for (i, p) in product.iter_mut().enumerate() {
            *p += row[i % u(n).max(1)];
        }
    }
    Ok(match epilogue {
        ops::Epilogue::Plain => product,
        ops::Epilogue::Gelu => product.into_iter().map(gelu).collect(),
        ops::Epilogue::Residual => x
            .float(0, u(m) * u(n))?
            .iter()
            .zip(product)
            .map(|(r, p)| r + p)
            .collect(),
    })
}

/// A layer norm of `x`'s rows, then a matmul with a bias (and GELU):
/// `(x, gain, beta, w, bias)`.
fn norm_matmul(
    x: &Operands,
    [m, k, n]: [u32; 3],
    with_gelu: bool,
    eps: f32,
) -> Result<Vec<f32>, ExecError> {
    let normed = layer_norm(
        x.float(0, u(m) * u(k))?,
        x.float(1, u(k))?,
        x.float(2, u(k))?,
        eps,
    );
    let mut product = matmul(&normed, x.float(3, u(k) * u(n))?, u(m), u(k), u(n), false);
    let row = x.float(4, u(n))?;
    for (i, p) in product.iter_mut().enumerate() {
        *p += row[i % u(n).max(1)];
        if with_gelu {
            *p = gelu(*p);
        }
    }
    Ok(product)
}

/// The paged-cache kernels' dimensions.
fn kv_dims(n: u32, heads: u32, head_dim: u32, layer: u32, scale: f32) -> KvDims {
    KvDims {
        n: u(n),
        heads: u(heads),
        head_dim: u(head_dim),
        layer: u(layer),
        scale,
    }
}

/// `kv_attend`: `(state, qkv, table, page)`, the state continued over one page.
fn kv_attend(
    x: &Operands,
    dims: &KvDims,
    page: u32,
    normalize: bool,
) -> Result<Vec<f32>, ExecError> {
    let state = x.float(0, dims.state_len())?;
    let qkv = x.float(1, dims.n * 3 * dims.heads * dims.head_dim)?;
    over_page(x, dims, state.to_vec(), qkv, 2, page, normalize)
}

/// `kv_self_attend`: `(qkv, table, page)`, the chunk's own keys, then one page.
fn kv_self_attend(
    x: &Operands,
    dims: &KvDims,
    page: u32,
    normalize: bool,
) -> Result<Vec<f32>, ExecError> {
    let qkv = x.float(0, dims.n * 3 * dims.heads * dims.head_dim)?;
    let state = super::cpu_kv::kv_self(qkv, dims.n, dims.heads, dims.head_dim, dims.scale);
    over_page(x, dims, state, qkv, 1, page, normalize)
}

/// `state` continued over the cache page whose block table is input `table_at` and
/// whose values are the input after it, normalised into the attention output when
/// `normalize`: what `kv_attend` and `kv_self_attend` share.
fn over_page(
    x: &Operands,
    dims: &KvDims,
    mut state: Vec<f32>,
    qkv: &[f32],
    table_at: usize,
    page: u32,
    normalize: bool,
) -> Result<Vec<f32>, ExecError> {
    let table = x.words(table_at, "the u32 block table")?;
    let page_values = x.any_float(table_at + 1)?;
    super::cpu_kv::kv_attend_page(dims, &mut state, qkv, table, page, page_values)
        .map_err(|problem| x.bad(problem))?;
    Ok(if normalize {
        super::cpu_kv::normalize(dims, &state)
    } else {
        state
    })
}

/// Evaluates `graph` on the CPU. `values` gives every input and weight (by id; a view's
/// root suffices). Returns the value of every tensor after the pass, by id (`None`
/// for a tensor neither given nor computed).
///
/// # Errors
/// [`ExecError::MissingValue`] when a node reads a tensor that has no value,
/// [`ExecError::WrongDataSize`] for a given value of the wrong length, and the errors
/// of [`ops::resolve`] and [`apply`]. A graph with user ops needs
/// [`evaluate_with`].
pub fn evaluate(graph: &Graph, values: &Inputs) -> Result<Vec<Option<TensorData>>, ExecError> {
    evaluate_with(graph, values, &UserOps::new())
}

/// [`evaluate`] for graphs with user ops: a node whose op is not built in runs the
/// CPU reference of the op of that name in `ops` ([`crate::exec::UserOp::cpu`]); pass
/// [`crate::exec::user_ops`] for the ops registered on a device (`ops_set`).
///
/// # Errors
/// Those of [`evaluate`]; [`ExecError::NoKernel`] for an op neither built in nor in
/// `ops`; [`ExecError::NoCpuReference`] for a user op without a CPU reference; the
/// shape errors of the op's node ([`ExecError::BadShape`], [`ExecError::WrongArity`]).
pub fn evaluate_with(
    graph: &Graph,
    values: &Inputs,
    ops_set: &UserOps,
) -> Result<Vec<Option<TensorData>>, ExecError> {
    let count = graph.tensors.len();
    let mut roots: Vec<Option<TensorData>> = vec![None; count];
    let elements = |id: TensorId| {
        graph
            .tensor(id)
            .map_or(0, |t| (t.size / t.dtype.size().max(1)) as usize)
    };
    for (&id, data) in values {
        let root = graph.root_of(id).ok_or(ExecError::MissingValue {
            tensor: id,
            name: String::new(),
        })?;
        if data.len() != elements(root) {
            return Err(ExecError::WrongDataSize {
                tensor: id,
                expected: graph.tensor(root).map_or(0, |t| t.size),
                got: (data.len() as u64).saturating_mul(4),
            });
        }
        roots[root.index()] = Some(match data {
            TensorData::F32(v) if is_f16(graph, root) => TensorData::F32(round_to_f16(v)),
            other => other.clone(),
        });
    }
    for (step, node) in graph.nodes.iter().enumerate() {
        let node_id = step as u32;
        let call = if ops::supports(&node.op) {
            Call::Builtin(ops::resolve(graph, step)?)
        } else {
            let op = ops_set.get(&node.op).ok_or_else(|| ExecError::NoKernel {
                node: NodeId(node_id),
                op: node.op.clone(),
            })?;
            Call::User(op, custom::resolve_user(graph, step, op)?)
        };
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for &id in &node.inputs {
            let missing = || ExecError::MissingValue {
                tensor: id,
                name: graph.tensor(id).map(|t| t.name.clone()).unwrap_or_default(),
            };
            let root = graph.root_of(id).ok_or_else(missing)?;
            let data = roots[root.index()].as_ref().ok_or_else(missing)?;
            inputs.push(data.prefix(elements(id)));
        }
        let refs: Vec<&TensorData> = inputs.iter().collect();
        let result = match &call {
            Call::Builtin(call) => apply(call, &refs, node_id, &node.op)?,
            Call::User(op, call) => {
                let floats = refs
                    .iter()
                    .enumerate()
                    .map(|(i, d)| {
                        d.as_f32().ok_or_else(|| ExecError::BadShape {
                            node: NodeId(node_id),
                            op: node.op.clone(),
                            problem: format!("input {i} is not an f32 value"),
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                custom::apply_cpu(op, call, &floats, node_id)?
            }
        };
        // An f16 output is stored rounded, as the GPU's kernels store it.
        let result = if is_f16(graph, node.output) {
            round_to_f16(&result)
        } else {
            result
        };
        let root = graph.root_of(node.output).ok_or(ExecError::UnknownTensor {
            node: NodeId(node_id),
            tensor: node.output,
        })?;
        let root_len = elements(root);
        let slot = &mut roots[root.index()];
        match slot {
            Some(TensorData::F32(existing)) if existing.len() >= result.len() => {
                existing[..result.len()].copy_from_slice(&result);
            }
            _ => {
                let mut fresh = vec![0.0f32; root_len.max(result.len())];
                fresh[..result.len()].copy_from_slice(&result);
                *slot = Some(TensorData::F32(fresh));
            }
        }
    }
    Ok(graph
        .tensors
        .iter()
        .map(|t| {
            let root = graph.root_of(t.id)?;
            roots[root.index()]
                .as_ref()
                .map(|d| d.prefix(elements(t.id)))
        })
        .collect())
}

/// Whether `tensor` is stored as f16.
fn is_f16(graph: &Graph, tensor: TensorId) -> bool {
    graph.tensor(tensor).is_some_and(|t| t.dtype == DType::F16)
}

/// `values` rounded to the nearest f16 (ties to even) and widened back: what an f16
/// tensor holds. Values beyond f16's range become infinities, as on the GPU.
pub fn round_to_f16(values: &[f32]) -> Vec<f32> {
    values
        .iter()
        .map(|&v| half::f16::from_f32(v).to_f32())
        .collect()
}

/// A node's checked call: built in, or a user op's.
enum Call<'o> {
    Builtin(OpCall),
    User(&'o Registered, UserCall),
}

/// The zero value of a tensor of `dtype` with `len` elements.
pub fn zeros(dtype: DType, len: usize) -> TensorData {
    match dtype {
        DType::U32 | DType::I32 => TensorData::U32(vec![0; len]),
        _ => TensorData::F32(vec![0.0; len]),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::graph::GraphBuilder;

    #[test]
    fn a_user_op_runs_its_cpu_reference_beside_built_in_ops() {
        use crate::exec::custom::UserOps;
        let mut b = GraphBuilder::new("g");
        let g = b.input("g", DType::F32, &[2, 3]);
        let u = b.input("u", DType::F32, &[2, 3]);
        let h = b.node("my_swiglu", &[g, u], &[2, 3], false);
        let y = b.node_with_params("scale", &[h], &[2, 3], true, &[2.0]);
        b.mark_output(y);
        let graph = b.build().expect("valid");
        let gv = vec![-1.0, 0.0, 0.5, 1.0, 2.0, 3.0];
        let uv = vec![1.0, 2.0, 3.0, -1.0, 0.5, 0.25];
        let values = HashMap::from([
            (g, TensorData::F32(gv.clone())),
            (u, TensorData::F32(uv.clone())),
        ]);
        assert!(matches!(
            evaluate(&graph, &values),
            Err(ExecError::NoKernel { .. })
        ));
        let mut ops = UserOps::new();
        ops.register(crate::exec::custom::tests_support::swiglu("my_swiglu"))
            .expect("registers");
        let all = evaluate_with(&graph, &values, &ops).expect("evaluates");
        let want: Vec<f32> = gv
            .iter()
            .zip(&uv)
            .map(|(&g, &u)| 2.0 * silu(g) * u)
            .collect();
        let got = all[y.index()].as_ref().and_then(|d| d.as_f32()).expect("y");
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-6, "{got:?} vs {want:?}");
        }
        let mut bare = UserOps::new();
        bare.register(crate::exec::UserOp::new(
            "my_swiglu",
            crate::exec::custom::tests_support::SWIGLU,
            "swiglu",
            2,
        ))
        .expect("registers");
        assert!(matches!(
            evaluate_with(&graph, &values, &bare),
            Err(ExecError::NoCpuReference { .. })
        ));
    }

    #[test]
    fn softmax_rows_sum_to_one() {
        let x: Vec<f32> = (0..21).map(|i| (i as f32 * 0.37).sin() * 5.0).collect();
        let y = softmax(&x, 7, None);
        for row in y.chunks(7) {
            let sum: f32 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-6, "{sum}");
            assert!(row.iter().all(|&p| p > 0.0));
        }
    }

    #[test]
    fn causal_softmax_masks_columns_after_the_row() {
        let x = vec![1.0f32; 16];
        let y = softmax(&x, 4, Some(4));
        assert_eq!(&y[0..4], &[1.0, 0.0, 0.0, 0.0]);
        assert_eq!(&y[4..8], &[0.5, 0.5, 0.0, 0.0]);
        assert!((y[15] - 0.25).abs() < 1e-7);
    }

    #[test]
    fn softmax_of_huge_logits_stays_finite() {
        let y = softmax(&[1e30, 0.0, -1e30], 3, None);
        assert_eq!(y, vec![1.0, 0.0, 0.0]);
    }

    #[test]
    fn layer_norm_rows_have_zero_mean_and_unit_variance() {
        let x: Vec<f32> = (0..40).map(|i| i as f32 * 1.5 - 3.0).collect();
        let y = layer_norm(&x, &[1.0; 10], &[0.0; 10], 1e-5);
        for row in y.chunks(10) {
            let mean: f32 = row.iter().sum::<f32>() / 10.0;
            let var: f32 = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 10.0;
            assert!(
                mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3,
                "{mean} {var}"
            );
        }
    }

    #[test]
    fn rms_norm_rows_have_unit_rms() {
        let x: Vec<f32> = (0..12).map(|i| i as f32 - 4.0).collect();
        let y = rms_norm(&x, &[1.0; 6], 0.0);
        for row in y.chunks(6) {
            let rms = (row.iter().map(|v| v * v).sum::<f32>() / 6.0).sqrt();
            assert!((rms - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn matmul_bt_equals_matmul_with_the_transpose() {
        let a: Vec<f32> = (0..6).map(|i| i as f32).collect(); // [2,3]
        let b: Vec<f32> = (0..12).map(|i| (i as f32) * 0.5 - 2.0).collect(); // [3,4]
        let mut bt = vec![0.0; 12]; // [4,3]
        for p in 0..3 {
            for j in 0..4 {
                bt[j * 3 + p] = b[p * 4 + j];
            }
        }
        assert_eq!(
            matmul(&a, &b, 2, 3, 4, false),
            matmul(&a, &bt, 2, 3, 4, true)
        );
        assert_eq!(matmul(&[1.0, 2.0], &[3.0, 4.0], 1, 2, 1, false), vec![11.0]);
    }

    #[test]
    fn gelu_and_silu_match_known_values() {
        assert_eq!(gelu(0.0), 0.0);
        assert!((gelu(1.0) - 0.841_192).abs() < 1e-5);
        assert!((gelu(-3.0) - (-0.003_637_4)).abs() < 1e-5);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert_eq!(silu(-200.0), -0.0);
    }

    #[test]
    fn embedding_out_of_range_ids_give_zero_rows() {
        let table = vec![1.0, 2.0, 3.0, 4.0];
        assert_eq!(
            embedding(&[1, 5, 0], &table, 2),
            vec![3.0, 4.0, 0.0, 0.0, 1.0, 2.0]
        );
    }

    #[test]
    fn rope_keeps_position_zero_and_preserves_pair_norms() {
        let x: Vec<f32> = (0..24).map(|i| (i as f32 * 0.7).cos()).collect();
        let y = rope(&x, 8, 10000.0);
        assert_eq!(&y[..8], &x[..8]);
        for (a, b) in x.chunks(2).zip(y.chunks(2)) {
            let (na, nb) = (a[0].hypot(a[1]), b[0].hypot(b[1]));
            assert!((na - nb).abs() < 1e-5);
        }
        assert_ne!(&y[8..16], &x[8..16]);
    }

    #[test]
    fn evaluate_runs_a_small_graph_and_reports_missing_values() {
        let mut b = GraphBuilder::new("t");
        let x = b.input("x", DType::F32, &[2, 3]);
        let w = b.weight("w", DType::F32, &[3, 2]);
        let y = b.node("matmul", &[x, w], &[2, 2], false);
        let z = b.node_with_params("scale", &[y], &[2, 2], true, &[2.0]);
        b.mark_output(z);
        let g = b.build().expect("valid");
        let mut values = HashMap::new();
        values.insert(x, TensorData::F32(vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0]));
        values.insert(w, TensorData::F32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        let out = evaluate(&g, &values).expect("runs");
        assert_eq!(
            out[z.index()],
            Some(TensorData::F32(vec![2.0, 4.0, 6.0, 8.0]))
        );
        values.remove(&w);
        assert!(matches!(
            evaluate(&g, &values),
            Err(ExecError::MissingValue { tensor, .. }) if tensor == w
        ));
    }
}
