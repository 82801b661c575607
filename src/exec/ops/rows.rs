//! The row family: ops over rows of the last dimension (`softmax`, `softmax_causal`,
//! `layer_norm`, `rms_norm`, `rope`).

use super::check::{Checker, NodeView};
use super::{OpCall, DEFAULT_EPS, DEFAULT_ROPE_BASE};
use crate::exec::ExecError;

/// Resolves a softmax node; a causal one's period is the second-to-last dimension.
pub(super) fn softmax(v: &NodeView<'_>, causal: bool) -> Result<OpCall, ExecError> {
    let (c, x) = (&v.c, v.inputs[0]);
    let len = c.len(x, v.float)?;
    c.same_len(v.out, v.out_len, len)?;
    let cols = Checker::last_dim(x);
    let period = if x.shape.len() >= 2 {
        x.shape[x.shape.len() - 2]
    } else {
        1
    };
    Ok(OpCall::Softmax {
        rows: c.small(len / cols)?,
        cols: c.small(cols)?,
        causal_period: if causal { Some(c.small(period)?) } else { None },
    })
}

/// Resolves a norm node: every input after `x` (gain, bias) is one row long.
pub(super) fn norm(v: &NodeView<'_>, layer: bool) -> Result<OpCall, ExecError> {
    let (c, x) = (&v.c, v.inputs[0]);
    let len = c.len(x, v.float)?;
    c.same_len(v.out, v.out_len, len)?;
    let cols = Checker::last_dim(x);
    for &w in &v.inputs[1..] {
        let wl = c.len(w, v.float)?;
        if wl != cols {
            return Err(c.bad(format!(
                "gain/bias {} has {wl} elements, rows have {cols}",
                w.id
            )));
        }
    }
    let (rows, cols) = (c.small(len / cols)?, c.small(cols)?);
    let eps = v.param(0, DEFAULT_EPS);
    Ok(if layer {
        OpCall::LayerNorm { rows, cols, eps }
    } else {
        OpCall::RmsNorm { rows, cols, eps }
    })
}

/// Resolves a rope node: rows of an even width.
pub(super) fn rope(v: &NodeView<'_>) -> Result<OpCall, ExecError> {
    let (c, x) = (&v.c, v.inputs[0]);
    let len = c.len(x, v.float)?;
    c.same_len(v.out, v.out_len, len)?;
    let dim = Checker::last_dim(x);
    if !dim.is_multiple_of(2) {
        return Err(c.bad(format!("rope needs an even last dimension, got {dim}")));
    }
    Ok(OpCall::Rope {
        rows: c.small(len / dim)?,
        dim: c.small(dim)?,
        base: v.param(0, DEFAULT_ROPE_BASE),
    })
}
