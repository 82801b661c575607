//! The elementwise family: unary ops (`copy`, `scale`, `relu`, `gelu`, `silu`) and
//! binary ops with a repeating second input (`add`, `mul`).

use super::check::NodeView;
use super::{BinaryOp, OpCall, UnaryOp};
use crate::exec::ExecError;

/// Resolves a unary node: output as long as input 0; `scale` needs `params[0]`.
pub(super) fn unary(v: &NodeView<'_>, op: UnaryOp) -> Result<OpCall, ExecError> {
    let c = &v.c;
    let len = c.len(v.inputs[0], v.float)?;
    c.same_len(v.out, v.out_len, len)?;
    let alpha = if op == UnaryOp::Scale {
        *v.params
            .first()
            .ok_or_else(|| c.bad("scale needs params[0], the factor".to_string()))?
    } else {
        1.0
    };
    Ok(OpCall::Unary {
        op,
        len: c.small(len)?,
        alpha,
    })
}

/// Resolves a binary node: input 1's length divides input 0's, the output's.
pub(super) fn binary(v: &NodeView<'_>, op: BinaryOp) -> Result<OpCall, ExecError> {
    let c = &v.c;
    let len = c.len(v.inputs[0], v.float)?;
    let len_b = c.len(v.inputs[1], v.float)?;
    c.same_len(v.out, v.out_len, len)?;
    if !len.is_multiple_of(len_b) {
        return Err(c.bad(format!(
            "second input has {len_b} elements, which does not divide {len}"
        )));
    }
    Ok(OpCall::Binary {
        op,
        len: c.small(len)?,
        len_b: c.small(len_b)?,
    })
}
