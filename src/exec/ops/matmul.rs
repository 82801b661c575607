//! The matmul family: `matmul`, `matmul_bt`, `matmul_packed` (B in the packed
//! layout of [`crate::exec::packed`]), the fused `matmul_gelu` / `matmul_add`, and
//! `attention_causal` (two products and a softmax in one kernel).

use super::check::{Checker, NodeView};
use super::{Epilogue, OpCall, MAX_ATTENTION_HEAD_DIM};
use crate::exec::ExecError;

/// Rows of `a` from its length and inner dimension `k`.
fn rows_of(v: &NodeView<'_>, a_len: u64, k: u64) -> Result<u64, ExecError> {
    a_len.checked_div(k).ok_or_else(|| {
        v.c.bad(format!(
            "input {} has an empty inner dimension",
            v.inputs[0].id
        ))
    })
}

/// Resolves `matmul` (`b` is `[k, n]`) or `matmul_bt` (`b` is `[n, k]`).
pub(super) fn dense(v: &NodeView<'_>, transposed_b: bool) -> Result<OpCall, ExecError> {
    let (c, x, b) = (&v.c, v.inputs[0], v.inputs[1]);
    let a_len = c.len(x, v.float)?;
    c.len(b, v.float)?;
    if b.shape.len() != 2 {
        return Err(c.bad(format!(
            "second input {} must be 2-D, has shape {:?}",
            b.id, b.shape
        )));
    }
    let k = Checker::last_dim(x);
    let m = rows_of(v, a_len, k)?;
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
    c.same_len(v.out, v.out_len, m.saturating_mul(n))?;
    Ok(OpCall::Matmul {
        m: c.small(m)?,
        k: c.small(k)?,
        n: c.small(n)?,
        transposed_b,
    })
}

/// Resolves `matmul_packed`: `n` is the output's last dimension and the packed input
/// must have the packed shape of `[k, n]`.
pub(super) fn packed(v: &NodeView<'_>) -> Result<OpCall, ExecError> {
    let (c, x, packed) = (&v.c, v.inputs[0], v.inputs[1]);
    let a_len = c.len(x, v.float)?;
    c.len(packed, v.float)?;
    let k = Checker::last_dim(x);
    let n = Checker::last_dim(v.out);
    let m = rows_of(v, a_len, k)?;
    c.same_len(v.out, v.out_len, m.saturating_mul(n))?;
    let want = crate::exec::packed::packed_shape(k, n);
    if want.as_ref().map(|s| s.as_slice()) != Some(packed.shape.as_slice()) {
        return Err(c.bad(format!(
            "packed input {} has shape {:?}, a [{m}, {k}] x [{k}, {n}] product needs {want:?}",
            packed.id, packed.shape
        )));
    }
    Ok(OpCall::MatmulPacked {
        m: c.small(m)?,
        k: c.small(k)?,
        n: c.small(n)?,
    })
}

/// Resolves `matmul_gelu` (`(a, b)`) or `matmul_add` (`(residual, a, b)`), and with
/// `bias` `matmul_bias` / `matmul_bias_gelu` (`(a, b, bias)`) or `matmul_add_bias`
/// (`(residual, a, b, bias)`): `b` is `[k, n]`, `k` and `n` multiples of 4, a residual
/// has the output's shape and a bias `n` elements.
pub(super) fn fused(v: &NodeView<'_>, epilogue: Epilogue, bias: bool) -> Result<OpCall, ExecError> {
    let first = usize::from(epilogue == Epilogue::Residual);
    let (c, x, b) = (&v.c, v.inputs[first], v.inputs[first + 1]);
    let a_len = c.len(x, v.float)?;
    c.len(b, v.float)?;
    if b.shape.len() != 2 {
        return Err(c.bad(format!(
            "weight {} must be 2-D, has shape {:?}",
            b.id, b.shape
        )));
    }
    let k = Checker::last_dim(x);
    let m = a_len
        .checked_div(k)
        .ok_or_else(|| c.bad(format!("input {} has an empty inner dimension", x.id)))?;
    let (bk, n) = (b.shape[0], b.shape[1]);
    if bk != k {
        return Err(c.bad(format!(
            "inner dimensions differ: a {:?} has k = {k}, b {:?} has {bk}",
            x.shape, b.shape
        )));
    }
    if !k.is_multiple_of(4) || !n.is_multiple_of(4) {
        return Err(c.bad(format!(
            "the fused matmul needs k and n multiples of 4, got k = {k}, n = {n}"
        )));
    }
    c.same_len(v.out, v.out_len, m.saturating_mul(n))?;
    if epilogue == Epilogue::Residual {
        let residual = v.inputs[0];
        let len = c.len(residual, v.float)?;
        if len != v.out_len {
            return Err(c.bad(format!(
                "residual {} has {len} elements, the product {}",
                residual.id, v.out_len
            )));
        }
    }
    if bias {
        let row = v.inputs[first + 2];
        let len = c.len(row, v.float)?;
        if len != n {
            return Err(c.bad(format!(
                "bias {} has {len} elements, the product has {n} columns",
                row.id
            )));
        }
    }
    Ok(OpCall::MatmulFused {
        bias,
        m: c.small(m)?,
        k: c.small(k)?,
        n: c.small(n)?,
        epilogue,
    })
}

/// Resolves `layer_norm_matmul_bias` / `layer_norm_matmul_bias_gelu`:
/// `(x [m, k], gain [k], beta [k], w [k, n], bias [n]) → out [m, n]`, `k` and `n`
/// multiples of 4; `params[0]` the norm's epsilon (default [`super::DEFAULT_EPS`]).
pub(super) fn norm_fused(v: &NodeView<'_>, gelu: bool) -> Result<OpCall, ExecError> {
    let (c, x) = (&v.c, v.inputs[0]);
    let a_len = c.len(x, v.float)?;
    let k = Checker::last_dim(x);
    let m = a_len
        .checked_div(k)
        .ok_or_else(|| c.bad(format!("input {} has an empty inner dimension", x.id)))?;
    for (what, t) in [("gain", v.inputs[1]), ("beta", v.inputs[2])] {
        let len = c.len(t, v.float)?;
        if len != k {
            return Err(c.bad(format!(
                "{what} {} has {len} elements, the rows of {} have {k}",
                t.id, x.id
            )));
        }
    }
    let w = v.inputs[3];
    c.len(w, v.float)?;
    if w.shape.len() != 2 || w.shape[0] != k {
        return Err(c.bad(format!(
            "weight {} must be [{k}, n], has shape {:?}",
            w.id, w.shape
        )));
    }
    let n = w.shape[1];
    if !k.is_multiple_of(4) || !n.is_multiple_of(4) {
        return Err(c.bad(format!(
            "the fused matmul needs k and n multiples of 4, got k = {k}, n = {n}"
        )));
    }
    c.same_len(v.out, v.out_len, m.saturating_mul(n))?;
    let bias = v.inputs[4];
    let len = c.len(bias, v.float)?;
    if len != n {
        return Err(c.bad(format!(
            "bias {} has {len} elements, the product has {n} columns",
            bias.id
        )));
    }
    Ok(OpCall::NormMatmul {
        m: c.small(m)?,
        k: c.small(k)?,
        n: c.small(n)?,
        gelu,
        eps: v.param(0, super::DEFAULT_EPS),
    })
}

/// Resolves `attention_causal`: `qkv [seq, 3·width] → out [seq, width]` with
/// `params[0]` heads (required) dividing `width`, the head width a multiple of 4 and at
/// most [`MAX_ATTENTION_HEAD_DIM`]; `params[1]` the score scale (default
/// `1/√head_dim`).
pub(super) fn attention(v: &NodeView<'_>) -> Result<OpCall, ExecError> {
    let (c, qkv) = (&v.c, v.inputs[0]);
    let len = c.len(qkv, v.float)?;
    let cols = Checker::last_dim(qkv);
    if !cols.is_multiple_of(3) {
        return Err(c.bad(format!(
            "qkv {} has {cols} columns, not three equal parts",
            qkv.id
        )));
    }
    let width = cols / 3;
    let seq = len / cols;
    let heads_param = v
        .params
        .first()
        .copied()
        .ok_or_else(|| c.bad("attention_causal needs params[0], the heads".to_string()))?;
    if !(heads_param >= 1.0 && heads_param.fract() == 0.0 && heads_param <= u32::MAX as f32) {
        return Err(c.bad(format!(
            "heads must be a whole number >= 1, got {heads_param}"
        )));
    }
    let heads = heads_param as u64;
    if !width.is_multiple_of(heads) {
        return Err(c.bad(format!("width {width} is not divisible by {heads} heads")));
    }
    let head_dim = width / heads;
    if !head_dim.is_multiple_of(4) || head_dim > MAX_ATTENTION_HEAD_DIM {
        return Err(c.bad(format!(
            "head width {head_dim} must be a multiple of 4 and at most {MAX_ATTENTION_HEAD_DIM}"
        )));
    }
    c.same_len(v.out, v.out_len, seq.saturating_mul(width))?;
    let scale = v.param(1, 1.0 / (head_dim as f32).sqrt());
    Ok(OpCall::Attention {
        seq: c.small(seq)?,
        heads: c.small(heads)?,
        head_dim: c.small(head_dim)?,
        scale,
    })
}

#[cfg(test)]
mod tests {
    use crate::exec::{resolve, Epilogue, ExecError, OpCall};
    use crate::graph::{DType, GraphBuilder, NodeId};

    #[test]
    fn fused_matmuls_resolve_and_refuse_widths_the_vector_loads_cannot_take() {
        let mut b = GraphBuilder::new("t");
        let r = b.input("r", DType::F32, &[3, 8]);
        let a = b.input("a", DType::F32, &[3, 4]);
        let w = b.weight("w", DType::F32, &[4, 8]);
        let odd = b.weight("odd", DType::F32, &[4, 6]);
        b.node("matmul_add", &[r, a, w], &[3, 8], true);
        b.node("matmul_gelu", &[a, odd], &[3, 6], false);
        b.node("matmul_add", &[a, a, w], &[3, 8], false);
        let g = b.build().expect("valid");
        assert_eq!(
            resolve(&g, 0),
            Ok(OpCall::MatmulFused {
                m: 3,
                k: 4,
                n: 8,
                epilogue: Epilogue::Residual,
                bias: false
            })
        );
        assert!(resolve(&g, 0).is_ok_and(|c| c.has_inplace_kernel()));
        for (step, want) in [(1, "multiples of 4"), (2, "residual")] {
            match resolve(&g, step) {
                Err(ExecError::BadShape { node, problem, .. }) => {
                    assert_eq!(node, NodeId(step as u32));
                    assert!(problem.contains(want), "{problem}");
                }
                other => panic!("node {step}: expected a refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn bias_epilogues_resolve_and_refuse_a_bias_of_another_width() {
        let mut b = GraphBuilder::new("t");
        let r = b.input("r", DType::F32, &[3, 8]);
        let a = b.input("a", DType::F32, &[3, 4]);
        let w = b.weight("w", DType::F32, &[4, 8]);
        let bias = b.weight("bias", DType::F32, &[8]);
        let short = b.weight("short", DType::F32, &[4]);
        b.node("matmul_bias", &[a, w, bias], &[3, 8], false);
        b.node("matmul_add_bias", &[r, a, w, bias], &[3, 8], true);
        b.node("matmul_bias_gelu", &[a, w, short], &[3, 8], false);
        let g = b.build().expect("valid");
        assert_eq!(
            resolve(&g, 0),
            Ok(OpCall::MatmulFused {
                m: 3,
                k: 4,
                n: 8,
                epilogue: Epilogue::Plain,
                bias: true
            })
        );
        assert!(resolve(&g, 1).is_ok_and(|c| c.has_inplace_kernel()));
        match resolve(&g, 2) {
            Err(ExecError::BadShape { problem, .. }) => {
                assert!(problem.contains("bias"), "{problem}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn attention_resolves_heads_and_refuses_bad_ones() {
        let mut b = GraphBuilder::new("t");
        let qkv = b.input("qkv", DType::F32, &[5, 48]);
        let narrow = b.input("narrow", DType::F32, &[5, 12]);
        b.node_with_params("attention_causal", &[qkv], &[5, 16], false, &[2.0]);
        b.node("attention_causal", &[qkv], &[5, 16], false);
        b.node_with_params("attention_causal", &[qkv], &[5, 16], false, &[3.0]);
        b.node_with_params("attention_causal", &[qkv], &[5, 16], false, &[1.5]);
        b.node_with_params("attention_causal", &[narrow], &[5, 4], false, &[2.0]);
        let g = b.build().expect("valid");
        assert_eq!(
            resolve(&g, 0),
            Ok(OpCall::Attention {
                seq: 5,
                heads: 2,
                head_dim: 8,
                scale: 1.0 / 8f32.sqrt()
            })
        );
        for (step, want) in [
            (1, "params[0]"),
            (2, "not divisible"),
            (3, "whole number"),
            (4, "multiple of 4"),
        ] {
            match resolve(&g, step) {
                Err(ExecError::BadShape { problem, .. }) => {
                    assert!(problem.contains(want), "node {step}: {problem}")
                }
                other => panic!("node {step}: expected a refusal, got {other:?}"),
            }
        }
    }
}
