//! The gather family: `embedding` (token ids into table rows) and the order-keeping
//! `count_positive` / `compact` pair.

use super::check::{NodeView, F32S};
use super::{OpCall, MAX_COMPACT_ELEMENTS};
use crate::exec::ExecError;
use crate::graph::DType;

/// Resolves `embedding`: u32/i32 ids and a 2-D `[vocab, dim]` table.
pub(super) fn embedding(v: &NodeView<'_>) -> Result<OpCall, ExecError> {
    let (c, ids, table) = (&v.c, v.inputs[0], v.inputs[1]);
    let rows = c.len(ids, &[DType::U32, DType::I32])?;
    c.len(table, v.float)?;
    if table.shape.len() != 2 {
        return Err(c.bad(format!(
            "table {} must be 2-D, has shape {:?}",
            table.id, table.shape
        )));
    }
    let (vocab, dim) = (table.shape[0], table.shape[1]);
    c.same_len(v.out, v.out_len, rows.saturating_mul(dim))?;
    Ok(OpCall::Embedding {
        rows: c.small(rows)?,
        dim: c.small(dim)?,
        vocab: c.small(vocab)?,
    })
}

/// Resolves `count_positive` (when `!keep`) or `compact` (when `keep`).
pub(super) fn compact(v: &NodeView<'_>, keep: bool) -> Result<OpCall, ExecError> {
    let c = &v.c;
    let len = c.len(v.inputs[0], F32S)?;
    if len > MAX_COMPACT_ELEMENTS {
        return Err(c.bad(format!(
            "{len} elements; counts are exact up to {MAX_COMPACT_ELEMENTS}"
        )));
    }
    if !keep {
        c.same_len(v.out, v.out_len, 1)?;
        return Ok(OpCall::CountPositive { len: c.small(len)? });
    }
    let count = v.inputs[1];
    let count_len = c.len(count, F32S)?;
    if count_len != 1 {
        return Err(c.bad(format!(
            "count {} has {count_len} elements, expected 1",
            count.id
        )));
    }
    if v.out_len > len {
        return Err(c.bad(format!(
            "output has {} elements, more than the {len} of its input",
            v.out_len
        )));
    }
    Ok(OpCall::Compact {
        len: c.small(len)?,
        out_len: c.small(v.out_len)?,
    })
}
