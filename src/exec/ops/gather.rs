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

/// Resolves `count_positive` (when `!keep`) or `compact` (when `keep`). The values
/// (and `compact`'s output) are f32 or f16 alike; the count is f32 either way.
pub(super) fn compact(v: &NodeView<'_>, keep: bool) -> Result<OpCall, ExecError> {
    let c = &v.c;
    let x = v.inputs[0];
    let len = c.len(x, &[DType::F32, DType::F16])?;
    if len > MAX_COMPACT_ELEMENTS {
        return Err(c.bad(format!(
            "{len} elements; counts are exact up to {MAX_COMPACT_ELEMENTS}"
        )));
    }
    if !keep {
        c.len(v.out, F32S)?;
        c.same_len(v.out, v.out_len, 1)?;
        return Ok(OpCall::CountPositive { len: c.small(len)? });
    }
    if x.dtype != v.out.dtype {
        return Err(c.bad(format!(
            "values {} are {:?} but the output {} is {:?}; compact keeps the type",
            x.id, x.dtype, v.out.id, v.out.dtype
        )));
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

#[cfg(test)]
mod tests {
    use crate::exec::{resolve, storage_of, ExecError, OpCall, StorageType};
    use crate::graph::{DType, Graph, GraphBuilder};

    /// x [n] → count_positive → compact(x, count) [n], with x (and compact's output)
    /// stored as `values` and the count as `count`.
    fn compaction(n: u64, values: DType, count: DType) -> Graph {
        let mut b = GraphBuilder::new("compaction");
        let x = b.input("x", DType::F32, &[n]);
        let c = b.node("count_positive", &[x], &[1], false);
        b.node("compact", &[x, c], &[n], false);
        let mut g = b.build().expect("valid");
        for t in &mut g.tensors {
            t.dtype = if t.id == c { count } else { values };
            t.size = t.shape.iter().product::<u64>() * t.dtype.size();
        }
        g
    }

    #[test]
    fn f16_values_with_an_f32_count_resolve_to_the_f16_kernels() {
        let g = compaction(10, DType::F16, DType::F32);
        assert_eq!(resolve(&g, 0), Ok(OpCall::CountPositive { len: 10 }));
        assert_eq!(
            resolve(&g, 1),
            Ok(OpCall::Compact {
                len: 10,
                out_len: 10
            })
        );
        // Both run in the values' type, the count's f32 notwithstanding.
        assert_eq!(storage_of(&g, 0), StorageType::F16);
        assert_eq!(storage_of(&g, 1), StorageType::F16);
        let g = compaction(10, DType::F32, DType::F32);
        assert_eq!(storage_of(&g, 0), StorageType::F32);
    }

    #[test]
    fn an_f16_count_or_a_changed_type_is_refused() {
        // A count stored as f16 would be exact only up to 2048.
        let g = compaction(10, DType::F16, DType::F16);
        assert!(matches!(resolve(&g, 0), Err(ExecError::BadShape { .. })));
        // compact keeps the values' type.
        let mut g = compaction(10, DType::F16, DType::F32);
        let out = g.nodes[1].output;
        let t = &mut g.tensors[out.index()];
        t.dtype = DType::F32;
        t.size = 40;
        let err = resolve(&g, 1).expect_err("a changed type");
        assert!(err.to_string().contains("keeps the type"), "{err}");
    }
}
