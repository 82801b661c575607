//! The paged KV-cache family (`kv_self`, `kv_attend`, `kv_attend_out`): causal
//! attention of a chunk of new queries against a KV cache kept in pages outside the
//! plan, read through a block table (see `crate::kv` and `shaders/kv_*.wgsl`).

use super::check::{Checker, NodeView, F16S, F32S};
use super::{Op, OpCall, MAX_ATTENTION_HEAD_DIM};
use crate::exec::ExecError;
use crate::graph::DType;

/// Words of the block table's header (`past`, mapped blocks, block tokens, 0).
pub const KV_TABLE_HEADER: u64 = 4;

/// Floats of one (query, head) row of the attention state: `[max, sum, 0, 0]` then
/// the head's `head_dim` accumulators.
pub fn kv_state_row(head_dim: u64) -> u64 {
    head_dim + 4
}

/// The input that is `qkv` for a KV-cache op (its storage type is that input's, see
/// [`super::storage_of`]); `None` for the other ops.
pub(super) fn qkv_index(op: Op) -> Option<usize> {
    match op {
        Op::KvSelf | Op::KvSelfAttend | Op::KvSelfAttendOut => Some(0),
        Op::KvAttend | Op::KvAttendOut => Some(1),
        _ => None,
    }
}

/// The storage type of a KV-cache node, its `qkv` input's (f16 or f32): the pages and
/// the normalised output are stored as it, the state is f32 either way.
fn storage(v: &NodeView<'_>, qkv: usize) -> &'static [DType] {
    if v.inputs[qkv].dtype == DType::F16 {
        F16S
    } else {
        F32S
    }
}

/// Checks the output's element type: `float` for a normalised output, f32 for a state.
fn out_dtype(v: &NodeView<'_>, float: &'static [DType], normalize: bool) -> Result<(), ExecError> {
    v.c.len(v.out, if normalize { float } else { F32S })
        .map(|_| ())
}

/// `params[i]` as a whole number in `min..=u32::MAX` (default `default` when absent).
fn whole(
    v: &NodeView<'_>,
    i: usize,
    what: &str,
    min: f32,
    default: Option<f32>,
) -> Result<u32, ExecError> {
    let value = match (v.params.get(i).copied(), default) {
        (Some(p), _) => p,
        (None, Some(d)) => d,
        (None, None) => {
            return Err(v.c.bad(format!("{} needs params[{i}], the {what}", v.c.op)));
        }
    };
    if !(value >= min && value.fract() == 0.0 && value <= 16_777_216.0) {
        return Err(v.c.bad(format!(
            "{what} (params[{i}]) must be a whole number in {min}..=2^24, got {value}"
        )));
    }
    Ok(value as u32)
}

/// `qkv [n, 3·width]` with `heads` heads: `(n, head_dim)`, the head width a multiple
/// of 4 and at most [`MAX_ATTENTION_HEAD_DIM`].
fn qkv_dims(v: &NodeView<'_>, index: usize, heads: u32) -> Result<(u64, u64), ExecError> {
    let (c, qkv) = (&v.c, v.inputs[index]);
    let len = c.len(qkv, &[DType::F32, DType::F16])?;
    let cols = Checker::last_dim(qkv);
    if !cols.is_multiple_of(3) {
        return Err(c.bad(format!(
            "qkv {} has {cols} columns, not three equal parts",
            qkv.id
        )));
    }
    let width = cols / 3;
    let heads = u64::from(heads);
    if !width.is_multiple_of(heads) {
        return Err(c.bad(format!("width {width} is not divisible by {heads} heads")));
    }
    let head_dim = width / heads;
    if !head_dim.is_multiple_of(4) || head_dim == 0 || head_dim > MAX_ATTENTION_HEAD_DIM {
        return Err(c.bad(format!(
            "head width {head_dim} must be a multiple of 4 and at most {MAX_ATTENTION_HEAD_DIM}"
        )));
    }
    Ok((len / cols, head_dim))
}

/// Resolves `kv_self`: `qkv [n, 3·width] → state [n, heads, head_dim + 4]`;
/// `params[0]` heads, `params[1]` the score scale (default `1/√head_dim`).
pub(super) fn self_attention(v: &NodeView<'_>) -> Result<OpCall, ExecError> {
    let c = &v.c;
    let heads = whole(v, 0, "heads", 1.0, None)?;
    let (n, head_dim) = qkv_dims(v, 0, heads)?;
    out_dtype(v, storage(v, 0), false)?;
    let state = n * u64::from(heads) * kv_state_row(head_dim);
    c.same_len(v.out, v.out_len, state)?;
    Ok(OpCall::KvSelf {
        n: c.small(n)?,
        heads,
        head_dim: c.small(head_dim)?,
        scale: v.param(1, 1.0 / (head_dim as f32).sqrt()),
    })
}

/// Resolves `kv_attend` (`normalize == false`: output the updated state, in place or
/// not) and `kv_attend_out` (`normalize`: output `[n, width]`): inputs `(state, qkv,
/// table u32, page)`, qkv and the page f32 or both f16 (then a normalised output is f16;
/// the state is f32 either way); `params[0]` heads, `params[1]` layer, `params[2]` the page's
/// number in the block table, `params[3]` the score scale (default `1/√head_dim`).
pub(super) fn attend(v: &NodeView<'_>, normalize: bool) -> Result<OpCall, ExecError> {
    let c = &v.c;
    let heads = whole(v, 0, "heads", 1.0, None)?;
    let layer = whole(v, 1, "layer", 0.0, Some(0.0))?;
    let page = whole(v, 2, "page", 0.0, Some(0.0))?;
    let (n, head_dim) = qkv_dims(v, 1, heads)?;
    let state = n * u64::from(heads) * kv_state_row(head_dim);
    let state_len = c.len(v.inputs[0], F32S)?;
    if state_len != state {
        return Err(c.bad(format!(
            "state {} has {state_len} elements, expected {state} ({n} queries x {heads} heads x {})",
            v.inputs[0].id,
            kv_state_row(head_dim)
        )));
    }
    let table_len = c.len(v.inputs[2], &[DType::U32])?;
    if table_len < KV_TABLE_HEADER {
        return Err(c.bad(format!(
            "block table {} has {table_len} words, fewer than its {KV_TABLE_HEADER}-word header",
            v.inputs[2].id
        )));
    }
    let float = storage(v, 1);
    let page_len = c.len(v.inputs[3], float)?;
    out_dtype(v, float, normalize)?;
    c.small(page_len)?;
    let want = if normalize {
        n * u64::from(heads) * head_dim
    } else {
        state
    };
    c.same_len(v.out, v.out_len, want)?;
    Ok(OpCall::KvAttend {
        n: c.small(n)?,
        heads,
        head_dim: c.small(head_dim)?,
        layer,
        page,
        scale: v.param(3, 1.0 / (head_dim as f32).sqrt()),
        normalize,
    })
}

/// Resolves `kv_self_attend` (`normalize == false`: output the state after the first
/// page) and `kv_self_attend_out` (`normalize`: output `[n, width]`): inputs `(qkv,
/// table u32, page)`, typed as `kv_attend`'s; params as `kv_attend`'s.
pub(super) fn self_attend(v: &NodeView<'_>, normalize: bool) -> Result<OpCall, ExecError> {
    let c = &v.c;
    let heads = whole(v, 0, "heads", 1.0, None)?;
    let layer = whole(v, 1, "layer", 0.0, Some(0.0))?;
    let page = whole(v, 2, "page", 0.0, Some(0.0))?;
    let (n, head_dim) = qkv_dims(v, 0, heads)?;
    let table_len = c.len(v.inputs[1], &[DType::U32])?;
    if table_len < KV_TABLE_HEADER {
        return Err(c.bad(format!(
            "block table {} has {table_len} words, fewer than its {KV_TABLE_HEADER}-word header",
            v.inputs[1].id
        )));
    }
    let float = storage(v, 0);
    let page_len = c.len(v.inputs[2], float)?;
    out_dtype(v, float, normalize)?;
    c.small(page_len)?;
    let want = if normalize {
        n * u64::from(heads) * head_dim
    } else {
        n * u64::from(heads) * kv_state_row(head_dim)
    };
    c.same_len(v.out, v.out_len, want)?;
    Ok(OpCall::KvSelfAttend {
        n: c.small(n)?,
        heads,
        head_dim: c.small(head_dim)?,
        layer,
        page,
        scale: v.param(3, 1.0 / (head_dim as f32).sqrt()),
        normalize,
    })
}

#[cfg(test)]
mod tests {
    use crate::exec::{resolve, ExecError, OpCall};
    use crate::graph::{DType, GraphBuilder};

    #[test]
    fn kv_ops_resolve_their_dimensions_and_refuse_bad_shapes() {
        let mut b = GraphBuilder::new("t");
        let qkv = b.input("qkv", DType::F32, &[3, 96]);
        let table = b.weight("table", DType::U32, &[10]);
        let short = b.weight("short", DType::U32, &[3]);
        let page = b.weight("page", DType::F32, &[1024]);
        let s = b.node_with_params("kv_self", &[qkv], &[3, 2, 20], false, &[2.0]);
        let s2 = b.node_with_params(
            "kv_attend",
            &[s, qkv, table, page],
            &[3, 2, 20],
            true,
            &[2.0, 1.0, 0.0],
        );
        b.node_with_params(
            "kv_attend_out",
            &[s2, qkv, table, page],
            &[3, 32],
            false,
            &[2.0, 1.0, 1.0],
        );
        b.node_with_params(
            "kv_attend_out",
            &[s2, qkv, short, page],
            &[3, 32],
            false,
            &[2.0],
        );
        b.node_with_params(
            "kv_attend",
            &[s2, qkv, table, page],
            &[3, 2, 20],
            false,
            &[2.0, 0.5],
        );
        b.node_with_params("kv_self", &[qkv], &[3, 32], false, &[2.0]);
        let g = b.build().expect("valid");
        assert_eq!(
            resolve(&g, 0),
            Ok(OpCall::KvSelf {
                n: 3,
                heads: 2,
                head_dim: 16,
                scale: 0.25
            })
        );
        assert_eq!(
            resolve(&g, 2),
            Ok(OpCall::KvAttend {
                n: 3,
                heads: 2,
                head_dim: 16,
                layer: 1,
                page: 1,
                scale: 0.25,
                normalize: true
            })
        );
        assert!(resolve(&g, 1).is_ok_and(|c| c.has_inplace_kernel()));
        assert!(resolve(&g, 2).is_ok_and(|c| !c.has_inplace_kernel()));
        for (step, want) in [(3, "header"), (4, "whole number"), (5, "elements")] {
            match resolve(&g, step) {
                Err(ExecError::BadShape { problem, .. }) => {
                    assert!(problem.contains(want), "node {step}: {problem}")
                }
                other => panic!("node {step}: expected a refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn f16_kv_nodes_take_f16_qkv_and_pages_and_an_f32_state() {
        let mut b = GraphBuilder::new("t");
        let qkv = b.input("qkv", DType::F16, &[3, 96]);
        let table = b.weight("table", DType::U32, &[10]);
        let page = b.weight("page", DType::F16, &[1024]);
        let wide_page = b.weight("wide", DType::F32, &[1024]);
        let s = b.node_with_params("kv_self", &[qkv], &[3, 2, 20], false, &[2.0]);
        let out = b.node_with_params(
            "kv_attend_out",
            &[s, qkv, table, page],
            &[3, 32],
            false,
            &[2.0],
        );
        b.node_with_params(
            "kv_self_attend",
            &[qkv, table, wide_page],
            &[3, 2, 20],
            false,
            &[2.0],
        );
        b.node_with_params(
            "kv_attend_out",
            &[s, qkv, table, page],
            &[3, 32],
            false,
            &[2.0],
        );
        let half_state = b.node_with_params("kv_self", &[qkv], &[3, 2, 20], false, &[2.0]);
        let mut g = b.build().expect("valid");
        for id in [out, half_state] {
            let t = &mut g.tensors[id.index()];
            t.dtype = DType::F16;
            t.size /= 2;
        }
        assert!(resolve(&g, 0).is_ok());
        assert_eq!(
            crate::exec::storage_of(&g, 0),
            crate::exec::StorageType::F16
        );
        assert!(resolve(&g, 1).is_ok());
        assert_eq!(
            crate::exec::storage_of(&g, 1),
            crate::exec::StorageType::F16
        );
        // An f32 page against f16 qkv, an f32 normalised output, an f16 state.
        for step in [2, 3, 4] {
            match resolve(&g, step) {
                Err(ExecError::BadShape { problem, .. }) => {
                    assert!(
                        problem.contains("expected one of"),
                        "node {step}: {problem}"
                    )
                }
                other => panic!("node {step}: expected a refusal, got {other:?}"),
            }
        }
    }
}
