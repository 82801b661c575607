//! The matmul family: `matmul`, `matmul_bt` and `matmul_packed` (B in the packed
//! layout of [`crate::exec::packed`]).

use super::check::{Checker, NodeView, F32S};
use super::OpCall;
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
    let a_len = c.len(x, F32S)?;
    c.len(b, F32S)?;
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
    let a_len = c.len(x, F32S)?;
    c.len(packed, F32S)?;
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
